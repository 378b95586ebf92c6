"""RuCL evaluation scores: accuracy, S_F / S_A and the correct-but-flawed rate, by hand on counting samples."""

import dataclasses

import pytest

from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.traces import render_trace
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.judge.protocol import Judgment
from rubricflow.methods.rucl.rubrics.pool import load_default_pool
from rubricflow.methods.rucl.evaluate import score_responses

TIERS = {"C17": "foundational", "C05": "foundational", "C08": "advanced", "C11": "advanced"}


def test_score_responses_hand_computed(tmp_path):
    samples = build_synthetic_dataset(tmp_path, ["counting"], {"test": 4}, seed=1, image_size=56)
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in load_default_pool().rubrics if r.id in TIERS]
    s0, s1, s2, s3 = samples
    responses = [
        render_trace(s0.facts, s0.answer),  # correct and faithful: S_F 1, S_A 1
        f"red = 9, green = 9, blue = 9. so red = 9. \\boxed{{{s1.answer}}}",  # right answer, wrong reasoning
        "nothing to see",  # wrong, no box: C17 and C05 fail (S_F 0), no advanced rubric applies
        render_trace(s3.facts, s3.answer).replace(f"\\boxed{{{s3.answer}}}", "\\boxed{7}"),  # faithful, wrong box
    ]
    # the first reading of applicability keeps this hand computation (#2: no advanced rubric applies)
    out = score_responses(samples, responses, ProgrammaticJudge("response"), rub, tmp_path)
    assert out["accuracy"] == pytest.approx(0.5) and out["accuracy/counting"] == pytest.approx(0.5)
    assert out["judge_failures"] == 0
    # correct answers: #0 (advanced all satisfied) and #1 (advanced fail) -> 1 of 2 flawed, by the rubrics and by
    # the independent strict verifier (#1 states wrong counts)
    assert out["correct_but_flawed_rubric"] == pytest.approx(0.5)
    assert out["correct_but_flawed"] == pytest.approx(0.5)
    # S_F (boxed, counts): 1, 1/2, 0, 1.  S_A (answer from last value, no contradiction): 1, 1/2 (consistent but
    # the box is not the stated count), undefined (#2: nothing computed, no advanced rubric applies), 1/2 (#3)
    assert out["s_f"] == pytest.approx((1.0 + 0.5 + 0.0 + 1.0) / 4)
    assert out["s_a"] == pytest.approx((1.0 + 0.5 + 0.5) / 3)

    class Failing:
        def judge(self, reqs):
            return [Judgment("failed", reason="down") for _ in reqs]

    f = score_responses(samples, responses, Failing(), rub, tmp_path)
    assert f["judge_failures"] == 4 and f["s_f"] is None and f["accuracy"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="responses"):
        score_responses(samples, responses[:2], None, rub, tmp_path)


def test_the_strict_verifier_is_independent_of_the_rubrics(tmp_path):
    """A correct answer whose trace skips a colour passes the kept rubrics (nothing contradicts, the box is the last
    value) but not the strict verifier, which needs every ground-truth fact stated correctly."""
    from rubricflow.evaluation.trace_check import trace_flaws

    (s,) = build_synthetic_dataset(tmp_path, ["counting"], {"test": 1}, seed=3, image_size=56)
    target = s.facts["target"]
    short = f"{target} = {s.answer}. so {target} = {s.answer}. \\boxed{{{s.answer}}}"
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in load_default_pool().rubrics if r.id in TIERS]
    out = score_responses([s], [short], ProgrammaticJudge(), rub, tmp_path)
    assert out["accuracy"] == 1.0 and out["correct_but_flawed_rubric"] == 0.0
    assert out["correct_but_flawed"] == 1.0
    assert trace_flaws(s.facts, render_trace(s.facts, s.answer)) == []
    others = [k for k, _ in s.facts["perception"] if k != target]
    assert trace_flaws(s.facts, short) == [f"{k} not stated" for k in others]
    assert "2 boxed answers" in trace_flaws(s.facts, render_trace(s.facts, s.answer) + " \\boxed{1}")
    assert any("unknown quantities" in f for f in trace_flaws(s.facts, "zz = 3. " + render_trace(s.facts, s.answer)))
