"""RuCL Phase II end to end on a tiny SFT'd Qwen2.5-VL with the programmatic judge."""

import json
import math

import pytest

from rubricflow.evaluation.answers import outcome_score
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.judge.protocol import Judgment
from rubricflow.methods.rucl.rewards import combine_tiers
from rubricflow.methods.rucl.rubrics.pool import load_tiers
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.grpo.checkpoint import resume_key
from rubricflow.methods.rucl.train import resume_parts, train_rucl



def make_cfg(root, name, **over):
    d = {
        "init_from": str(root / "sft"), "tiers_path": str(root / "tiers.json"), "out_dir": str(root / name / "model"),
        "checkpoint_dir": str(root / name / "ck"), "eval_samples": 0,
        "reward": {"mode": "rucl", "alpha": 0.7},
        "curriculum": {"threshold": 0.3, "window": 2, "ramp_steps": 2, "peak": 0.5, "shape": "linear"},
        "grpo": {"group_size": 4, "prompts_per_step": 3, "steps": 4, "max_new_tokens": 28, "lr": 1e-3,
                 "checkpoint_every": 2},
    }
    for k, v in over.items():
        d[k] = {**d[k], **v} if isinstance(v, dict) else v
    return RuCLConfig.model_validate(d)


def steps_of(root, name):
    return [json.loads(line) for line in (root / name / "reports" / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_rucl_end_to_end_rewards_curriculum_and_outputs(setup):
    root = setup
    cfg = make_cfg(root, "main", eval_samples=4)
    res = train_rucl(cfg, root / "data", ProgrammaticJudge(), load_tiers(root / "tiers.json"),
                     root / "main" / "reports", seed=0)
    rows = steps_of(root, "main")
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and res["steps"] == 4
    for key in ("reward/total", "reward/outcome", "reward/s_f", "reward/s_a", "curriculum/lambda_t", "outcome_accuracy",
                "judge/failures", "kl" if cfg.grpo.beta else "loss", "clip_frac", "entropy", "rollout/completion_len",
                "rollout/tokens_per_s", "update_time_s"):
        assert key in rows[0], key
    # the curriculum replayed from the logged batch scores gives exactly the logged lambdas and switch step
    replay = CurriculumScheduler.from_config(cfg.curriculum)
    lam = 0.0
    for r in rows:
        assert r["curriculum/lambda_t"] == pytest.approx(lam)
        lam = replay.update(r["curriculum/s_f_batch"])
    assert res["transition_step"] == replay.transition_step
    # the SFT'd policy states its counts and boxes its answer: S_F > 0.3 from the start, so the switch comes at
    # step 1 (window 2) and lambda ramps 0.25 -> 0.5 over steps 2, 3
    assert replay.transition_step == 1
    assert [r["curriculum/lambda_t"] for r in rows] == pytest.approx([0, 0, 0.25, 0.5])
    ev = json.loads((root / "main" / "reports" / "transition.json").read_text())
    assert ev["switched"] and ev["transition_step"] == 1 and ev["event"]["step"] == 1
    assert len(ev["event"]["window_scores"]) == 2 and min(ev["event"]["window_scores"]) > 0.3
    assert ev["lambda_positive_share"] == 0.5 and res["lambda_positive_share"] == 0.5  # steps 2, 3 of 4
    # the hacking monitor is logged every step and summarised once (4 steps: no warning can be called)
    assert all(0.0 <= r["monitor/rubric_to_wrong"] <= 0.3 for r in rows if r.get("monitor/rubric_to_wrong") is not None)
    assert any(r.get("monitor/relevant_sound") is not None for r in rows)
    assert res["hacking"]["warn"] is False and res["hacking"]["window"] == 1
    # every reward of the last batch follows r = a * outcome + (1 - a) * rubric with that step's lambda
    last = json.loads((root / "main" / "reports" / "samples_last_step.json").read_text())
    from rubricflow.data.schema import read_dataset

    by_id = {s.id: s for s in read_dataset(root / "data")}
    lam3 = rows[3]["curriculum/lambda_t"]
    for s in last["samples"]:
        assert s["outcome"] == outcome_score(s["response"], by_id[s["id"]].answer, "int")
        nan = lambda x: float("nan") if x is None else x  # noqa: E731
        rubric = combine_tiers(nan(s["s_f"]), nan(s["s_a"]), lam3)
        expect = s["outcome"] if math.isnan(rubric) else 0.7 * s["outcome"] + 0.3 * rubric
        assert s["total"] == pytest.approx(expect) and s["lambda_t"] == pytest.approx(lam3)
    png = (root / "main" / "reports" / "curriculum.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert len(json.loads((root / "main" / "reports" / "curriculum.json").read_text())) == 4
    # the trained policy is saved in HF format and differs from the SFT start
    from models.loader import load_policy

    m0, _ = load_policy(root / "sft")
    m1, _ = load_policy(root / "main" / "model")
    diff = sum(float((a - b).detach().abs().sum()) for a, b in zip(m0.parameters(), m1.parameters()))
    assert diff > 0
    assert "accuracy_after" not in res  # training tracks accuracy on val, and this data set has no val split


class FlakyJudge:
    """Fails every third request (as a judge whose output could not be parsed)."""

    name, model_id, prompt_version = "flaky", "flaky", "v"

    def __init__(self):
        self.inner = ProgrammaticJudge()

    def judge(self, requests):
        out = self.inner.judge(requests)
        return [Judgment("failed", reason="unparseable") if i % 3 == 0 else j for i, j in enumerate(out)]


@pytest.mark.slow
def test_judge_failures_are_missing_and_outcome_mode_runs_without_judge(setup):
    root = setup
    cfg = make_cfg(root, "flaky", grpo={"steps": 1})
    train_rucl(cfg, root / "data", FlakyJudge(), load_tiers(root / "tiers.json"), root / "flaky" / "reports", seed=0)
    row = steps_of(root, "flaky")[0]
    n = 3 * 4
    assert row["judge/failures"] == 4 == row["reward/n_missing"] == row["n_missing"]  # i = 0, 3, 6, 9 of 12
    assert row["n_trained"] == n - 4
    last = json.loads((root / "flaky" / "reports" / "samples_last_step.json").read_text())
    missing = [s for s in last["samples"] if s["missing"]]
    assert len(missing) == 4 and all(s["total"] is None for s in missing)  # NaN, never 0

    cfg_o = make_cfg(root, "outcome", reward={"mode": "outcome"}, grpo={"steps": 1})
    train_rucl(cfg_o, root / "data", None, [], root / "outcome" / "reports", seed=0)
    ro = steps_of(root, "outcome")[0]
    assert ro["reward/total"] == pytest.approx(ro["outcome_accuracy"])
    assert ro["reward/s_f"] is None and ro["judge/failures"] == 0
    with pytest.raises(ValueError, match="needs a judge"):
        train_rucl(make_cfg(root, "nojudge"), root / "data", None, [], root / "nojudge" / "reports")


@pytest.mark.slow
def test_interrupted_run_resumes_with_its_history(setup):
    root = setup
    cfg = make_cfg(root, "resume", grpo={"steps": 4, "checkpoint_every": 1})
    tiers = load_tiers(root / "tiers.json")
    first = train_rucl(cfg, root / "data", ProgrammaticJudge(), tiers, root / "resume" / "reports", seed=0, steps=2)
    assert first["steps"] == 2 and first["resumed_from"] is None
    second = train_rucl(cfg, root / "data", ProgrammaticJudge(), tiers, root / "resume" / "reports", seed=0)
    assert second["resumed_from"] == 2 and second["steps"] == 4
    assert [r["step"] for r in steps_of(root, "resume")] == [0, 1, 2, 3]


def test_run_key_separates_trajectories_but_not_step_counts(tmp_path):
    def run_key(rcfg, seed, data):
        return resume_key(resume_parts(rcfg, seed, tmp_path / data))

    base = RuCLConfig()
    assert run_key(base, 0, "d") == run_key(
        base.model_copy(update={"grpo": base.grpo.model_copy(update={"steps": 99})}), 0, "d")
    assert run_key(base, 0, "d") != run_key(base, 1, "d")
    alt = base.model_copy(update={"reward": base.reward.model_copy(update={"alpha": 0.5})})
    assert run_key(base, 0, "d") != run_key(alt, 0, "d")


def test_shuffle_control_permutes_rewards_within_the_batch(setup):
    """The control experiment keeps the batch's rewards but detaches them from the responses that earned them."""
    from models.generation import Completion
    from models.loader import load_policy
    from rubricflow.data.schema import read_dataset
    from rubricflow.methods.rucl.rollout import RuCLRollout

    root = setup
    _, proc = load_policy(root / "sft")
    samples = read_dataset(root / "data", split="train")[:6]
    texts = ["red = 1, green = 0, blue = 0. so red = 1. \\boxed{1}", "\\boxed{0}", "blah", "\\boxed{3}"]

    class FixedGen:
        def generate(self, reqs, n=1, **kw):
            return [[Completion([5, 6], texts[(i + k) % len(texts)], True) for k in range(n)] for i in range(len(reqs))]

    def rewards(shuffle: bool):
        cfg = make_cfg(root, "shuffle", reward={"shuffle_control": shuffle})
        sched = CurriculumScheduler.from_config(cfg.curriculum)
        ro = RuCLRollout(FixedGen(), proc, ProgrammaticJudge(), load_tiers(root / "tiers.json"), sched, cfg,
                         root / "data")
        episodes, metrics = ro(0, samples)
        return [e.reward for e in episodes], metrics

    plain, m_plain = rewards(False)
    shuffled, m_shuf = rewards(True)
    assert sorted(plain) == sorted(shuffled)  # the same multiset of rewards ...
    assert plain != shuffled  # ... assigned to other responses
    assert len(set(plain)) > 1
    assert m_plain["reward/total"] == pytest.approx(m_shuf["reward/total"])  # logged stats are the true rewards


def test_vllm_completions_give_episodes_with_exactly_one_eos(setup):
    """vLLM returns the stop token inside ``token_ids``; after the backend's trim the rollout appends it once."""
    import types

    from models.loader import load_policy
    from models.generation.vllm_colocated import to_completions
    from rubricflow.data.schema import read_dataset
    from rubricflow.methods.rucl.rollout import RuCLRollout

    root = setup
    _, proc = load_policy(root / "sft")
    tok = proc.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    body = tok("red = 1. \\boxed{1}", add_special_tokens=False)["input_ids"]
    samples = read_dataset(root / "data", split="train")[:2]

    class VLLMLikeGen:  # raw vLLM outputs: stopped ones end with the EOS id, a length-capped one does not
        def generate(self, reqs, n=1, **kw):
            raw = [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=body + ([eos] if k else []),
                                                                        logprobs=None) for k in range(n)])
                   for _ in reqs]
            return to_completions(raw, tok, eos, tok.pad_token_id, logprobs=False)

    cfg = make_cfg(root, "vllm-eos", reward={"mode": "outcome"})
    ro = RuCLRollout(VLLMLikeGen(), proc, None, [], CurriculumScheduler.from_config(cfg.curriculum), cfg,
                     root / "data")
    episodes, _ = ro(0, samples)
    assert len(episodes) == 2 * cfg.grpo.group_size
    for k, e in enumerate(episodes):
        stopped = k % cfg.grpo.group_size != 0
        assert e.actions == body + ([eos] if stopped else [])
        assert e.actions.count(eos) == (1 if stopped else 0)
        assert e.meta["text"] == "red = 1. \\boxed{1}"


@pytest.mark.parametrize("stream", [False, True], ids=["batched", "streamed"])
def test_a_judge_that_breaks_mid_training_stops_the_rollout_instead_of_nan_rewards(setup, stream):
    """The reward path with the judge the stage builds (make_judge: preflight + failure budget): once the server
    answers 500 to everything, the step raises JudgeFailureBudgetExceeded instead of returning NaN rewards. Streamed
    (one judge call per group), the rolling window is checked after each group: it stops after the second group."""
    from models.generation import Completion
    from models.loader import load_policy
    from rubricflow.data.schema import read_dataset
    from rubricflow.judge import JudgeConfig, JudgeFailureBudgetExceeded, make_judge
    from rubricflow.judge.config import OpenAIJudgeConfig
    from rubricflow.methods.rucl.rollout import RuCLRollout
    from rubricflow.testing.judge_server import LoopbackJudgeServer

    root = setup
    _, proc = load_policy(root / "sft")
    samples = read_dataset(root / "data", split="train")[:3]

    class FixedGen:
        def generate(self, reqs, n=1, **kw):
            return [[Completion([5, 6], f"red = {k}. \\boxed{{{k}}}", True) for k in range(n)] for _ in reqs]

    cfg = make_cfg(root, "broken", grpo={"stream_rewards": stream})
    with LoopbackJudgeServer() as srv:
        jc = JudgeConfig(backend="openai", cache_enabled=False, openai=OpenAIJudgeConfig(
            base_url=srv.base_url, model="loopback-judge", max_retries=1, backoff_initial_s=0.01, timeout_s=2))
        judge = make_judge(jc)  # preflight passes: the server is healthy now
        ro = RuCLRollout(FixedGen(), proc, judge, load_tiers(root / "tiers.json"),
                         CurriculumScheduler.from_config(cfg.curriculum), cfg, root / "data")
        episodes, m = ro(0, samples)
        assert m["judge/failures"] == 0 and all(not math.isnan(e.reward) for e in episodes)
        srv.fault_all = "http500"
        # the rolling window holds step 0 (12 ok) and step 1 (12 failed; streamed: the groups answered so far)
        msg = r"\d+ of \d+ judgments failed \(\d+%\); top reasons: \d+x http 500" if stream else \
            r"12 of 24 judgments failed \(50%\); top reasons: 12x http 500"
        try:
            with pytest.raises(JudgeFailureBudgetExceeded, match=msg):
                ro(1, samples)
        finally:
            ro.close()


@pytest.mark.slow
def test_training_with_a_judge_that_breaks_aborts_keeping_the_checkpoint_and_saving_no_model(setup):
    from rubricflow.judge import BudgetedJudge, JudgeFailureBudgetExceeded

    class BreaksAfterFirstStep:
        name, model_id, prompt_version = "breaks", "b", "v"

        def __init__(self):
            self.inner, self.calls = ProgrammaticJudge(), 0

        def judge(self, requests):
            self.calls += 1
            if self.calls == 1:
                return self.inner.judge(requests)
            return [Judgment("failed", reason="http 500: down") for _ in requests]

    root = setup
    cfg = make_cfg(root, "breaks", grpo={"steps": 3, "checkpoint_every": 1})
    judge = BudgetedJudge(BreaksAfterFirstStep(), max_failed_frac=0.2, window=64)
    with pytest.raises(JudgeFailureBudgetExceeded, match="12 of 24 judgments failed"):
        train_rucl(cfg, root / "data", judge, load_tiers(root / "tiers.json"), root / "breaks" / "reports", seed=0)
    assert not (root / "breaks" / "model" / "config.json").exists()  # no model saved from NaN rewards
    assert any(p.is_file() for p in (root / "breaks" / "ck").rglob("*"))  # step 0's checkpoint is kept


def test_transition_json_is_rewritten_by_every_run_never_left_from_an_older_one(setup, tmp_path):
    """A report of a switch the current run never made was the stale-file defect: the file is now this run's, and a
    DVC output of the rucl stages."""
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "transition.json").write_text(json.dumps({"step": 16, "s_f_window": [0.95] * 5}))  # an older run's
    rcfg = make_cfg(setup, "stale", reward={"mode": "outcome"}, grpo={"steps": 2, "checkpoint_every": 0})
    out = train_rucl(rcfg, setup / "data", None, [], reports, seed=1)
    got = json.loads((reports / "transition.json").read_text())
    assert out["transition_step"] is None
    assert got["switched"] is False and got["transition_step"] is None and got["event"] is None
    assert got["threshold"] == rcfg.curriculum.threshold
