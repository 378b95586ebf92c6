"""A batch whose every reward is missing is warned about, and three in a row stop training (TRL and verl): the
TRL reward with the programmatic judge and no `facts` column used to return None for every sample for 20 steps
without a word."""

from __future__ import annotations

import pytest

from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.methods.rucl.integrations import RewardsMissing
from rubricflow.methods.rucl.integrations.trl import RubricflowReward
from rubricflow.methods.rucl.integrations.verl import VerlScorer
from rubricflow.methods.rucl.scoring import RubricScorer
from tests.rucl.integrations.test_trl import RUBRICS, call_kwargs, rows, scheduler


def _no_facts(n):
    rs = rows(n)
    for r in rs:
        del r["facts"]
    return rs


def test_the_trl_reward_warns_then_stops_after_three_batches_without_any_reward():
    reward = RubricflowReward(RubricScorer(ProgrammaticJudge(), RUBRICS, scheduler()))
    rs = _no_facts(4)
    call = dict(prompts=[r["question"] for r in rs], completions=["x"] * 4, **call_kwargs(rs))
    for k in (1, 2):
        with pytest.warns(RuntimeWarning, match=rf"every reward of this batch of 4 is missing; {k} such batch"):
            assert reward(**call) == [None] * 4
    with pytest.raises(RewardsMissing, match=r"`facts` column.*stopping after 3 in a row"):
        reward(**call)


def test_a_batch_with_a_reward_resets_the_count():
    reward = RubricflowReward(RubricScorer(ProgrammaticJudge(), RUBRICS, scheduler()), max_missing_batches=2)
    bad, good = _no_facts(2), rows(2)
    for _ in range(3):
        with pytest.warns(RuntimeWarning):
            reward(prompts=["p", "p"], completions=["x", "x"], **call_kwargs(bad))
        out = reward(prompts=["p", "p"], completions=["x", "x"], **call_kwargs(good))
        assert None not in out and reward.guard.in_a_row == 0
    with pytest.warns(RuntimeWarning):
        reward(prompts=["p", "p"], completions=["x", "x"], **call_kwargs(bad))
    with pytest.raises(RewardsMissing):
        reward(prompts=["p", "p"], completions=["x", "x"], **call_kwargs(bad))


def test_verls_batch_scorer_stops_too_but_its_one_sample_form_never_does():
    scorer = VerlScorer(RubricScorer(ProgrammaticJudge(), RUBRICS, scheduler()))
    rs = _no_facts(3)
    extras = [{"question": r["question"], "answer_type": r["answer_type"]} for r in rs]
    args = (["arith"] * 3, ["x"] * 3, [r["answer"] for r in rs], extras)
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match="compute_score_batch"):
            assert all(r["missing"] == 1.0 for r in scorer.compute_score_batch(*args))
    with pytest.raises(RewardsMissing):
        scorer.compute_score_batch(*args)
    for _ in range(5):  # one failed sample is not a batch without signal
        assert scorer.compute_score("arith", "x", rs[0]["answer"], extras[0])["missing"] == 1.0
