"""A runnable GRPO training of the tiny text policy on the toy task, for the multi-process and resume checks.

One process::

    python -m tests.grpo.toy_train --out DIR --steps 8 --engine torch

Two local processes with DeepSpeed on CPU (gloo)::

    torchrun --standalone --nproc_per_node 2 -m tests.grpo.toy_train --out DIR --engine deepspeed
    deepspeed --num_gpus 2 --no_local_rank --module tests.grpo.toy_train --out DIR --engine deepspeed

Each rank appends one JSON line per step to ``DIR/log-rank<r>.jsonl`` (prompt ids, reward, curriculum lambda and
state, loss, a parameter checksum) and writes ``DIR/done-rank<r>.json`` at the end. Re-running the same command
resumes from the latest checkpoint in ``DIR/checkpoints``. It uses the real pieces: ``TransformersGenerator``
rollouts, ``CausalLMAdapter``, ``GRPOUpdater``, the engine, ``GRPOTrainer`` and the curriculum scheduler (fed the
batch mean reward as its "foundational score").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

import rubricflow.util.env  # noqa: F401  (project-local caches before torch)


def param_digest(module, engine_cfg=None) -> tuple[float, str]:
    """``(sum of |p| in float64, sha256 of all parameter bytes)`` (gathers ZeRO-3 partitions)."""
    import contextlib

    import torch

    params = list(module.parameters())
    ctx = contextlib.nullcontext()
    if engine_cfg is not None and engine_cfg.kind == "deepspeed" and engine_cfg.zero_stage == 3:
        import deepspeed

        ctx = deepspeed.zero.GatheredParameters(params, modifier_rank=None)
    with ctx, torch.no_grad():
        h = hashlib.sha256()
        total = 0.0
        for p in params:
            t = p.detach().float().contiguous()
            total += float(t.double().abs().sum())
            h.update(t.numpy().tobytes())
    return total, h.hexdigest()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--engine", choices=["torch", "deepspeed"], default="torch")
    ap.add_argument("--zero-stage", type=int, default=0)
    ap.add_argument("--bf16", action="store_true", help="DeepSpeed bf16 mixed precision")
    ap.add_argument("--checkpoint-every", type=int, default=2)
    ap.add_argument("--prompts-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-sleep", type=float, default=0.0, help="sleep after each step (to kill mid-run)")
    args = ap.parse_args(argv)

    rubricflow.util.env.configure_threads()

    from models.generation import GenRequest
    from models.generation.hf import TransformersGenerator
    from rubricflow.methods.rucl.curriculum import CurriculumScheduler
    from rubricflow.grpo.causal_lm import CausalLMAdapter
    from rubricflow.grpo.config import EngineConfig, GRPOConfig
    from rubricflow.grpo.engine import make_engine
    from rubricflow.testing.toy_task import build_toy_policy, chat_prompt, target_token_id, toy_prompts, toy_reward
    from rubricflow.grpo.trainer import GRPOTrainer
    from rubricflow.grpo.types import Episode
    from rubricflow.grpo.updater import GRPOUpdater
    from rubricflow.methods.rucl.config import CurriculumConfig

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = GRPOConfig(
        group_size=args.group_size,
        prompts_per_step=args.prompts_per_step,
        steps=args.steps,
        lr=args.lr,
        max_new_tokens=args.max_new_tokens,
        checkpoint_every=args.checkpoint_every,
        seed=args.seed,
        engine=EngineConfig(kind=args.engine, zero_stage=args.zero_stage, bf16=args.bf16),
    )
    t0 = time.perf_counter()
    model, tok = build_toy_policy("text", seed=args.seed)
    init_sum, init_sha = param_digest(model)
    engine = make_engine(model, cfg)
    init_s = time.perf_counter() - t0
    rank = engine.rank
    module = engine.module
    gen = TransformersGenerator(module, tok)
    updater = GRPOUpdater(CausalLMAdapter(module, tok), engine, cfg)
    sched = CurriculumScheduler.from_config(
        CurriculumConfig(threshold=0.05, window=2, ramp_steps=3, peak=0.5, shape="linear")
    )
    tid = target_token_id(tok)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    seen: dict[int, dict] = {}

    def rollout(step: int, prompts: list[dict]):
        reqs = [GenRequest(chat_prompt(tok, p["question"])) for p in prompts]
        outs = gen.generate(reqs, n=cfg.group_size, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature)
        eps = [
            Episode(r.prompt, c.token_ids + ([eos] if c.finished else []), toy_reward(c.token_ids, tid), p["id"])
            for p, r, cs in zip(prompts, reqs, outs)
            for c in cs
        ]
        mean_r = sum(e.reward for e in eps) / len(eps)
        lam = sched.lambda_t  # the weight this step's rewards would use
        sched.update(engine.all_reduce_mean({"r": mean_r})["r"])
        seen[step] = {"prompt_ids": [p["id"] for p in prompts], "lambda_t": lam, "sched": sched.state_dict()}
        return eps, {"reward_mean": mean_r, "lambda_t": lam}

    log_f = open(out / f"log-rank{rank}.jsonl", "a")

    def log(step: int, m: dict):
        s, sha = param_digest(module, cfg.engine)
        rec = {"step": step, "rank": rank, "pid": os.getpid(), "loss": m["loss"], "reward_mean": m["reward_mean"],
               "param_sum": s, "param_sha": sha, **seen.pop(step)}
        log_f.write(json.dumps(rec) + "\n")
        log_f.flush()
        os.fsync(log_f.fileno())
        if args.step_sleep:
            time.sleep(args.step_sleep)

    trainer = GRPOTrainer(updater, toy_prompts(16), rollout, cfg, out / "checkpoints", log_fn=log,
                          stateful={"curriculum": sched})
    summary = trainer.run()
    s, sha = param_digest(module, cfg.engine)
    done = {"rank": rank, "world_size": engine.world_size, "init_param_sum": init_sum, "init_param_sha": init_sha,
            "final_param_sum": s, "final_param_sha": sha, "engine_init_s": init_s,
            "engine_timings": getattr(engine, "timings", {}), **summary}
    (out / f"done-rank{rank}.json").write_text(json.dumps(done, indent=2))
    log_f.close()


if __name__ == "__main__":
    main()
