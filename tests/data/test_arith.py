"""The text task `arith`: its facts, its gold traces, its validation, and a reward that never pays for skipping work.

The reward probes use the programmatic judge and the text pool (rubricflow/methods/rucl/resources/rubric_pool_text.json), for
two tier splits, at lambda_t 0 and 0.5: the correct reasoned trace earns strictly more than a bare correct answer,
and than an empty response. A flaw with the right answer (a wrong *given* value, a wrong *computed* value) earns
strictly less once lambda_t > 0; at lambda_t 0 (before the curriculum switch, when the advanced tier has no weight:
the paper's design) it earns less exactly when a *foundational* rubric catches it (the wrong given value under the
count-like split, where W01 is foundational) and as much as the gold trace otherwise. Inside one GRPO group of these
responses the gold trace's advantage is the largest, tied only with such a not-yet-weighted flaw: group centring
keeps the rubric term because it differs between the group's responses.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from statistics import mean, pstdev

import pytest

from rubricflow.data.arith import DEMO, OPS, gen_arith, task_demo
from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.traces import parse_claims, render_trace
from rubricflow.evaluation.answers import outcome_score
from rubricflow.evaluation.trace_check import trace_flaws
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.judge.protocol import JudgeRequest
from rubricflow.methods.rucl.rewards import compute_reward, tier_map
from rubricflow.methods.rucl.rubrics.pool import load_default_pool

TEXT_POOL = "rubricflow/methods/rucl/resources/rubric_pool_text.json"


def test_problems_are_deterministic_consistent_and_non_negative():
    for seed in range(200):
        a = gen_arith(random.Random(seed))
        assert a == gen_arith(random.Random(seed))
        image, question, answer, atype, facts = a
        assert image is None and atype == "int"
        values = {k: v for k, v in facts["perception"] + facts["intermediate"]}
        for key, op, x, y in facts["steps"]:
            assert values[key] == OPS[op](values[x], values[y])
            assert f"{key} = {x} {op} {y}" in question  # the operation is stated, the number is to compute
        assert int(answer) == values["t"] >= 0 and values["s"] >= 0
        for k in ("a", "b", "c"):
            assert f"{k} = {values[k]}" in question


def test_gold_trace_passes_every_check_and_the_strict_verifier():
    judge = ProgrammaticJudge("problem")
    pool = load_default_pool(TEXT_POOL).rubrics
    for seed in range(40):
        _, q, ans, _, facts = gen_arith(random.Random(seed))
        gold = render_trace(facts, ans)
        assert re.fullmatch(r"a = \d, b = \d, c = \d\. s = \d [-+*] \d = \d+, t = \d+ [-+*] \d+ = \d+\. "
                            r"\\boxed\{\d+\}", gold), gold
        assert trace_flaws(facts, gold) == [] and outcome_score(gold, ans, "int") == 1.0
        (j,) = judge.judge([JudgeRequest("x", q, gold, pool, facts=facts, answer=ans)])
        assert j.status == "ok"
        assert {r: (v.applicable, v.satisfied) for r, v in j.verdicts.items()} == {r.id: (True, True) for r in pool}


def test_arithmetic_consistency_is_checked_from_the_stated_inputs():
    judge = ProgrammaticJudge("problem")
    w05 = [r for r in load_default_pool(TEXT_POOL).rubrics if r.id == "W05"]
    facts = {"task": "arith", "perception": [["a", 4], ["b", 3], ["c", 2]], "intermediate": [["s", 6], ["t", 10]],
             "steps": [["s", "*", "b", "c"], ["t", "+", "a", "s"]], "target": "t", "question_type": "arith"}
    cases = {
        "a = 4, b = 3, c = 2. s = 6, t = 10. \\boxed{10}": True,
        "a = 4, b = 3, c = 2. s = 7, t = 11. \\boxed{11}": False,  # s is not b * c
        "a = 5, b = 3, c = 2. s = 6, t = 11. \\boxed{11}": True,  # wrong a, but t follows from what was stated
    }
    for response, ok in cases.items():
        (j,) = judge.judge([JudgeRequest("x", "q", response, w05, facts=facts, answer="10")])
        assert j.verdicts["W05"].satisfied is ok, response


def test_a_text_dataset_has_no_images_and_passes_the_gate(tmp_path):
    from rubricflow.data.validate import validate_dataset

    samples = build_synthetic_dataset(tmp_path / "d", ["arith"], {"train": 8, "val": 8, "test": 8, "calib": 8}, 3, 56)
    assert all(s.images == [] and s.task == "arith" for s in samples)
    assert not (tmp_path / "d" / "images").exists() or not any((tmp_path / "d" / "images").iterdir())
    report = validate_dataset(tmp_path / "d", min_split_size=8, required_splits=["train", "val", "test", "calib"])
    assert report.success and report.n_rows == 32
    assert task_demo("arith") == DEMO and task_demo("counting") is None


def test_text_prompt_carries_the_one_shot_demonstration():
    from models.processor import chat_prompt
    from models.tiny import TinyDims, build_tiny_text

    _, tok = build_tiny_text(["a = 1, b = 2. \\boxed{3}"] * 5, TinyDims(hidden_size=32, num_heads=2, vocab_size=320))
    p = chat_prompt(tok, "How many?", demo=DEMO)
    assert p.index(DEMO[0]) < p.index(DEMO[1]) < p.index("How many?")
    assert p.count("<|im_start|>assistant") == 2 and p.endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="text-only model got a prompt with 1 image"):
        chat_prompt(tok, "q", n_images=1)


# -- reward probes ------------------------------------------------------------------------------------------------
def _tiers(split: str):
    pool = load_default_pool(TEXT_POOL).rubrics
    if split == "by_category":  # the format/coherence rubrics foundational, the rest advanced
        fund = {"constraint_satisfaction", "logical_coherence"}
        return [replace(r, tier="foundational" if r.category in fund else "advanced") for r in pool]
    kept = {"W11": "foundational", "W12": "foundational", "W14": "foundational", "W01": "foundational",
            "W04": "advanced", "W05": "advanced"}  # a 4 / 2 split like the count rule's
    return [replace(r, tier=kept[r.id]) for r in pool if r.id in kept]


def _off_by_one(facts, part: str):
    """The facts with the first value of ``part`` one higher (rendered, the answer untouched)."""
    rows = [list(r) for r in facts[part]]
    rows[0][1] += 1
    return {**facts, part: rows}


def _responses(facts, ans):
    return {
        "gold": render_trace(facts, ans),
        "bare": f"\\boxed{{{ans}}}",
        "empty": "",
        "wrong_step": render_trace(_off_by_one(facts, "intermediate"), ans),  # s wrong, the answer untouched
        "wrong_given": render_trace(_off_by_one(facts, "perception"), ans),  # a wrong, the answer untouched
    }


def test_a_claim_is_the_value_after_its_working():
    from rubricflow.data.traces import collapse_chains

    assert parse_claims("a = 4, b = 3. s = b * c = 3 * 2 = 6, t = 4 + 6 = 10. \\boxed{10}") == [
        ("a", "4"), ("b", "3"), ("s", "6"), ("t", "10")]
    assert parse_claims("s = 3 * 2 = 5.") == [("s", "5")]  # wrong working states a wrong value
    # no operator, no chain: two claims; a negative value is a value, not a link
    assert collapse_chains("s = -3, t = 4") == "s = -3, t = 4"
    assert parse_claims("P = (1, 2), dx = 3. area = 3.") == [("P", "(1, 2)"), ("dx", "3"), ("area", "3")]
    facts = {"task": "arith", "perception": [["a", 4], ["b", 3], ["c", 2]], "intermediate": [["s", 6], ["t", 10]],
             "steps": [["s", "*", "b", "c"], ["t", "+", "a", "s"]], "target": "t"}
    assert trace_flaws(facts, "a = 4, b = 3, c = 2. s = 3 * 2 = 6, t = 4 + 6 = 10. \\boxed{10}") == []
    assert trace_flaws(facts, "a = 4, b = 3, c = 2. s = 3 * 2 = 5, t = 4 + 5 = 10. \\boxed{10}") == [
        "s stated as 5, true 6"]


@pytest.mark.parametrize("split", ["by_category", "count_like"])
@pytest.mark.parametrize("lam", [0.0, 0.5])
def test_text_task_reward_never_pays_for_skipping_work(split, lam):
    judge = ProgrammaticJudge("problem")
    rubrics = _tiers(split)
    tiers = tier_map(rubrics)
    # flaws no foundational rubric catches (W01 catches the given value only where it is foundational)
    unweighted = set() if lam > 0 else {"wrong_step"} | ({"wrong_given"} if split == "by_category" else set())
    totals: dict[str, list[float]] = {}
    gold_best = 0
    for seed in range(24):
        _, q, ans, _, facts = gen_arith(random.Random(1000 + seed))
        resp = _responses(facts, ans)
        assert parse_claims(resp["wrong_step"]) != parse_claims(resp["gold"])
        js = judge.judge([JudgeRequest(k, q, r, rubrics, facts=facts, answer=ans) for k, r in resp.items()])
        rewards = {k: compute_reward(outcome_score(r, ans, "int"), j, tiers, lam, 0.7).total
                   for (k, r), j in zip(resp.items(), js)}
        for k, v in rewards.items():
            totals.setdefault(k, []).append(v)
        # one GRPO group of the four responses: group-centred, std-scaled advantages
        m, sd = mean(rewards.values()), pstdev(rewards.values())
        adv = {k: (v - m) / (sd + 1e-4) for k, v in rewards.items()}
        rivals = [k for k in adv if k != "gold" and k not in unweighted]
        gold_best += adv["gold"] > max(adv[k] for k in rivals) and all(adv["gold"] >= adv[k] for k in unweighted)
    avg = {k: mean(v) for k, v in totals.items()}
    assert avg["gold"] > avg["bare"] > avg["empty"], avg
    for flaw in ("wrong_step", "wrong_given"):
        if flaw in unweighted:  # only advanced rubrics see it; they weigh 0 before the switch
            assert avg[flaw] == avg["gold"] == 1.0, (flaw, avg)
        else:
            assert avg[flaw] < avg["gold"], (flaw, avg)
    assert gold_best == 24


def test_the_response_reading_of_applicability_pays_a_bare_answer_more():
    """The probe's property depends on the reading: under judge.applicability=response, the logical rubrics that
    look for computed values are not applicable to a bare answer, so it keeps more rubric credit than under the
    problem reading (where they apply and fail: the reasoning is required)."""
    rubrics = _tiers("by_category")
    tiers = tier_map(rubrics)
    bare = {}
    for mode in ("problem", "response"):
        vals = []
        for seed in range(8):
            _, q, ans, _, facts = gen_arith(random.Random(seed))
            (j,) = ProgrammaticJudge(mode).judge([JudgeRequest("b", q, f"\\boxed{{{ans}}}", rubrics, facts=facts,
                                                               answer=ans)])
            vals.append(compute_reward(1.0, j, tiers, 0.0, 0.7).total)
        bare[mode] = mean(vals)
    assert bare["problem"] == pytest.approx(0.7 + 0.3 * 4 / 9)  # 4 format rubrics pass, 5 reasoning rubrics fail
    assert bare["response"] > bare["problem"]
