"""The sampled readouts RL moves first (rubricflow.evaluation.heldout): sampled accuracy, pass@k and clean pass@k by
hand, per task and per question type."""

import pytest

from rubricflow.data.schema import Sample
from rubricflow.evaluation.heldout import group_keys, greedy_metrics, sampled_metrics

COUNT = {"perception": [["red", 2], ["blue", 1]], "intermediate": [], "target": "red", "question_type": "count"}
DIFF = {"perception": [["A", 5], ["B", 2], ["C", 4]], "intermediate": [["max", 5], ["min", 2], ["diff", 3]],
        "target": None, "question_type": "diff"}
SAMPLES = [Sample("c1", [], "How many red?", "2", "int", "counting", COUNT),
           Sample("b1", [], "tallest minus shortest?", "3", "int", "barchart", DIFF)]
CLEAN_COUNT = r"red = 2, blue = 1. so red = 2. \boxed{2}"
LUCKY_COUNT = r"red = 3, blue = 1. so red = 2. \boxed{2}"  # right answer, a wrong reading
CLEAN_DIFF = r"A = 5, B = 2, C = 4. max = 5, min = 2. diff = 3. \boxed{3}"


def test_sampled_accuracy_pass_at_k_and_clean_pass_at_k_by_hand():
    responses = [[LUCKY_COUNT, r"\boxed{1}", LUCKY_COUNT, r"\boxed{7}"],  # 2 of 4 right, none clean
                 [CLEAN_DIFF, r"\boxed{1}", r"\boxed{2}", r"\boxed{0}"]]  # 1 of 4 right, and clean
    m = sampled_metrics(SAMPLES, responses)
    assert m["k"] == 4
    assert m["sampled_accuracy/counting"] == 0.5 and m["pass_at_k/counting"] == 1.0
    assert m["clean_pass_at_k/counting"] == 0.0  # right for the wrong reasons
    assert m["sampled_accuracy/qtype_diff"] == 0.25 and m["clean_pass_at_k/qtype_diff"] == 1.0
    assert m["sampled_accuracy"] == pytest.approx(0.375) and m["pass_at_k"] == 1.0 and m["clean_pass_at_k"] == 0.5
    with pytest.raises(ValueError, match="2 samples but 1 response lists"):
        sampled_metrics(SAMPLES, responses[:1])


def test_greedy_metrics_per_task_and_question_type():
    assert group_keys(SAMPLES[1]) == ["overall", "barchart", "qtype_diff"]
    m = greedy_metrics(SAMPLES, [CLEAN_COUNT, r"\boxed{4}"])
    assert m == {"accuracy/barchart": 0.0, "accuracy/counting": 1.0, "accuracy/overall": 0.5,
                 "accuracy/qtype_count": 1.0, "accuracy/qtype_diff": 0.0}


TALLEST = {"perception": [["A", 5], ["B", 2], ["C", 4]], "intermediate": [["max", 5]], "target": None,
           "question_type": "tallest"}


def test_answer_facts_are_the_values_the_answer_uses():
    from rubricflow.evaluation.trace_check import answer_facts

    assert answer_facts({**COUNT, "task": "counting"}) == {"red": 2}
    assert answer_facts({**TALLEST, "task": "barchart"}) == {"A": 5, "max": 5}
    assert answer_facts({**DIFF, "task": "barchart"}) == {"A": 5, "B": 2, "max": 5, "min": 2, "diff": 3}
    bar_sum = {"task": "barchart", "question_type": "sum", "perception": [["A", 5], ["B", 2], ["C", 4]],
               "intermediate": [["s", 7], ["total", 11]]}
    assert answer_facts(bar_sum) == {"A": 5, "B": 2, "C": 4, "s": 7, "total": 11}  # every bar feeds the sum
    geo = {"task": "geometry", "perception": [["P", [1, 2]]], "intermediate": [["area", 3]]}
    assert answer_facts(geo) == {"P": [1, 2], "area": 3}  # every fact feeds a geometry answer


def test_answer_relevant_flaws_ignore_unused_misreads_and_catch_shortcuts():
    from rubricflow.evaluation.trace_check import answer_relevant_flaws, trace_flaws

    count = {**COUNT, "task": "counting"}
    off_target = r"red = 2, blue = 3. so red = 2. \boxed{2}"  # misreads blue, which the answer does not use
    assert trace_flaws(count, off_target) and answer_relevant_flaws(count, off_target) == []
    assert answer_relevant_flaws(count, LUCKY_COUNT) == ["red stated as 3, 2, true 2"]
    # shortcuts: a bare answer, an empty trace, a template of zeros that happens to box the right count
    assert answer_relevant_flaws(count, r"\boxed{2}") == ["red not stated"]
    assert answer_relevant_flaws(count, "") == ["red not stated"]
    assert answer_relevant_flaws(count, r"red = 0, green = 0, blue = 0. so red = 0. \boxed{2}")
    diff = {**DIFF, "task": "barchart"}
    assert answer_relevant_flaws(diff, CLEAN_DIFF) == []
    # C misread (4 -> 3) is not used by tallest - shortest; B misread is
    assert answer_relevant_flaws(diff, r"A = 5, B = 2, C = 3. max = 5, min = 2. diff = 3. \boxed{3}") == []
    assert answer_relevant_flaws(diff, r"A = 5, B = 1, C = 4. max = 5, min = 2. diff = 3. \boxed{3}") == [
        "B stated as 1, true 2"]


def test_relevant_flaw_rate_pools_the_correct_completions_of_a_group():
    samples = [Sample("c1", [], "How many red?", "2", "int", "counting", {**COUNT, "task": "counting"}),
               Sample("b1", [], "tallest minus shortest?", "3", "int", "barchart", {**DIFF, "task": "barchart"})]
    responses = [[LUCKY_COUNT, CLEAN_COUNT, r"red = 2, blue = 3. so red = 2. \boxed{2}", r"\boxed{1}"],
                 [r"\boxed{1}", r"\boxed{2}", r"\boxed{0}", r"\boxed{4}"]]  # no correct completion
    m = sampled_metrics(samples, responses)
    assert m["relevant_flaw_rate/counting"] == pytest.approx(1 / 3)  # 3 correct, one misreads red
    assert "relevant_flaw_rate/barchart" not in m  # undefined without a correct completion, never 0
    assert m["relevant_flaw_rate"] == pytest.approx(1 / 3)
