"""The judge off the critical path in RuCL: groups scored as they finish give the very update of scoring after
generation (bit for bit, with a deterministic server-backed judge), judging overlaps generation, one-step-off
pipelining trains with a lag of one step, and judge tokens are reported per step."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import pytest
from safetensors.torch import load_file

from rubricflow.judge import JudgeConfig, make_judge
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, load_tiers, save_pool
from rubricflow.methods.rucl.train import train_rucl
from rubricflow.sections import GenerationConfig
from rubricflow.testing.metered_judge import MeteredJudgeServer

TIERS = {"W11": "foundational", "W14": "foundational", "W01": "foundational", "W06": "foundational",
         "W04": "advanced", "W05": "advanced"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """An arith dataset, a tiny (untrained) Qwen2 text policy and a tiers file of the text pool."""
    from models.tiny import TinyDims, build_tiny_text, save
    from rubricflow.data.arith import task_demo
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.data.traces import render_trace

    root = tmp_path_factory.mktemp("stream")
    samples = build_synthetic_dataset(root / "data", ["arith"], {"train": 12, "val": 2}, seed=1, image_size=56)
    corpus = ([s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
              + list(task_demo("arith")))
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                                  vocab_size=300))
    save(model, tok, root / "init")
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in load_default_pool(
        "rubricflow/methods/rucl/resources/rubric_pool_text.json").rubrics if r.id in TIERS]
    save_pool(RubricPool(rub, {"source": "test"}), root / "tiers.json")
    return root


def cfg_for(root, name, **grpo):
    return RuCLConfig.model_validate({
        "init_from": str(root / "init"), "tiers_path": str(root / "tiers.json"), "out_dir": str(root / name / "out"),
        "checkpoint_dir": str(root / name / "ck"), "eval_samples": 0, "eval_k": 0,
        "reward": {"mode": "rucl", "alpha": 0.5, "advanced_monitor": 3},
        "curriculum": {"threshold": 0.99, "window": 5},
        "grpo": {"group_size": 4, "prompts_per_step": 3, "steps": 2, "max_new_tokens": 12, "lr": 5e-3,
                 "checkpoint_every": 0, "engine": {"kind": "torch"}, **grpo},
    })


def openai_judge(srv):
    return make_judge(JudgeConfig(backend="openai", cache_enabled=False, openai=OpenAIJudgeConfig(
        base_url=srv.base_url, model="loopback-judge", concurrency=4, max_retries=1, timeout_s=10)))


def train(root, name, srv, **grpo):
    cfg = cfg_for(root, name, **grpo)
    gen = GenerationConfig(eval_batch_size=4)  # one group per generation batch: three batches per step
    res = train_rucl(cfg, root / "data", openai_judge(srv), load_tiers(root / "tiers.json"), root / name / "reports",
                     gen_cfg=gen, seed=0)
    rows = [json.loads(x) for x in (root / name / "reports" / "steps.jsonl").read_text().splitlines()]
    return res, rows, load_file(str(root / name / "out" / "model.safetensors"))


def test_streamed_scoring_gives_the_same_update_bit_for_bit(setup):
    root = setup
    with MeteredJudgeServer(latency_range_s=(0.0, 0.02), concurrency=4) as srv:
        _, seq_rows, seq_w = train(root, "seq", srv, stream_rewards=False)
        seq_calls = srv.requests
        _, str_rows, str_w = train(root, "str", srv, stream_rewards=True)
        assert srv.requests - seq_calls == seq_calls  # the same judge requests, one per completion
        assert srv.max_in_flight <= 4  # streaming kept to judge.openai.concurrency
    assert set(seq_w) == set(str_w)
    for k in seq_w:  # the update, bit for bit
        assert seq_w[k].dtype == str_w[k].dtype and bool((seq_w[k] == str_w[k]).all()), k
    assert any(not bool((seq_w[k] == load_file(str(root / "init" / "model.safetensors"))[k]).all()) for k in seq_w)
    keys = ["reward/total", "reward/s_f", "reward/s_a", "loss", "grad_norm", "judge/prompt_tokens",
            "judge/completion_tokens", "judge/advanced_judged", "pipeline/policy_lag"]
    for a, b in zip(seq_rows, str_rows):
        for k in keys:
            assert a[k] == b[k] or (a[k] is None and b[k] is None), k
    # the monitoring sample: lambda_t = 0, 3 of the 12 completions judged on the advanced tier, S_A measured there
    assert [r["judge/advanced_judged"] for r in seq_rows] == [3.0, 3.0]
    assert all(r["curriculum/lambda_t"] == 0.0 and r["judge/prompt_tokens"] > 0 for r in seq_rows)
    assert all(r["judge/tokens_estimated"] == 0.0 for r in seq_rows)  # counted from the answers' usage


def test_groups_go_to_the_judge_while_the_next_batches_generate(setup):
    """With one group per generation batch, the judge receives the first group before generation ends."""
    from models.loader import load_policy
    from rubricflow.data.schema import read_dataset
    from rubricflow.methods.rucl.curriculum import CurriculumScheduler
    from rubricflow.methods.rucl.rollout import RuCLRollout
    from rubricflow.training.generation import generator_for

    root = setup
    model, tok = load_policy(root / "init")
    cfg = cfg_for(root, "overlap", stream_rewards=True)  # streaming is off by default
    gen = generator_for(GenerationConfig(eval_batch_size=4), model, tok)
    batch_ends: list[float] = []
    inner = gen.generate_groups

    def timed(*a, **kw):
        for out in inner(*a, **kw):
            batch_ends.append(time.monotonic())
            yield out

    gen.generate_groups = timed
    samples = read_dataset(root / "data", split="train")[:3]
    with MeteredJudgeServer(latency_range_s=(0.0, 0.0), concurrency=4) as srv:
        ro = RuCLRollout(gen, tok, openai_judge(srv), load_tiers(root / "tiers.json"),
                         CurriculumScheduler.from_config(cfg.curriculum), cfg, root / "data")
        try:
            n_before = srv.requests
            handle = ro.start(0, samples)
            episodes, m = ro.finish(0, handle)
        finally:
            ro.close()
        first_judged = min(t for t, _, _ in srv.log[n_before:])
    assert len(batch_ends) == 3 and first_judged < batch_ends[-1]
    assert len(episodes) == 12 and all(not math.isnan(e.reward) for e in episodes)
    assert m["judge/advanced_judged"] == 3.0


def test_one_step_off_rucl_trains_with_a_lag_of_one_step(setup):
    root = setup
    with MeteredJudgeServer(latency_range_s=(0.0, 0.02), concurrency=4) as srv:
        res, rows, _ = train(root, "off", srv, one_step_off=True, steps=3)
    assert res["steps"] == 3
    assert [r["pipeline/policy_lag"] for r in rows] == [0.0, 1.0, 1.0]
    assert all(math.isfinite(r["reward/total"]) and r["judge/failures"] == 0 for r in rows)
