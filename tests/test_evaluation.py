"""The sampled readouts RL moves first (rubricflow.evaluation): sampled accuracy, pass@k and clean pass@k by hand,
per task and per question type."""

import pytest

from rubricflow.data.schema import Sample
from rubricflow.evaluation import group_keys, greedy_metrics, sampled_metrics

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
