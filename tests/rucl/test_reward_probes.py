"""No reward that pays for skipping work: adversarial responses against the RuCL reward with the programmatic judge.

Averaged over held-out-style samples of every task, at lambda_t 0 (most of training) and 0.5: a bare correct
``\\boxed{}`` answer must earn strictly less than the correct reasoned trace and no more than a reasoned trace with one
wrong perception claim and the right answer. Checked for the tiers the stratification kept earlier (foundational
C08/C11, advanced C01/C06/C14/C15; then foundational C01/C05/C08/C15, advanced C06/C14 from the 400-step SFT start),
for those it keeps from the 300-step start (foundational C05/C08/C11/C15, advanced C01/C14) and for a second split
of the whole default pool. The first reading of applicability
(``response``) fails the probe, which shows the probe can fail.
"""

from __future__ import annotations

import re
from dataclasses import replace
from statistics import mean

import pytest

from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.traces import render_trace
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.judge.protocol import JudgeRequest
from rubricflow.methods.rucl.rewards import compute_reward, tier_map
from rubricflow.methods.rucl.rubrics.pool import load_default_pool

KEPT = {"C08": "foundational", "C11": "foundational", "C01": "advanced", "C06": "advanced", "C14": "advanced",
        "C15": "advanced"}
# what the pipeline keeps now (counting + barchart, 400-step SFT start, the count rule's 4 / 2 split)
KEPT_COUNT = {"C01": "foundational", "C05": "foundational", "C08": "foundational", "C15": "foundational",
              "C06": "advanced", "C14": "advanced"}
# what the pipeline keeps from the 300-step SFT start (reports/rubrics/stratification.json)
KEPT_300 = {"C05": "foundational", "C08": "foundational", "C11": "foundational", "C15": "foundational",
            "C01": "advanced", "C14": "advanced"}
BY_CATEGORY = {"constraint_satisfaction": "foundational", "logical_coherence": "foundational"}  # rest: advanced


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    return build_synthetic_dataset(d, ["counting", "barchart", "geometry"],
                                   {"train": 0, "val": 0, "test": 12, "calib": 0}, 7, 56)


def _rubrics(assign: str):
    pool = load_default_pool().rubrics
    if assign in ("kept", "kept_count", "kept_300"):
        kept = {"kept": KEPT, "kept_count": KEPT_COUNT, "kept_300": KEPT_300}[assign]
        return [replace(r, tier=kept[r.id]) for r in pool if r.id in kept]
    return [replace(r, tier=BY_CATEGORY.get(r.category, "advanced")) for r in pool]


def flawed(sample) -> str:
    """The gold trace with one perception value off by one (the answer untouched)."""
    key, val = sample.facts["perception"][-1]
    gold = render_trace(sample.facts, sample.answer)
    wrong = f"({val[0] + 1}, {val[1]})" if isinstance(val, (list, tuple)) else str(val + 1)
    return re.sub(rf"\b{re.escape(key)} = [^,.]+(?:, [^,.]+\))?", f"{key} = {wrong}", gold, count=1)


def mean_rewards(samples, rubrics, applicability: str, lambda_t: float) -> dict[str, float]:
    judge = ProgrammaticJudge(applicability)
    tiers = tier_map(rubrics)
    kinds = {
        "reasoned": lambda s: render_trace(s.facts, s.answer),
        "bare": lambda s: f"\\boxed{{{s.answer}}}",
        "one_flaw": flawed,
        "empty": lambda s: "",
    }
    out = {}
    for kind, make in kinds.items():
        reqs = [JudgeRequest(s.id, s.question, make(s), rubrics, [], s.facts, s.answer) for s in samples]
        rewards = []
        for s, r, j in zip(samples, reqs, judge.judge(reqs)):
            outcome = 1.0 if kind != "empty" else 0.0
            rewards.append(compute_reward(outcome, j, tiers, lambda_t=lambda_t, alpha=0.7).total)
        out[kind] = mean(rewards)
    return out


def test_the_flawed_trace_keeps_the_answer_and_breaks_one_fact(samples):
    for s in samples:
        f = flawed(s)
        assert f != render_trace(s.facts, s.answer) and f.endswith(f"\\boxed{{{s.answer}}}")


@pytest.mark.parametrize("assign", ["kept", "kept_count", "kept_300", "by_category"])
@pytest.mark.parametrize("lambda_t", [0.0, 0.5])
def test_a_bare_answer_never_pays_more_than_reasoning(samples, assign, lambda_t):
    m = mean_rewards(samples, _rubrics(assign), "problem", lambda_t)
    print(f"\n{assign} lambda={lambda_t}: " + ", ".join(f"{k} {v:.3f}" for k, v in m.items()))
    assert m["bare"] < m["reasoned"]
    assert m["bare"] <= m["one_flaw"]
    assert m["one_flaw"] <= m["reasoned"]
    assert m["empty"] < m["bare"]


def test_under_the_response_reading_a_bare_answer_earns_only_the_outcome_weight(samples):
    """The earlier reading (kept as judge.applicability=response for the ablation): no rubric applies to a bare
    answer, so it has no rubric term. That term earns nothing (alpha * outcome, alpha 0.7), where it used to earn the
    whole outcome (1.0, as much as the reasoned trace): skipping the reasoning no longer pays."""
    m = mean_rewards(samples, _rubrics("kept"), "response", 0.0)
    print("\nresponse reading, lambda 0: " + ", ".join(f"{k} {v:.3f}" for k, v in m.items()))
    assert m["bare"] == pytest.approx(0.7) and m["bare"] < m["reasoned"]


def test_problem_applicability_comes_from_the_question_not_the_response(samples):
    judge = ProgrammaticJudge("problem")
    counting = next(s for s in samples if s.task == "counting")
    rubrics = _rubrics("by_category")
    by_id = {r.id: r for r in rubrics}
    bare, gold = (judge.judge([JudgeRequest(counting.id, counting.question, resp, rubrics, [], counting.facts,
                                            counting.answer)])[0]
                  for resp in (f"\\boxed{{{counting.answer}}}", render_trace(counting.facts, counting.answer)))
    # same applicability for both responses: it is a property of the problem
    assert {k: v.applicable for k, v in bare.verdicts.items()} == {k: v.applicable for k, v in gold.verdicts.items()}
    assert bare.verdicts["C14"].applicable is False  # counting needs no intermediate values
    assert bare.verdicts["C08"].applicable and bare.verdicts["C08"].satisfied is False
    assert "required reasoning missing" in bare.verdicts["C08"].rationale and by_id["C08"].check
