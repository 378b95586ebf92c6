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
        sched = CurriculumScheduler(threshold=0.5, window=2, ramp_steps=2, peak=0.5, shape="linear", steepness=1.0,
                                    threshold_rule="absolute", margin=0.0, window_test="every")
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


# -- the advanced tier's monitoring sample (judge tokens where they count) -------------------------------------------


class Recording:
    """A deterministic judge that records the rubric ids of every request (hash verdicts, as the loopback server)."""

    name, model_id, prompt_version = "rec", "rec", "t"

    def __init__(self):
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def judge(self, requests):
        from rubricflow.judge.protocol import Judgment, Verdict
        from rubricflow.testing.judge_server import loopback_verdict

        out = []
        for q in requests:
            self.asked.append((q.sample_id, tuple(r.id for r in q.rubrics)))
            v = {r.id: Verdict(*loopback_verdict(r.id, q.response)) for r in q.rubrics}
            out.append(Judgment("ok", v))
        return out


def _sched(**kw):
    return CurriculumScheduler(**{"threshold": 0.5, "window": 1, "ramp_steps": 0, "peak": 0.5, "shape": "linear",
                                  "steepness": 1.0, "threshold_rule": "absolute", "margin": 0.0,
                                  "window_test": "every", **kw})


def _items(n=10, step=0):
    return [Item(f"p{i // 4}#s{step}#{i}", "What is 2 + 3?", f"x = {i}. \\boxed{{{i % 6}}}", "5", "int")
            for i in range(n)]


def test_while_lambda_is_zero_only_the_monitoring_sample_is_judged_on_the_advanced_tier_and_rewards_are_unchanged():
    full_judge, mon_judge = Recording(), Recording()
    full = RubricScorer(full_judge, TIERED, _sched(), alpha=0.7)
    mon = RubricScorer(mon_judge, TIERED, _sched(), alpha=0.7, advanced_monitor=3)
    items = _items()
    a, b = full.score(items), mon.score(items)
    assert [x.total for x in a] == [x.total for x in b]  # the advanced tier has weight 0: same rewards
    with_adv = [sid for sid, ids in mon_judge.asked if "R03" in ids]
    assert len(with_adv) == 3 and set(with_adv) == mon.monitor_ids([it.sample_id for it in items])
    assert all(ids == ("R01", "R02") for sid, ids in mon_judge.asked if sid not in with_adv)
    assert all("R03" in ids for _, ids in full_judge.asked)
    # S_A is measured on the sample: NaN elsewhere, the full scorer's value there
    for x, y, it in zip(a, b, items):
        same = y.s_a == x.s_a or (x.s_a != x.s_a and y.s_a != y.s_a)  # equal, or both NaN (rubric not applicable)
        assert same if it.sample_id in with_adv else (y.s_a != y.s_a and y.n_a == 0)
    assert mon.step()["advanced_judged"] == 3.0 and full.step()["advanced_judged"] == 10.0


def test_the_monitoring_sample_ignores_order_and_grouping_and_ends_with_the_switch():
    mon = RubricScorer(Recording(), TIERED, _sched(), alpha=0.7, advanced_monitor=4)
    ids = [it.sample_id for it in _items(12)]
    assert mon.monitor_ids(ids) == mon.monitor_ids(list(reversed(ids))) and len(mon.monitor_ids(ids)) == 4
    assert RubricScorer(Recording(), TIERED, _sched(), advanced_monitor=None).monitor_ids(ids) is None
    assert RubricScorer(Recording(), TIERED, _sched(), mode="uniform", advanced_monitor=4).monitor_ids(ids) is None
    mon.scheduler.update(0.9)  # S_F above the threshold over the window: lambda = peak from now on
    assert mon.lambda_t == 0.5 and mon.monitor_ids(ids) is None


def test_a_switch_between_submission_and_rewards_tops_up_the_advanced_verdicts():
    """One-step-off: a batch sent while lambda_t = 0 gets its rewards after the switch; the completions judged without
    the advanced rubrics are asked about them, and the rewards equal those of judging everything at once."""
    import concurrent.futures

    class Stream:
        def __init__(self, judge):
            self.judge = judge

        def submit(self, reqs):
            f = concurrent.futures.Future()
            f.set_result(self.judge.judge(reqs))
            return f

    judge = Recording()
    mon = RubricScorer(judge, TIERED, _sched(), alpha=0.7, advanced_monitor=2)
    items = _items(8)
    monitored = mon.monitor_ids([it.sample_id for it in items])
    futs = [mon.submit(items[:4], Stream(judge), monitored), mon.submit(items[4:], Stream(judge), monitored)]
    mon.scheduler.update(0.9)  # the switch lands before this batch's rewards
    got = mon.finish(items, [j for f in futs for j in f.result()])
    topped = [sid for sid, ids in judge.asked if ids == ("R03",)]
    assert len(topped) == 6 and not set(topped) & monitored
    ref = RubricScorer(Recording(), TIERED, _sched(), alpha=0.7)
    ref.scheduler.update(0.9)
    assert [x.total for x in got] == [x.total for x in ref.score(items)]
    assert all(x.lambda_t == 0.5 for x in got) and sum(x.n_a for x in got) > 0
