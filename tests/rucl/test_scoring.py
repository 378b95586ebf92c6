"""RuCL's scorer (``rubricflow.methods.rucl.scoring``) against judges that leave rubrics out."""

from rubricflow.judge import JudgeConfig, JudgeFailureBudgetExceeded, Rubric
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.factory import make_judge
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
from rubricflow.methods.rucl.scoring import Item, RubricScorer
from rubricflow.testing.judge_server import LoopbackJudgeServer

import pytest

TIERED = [Rubric("R01", "The steps are shown.", "foundational"), Rubric("R02", "The values are right.", "foundational"),
          Rubric("R03", "The answer is boxed.", "advanced")]


def test_rucl_stops_on_a_judge_that_answers_one_rubric_na_and_leaves_out_the_rest(tmp_path):
    """The attack (issue 37, item 3): the rucl stage trained to the end (rc 0, judge failures 0, S_F/S_A null,
    reward alpha * outcome for every sample). Now the scorer's judge stops at the failure budget, one line."""
    with LoopbackJudgeServer(content_fn=lambda body: '{"verdicts": {"R01": "n/a"}}') as srv:
        cfg = JudgeConfig(backend="openai", cache_path=str(tmp_path / "c.sqlite"), openai=OpenAIJudgeConfig(
            base_url=srv.base_url, model="loopback-judge", verdict_format="compact", timeout_s=2.0, max_retries=0))
        sched = CurriculumScheduler(threshold=0.5, window=2, ramp_steps=2, peak=0.5, shape="linear", steepness=1.0)
        scorer = RubricScorer(make_judge(cfg), TIERED, sched, alpha=0.7)
        items = [Item(f"s{i}", "What is 2 + 3?", "\\boxed{5}", "5", "int") for i in range(8)]
        with pytest.raises(JudgeFailureBudgetExceeded, match="left out a requested rubric") as e:
            scorer.score(items)
    assert "\n" not in str(e.value)


def test_below_the_budget_a_left_out_rubric_makes_the_reward_missing_and_is_counted():
    class LeavesOut:
        name, model_id, prompt_version = "stub", "stub", "t"

        def judge(self, requests):
            from rubricflow.judge.parse import parse_judgment

            return [parse_judgment('{"verdicts": {"R01": "n/a"}}', [r.id for r in q.rubrics]) for q in requests]

    scorer = RubricScorer(LeavesOut(), TIERED, None, alpha=0.7)
    out = scorer.score([Item("s", "q", "\\boxed{5}", "5", "int")])
    assert out[0].missing and out[0].total != out[0].total  # NaN, not 0.7 * outcome
    assert scorer.step()["judge_failures"] == 1.0
