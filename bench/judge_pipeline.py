"""RuCL step time with a server-backed judge: sequential vs streamed scoring vs one-step-off pipelining, and judge
tokens per step with and without the advanced tier's monitoring sample.

A loopback OpenAI-compatible judge (``rubricflow.testing.metered_judge``, in its own process) answers every call after
a latency drawn uniformly from ``--latency-ms LO HI`` while holding one of ``--concurrency`` slots, and reports
``usage`` at 4 characters per token. The policy is a tiny Qwen2 text model on the arith task (built here, untrained:
every completion runs to ``--max-new-tokens``); a step is ``--prompts`` x ``--group`` completions generated in
batches of ``--gen-batch`` completions (the same batches in every mode), judged (one call per completion, all
rubrics of the tiers), and one GRPO update. Modes, each a fresh ``train_rucl`` run of ``--steps`` steps from the
same policy (the first step is left out of the mean as warm-up), repeated ``--rounds`` times in turn (the median is
reported, with the range of the per-round ratios):

* ``sequential``: generate the batch, then judge it, then update (``grpo.stream_rewards: false``);
* ``streamed``: each group goes to the judge when its generation batch is done (same update as sequential);
* ``one_step_off``: streamed, and step t+1's rollouts run while step t is judged and updated (policy lag 1);
* ``streamed+monitor``: streamed with ``rucl.reward.advanced_monitor`` set: judge tokens per step against
  ``streamed`` (no monitoring sample, every completion judged on every rubric).

The defaults (the issue's 100-500 ms and c = 16; 8 prompts x 8 = 64 judge calls per step, 128 new tokens in batches
of 16) are chosen so that a sequential step is judge-bound (the judge's wait is its largest part: 64 calls need
at least 64 x 0.3 s / 16 of server slots) while generation is of the same order, so there is work for streaming to
overlap; with much shorter completions generation is a small part of the step and streaming can hide little of it.
What streaming cannot hide: the judge's answers to the last generation batch and the update (one-step-off hides
those behind the next step's generation). The judge client runs on an event loop in a thread of the trainer's
process, on non-blocking HTTP (waiting costs no CPU); the measured split of a step is in the table.

Ratios are against ``sequential`` measured in the same run: ``ratio`` is the median sequential step time over the
mode's median step time; ``per-round ratio`` the median (and range) of the ratios within each round, whose modes ran
back to back (in an order rotated from round to round). ``cpu_s``: the trainer process's CPU time per step (all its
threads; other processes' load does not change it). Last line:
``judge_pipeline streamed=<x> one_step_off=<y> tokens_monitor_vs_full=<z>``.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/judge_pipeline.py [--latency-ms 100 500] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rubricflow.util.env  # noqa: F401  (project-local caches before anything else)

TIERS = {"W11": "foundational", "W14": "foundational", "W01": "foundational", "W06": "foundational",
         "W02": "foundational", "W04": "advanced", "W05": "advanced", "W07": "advanced", "W09": "advanced"}
MODES = ("sequential", "streamed", "one_step_off", "streamed+monitor")


def build(root: Path, n_train: int) -> None:
    from models.tiny import TinyDims, build_tiny_text, save
    from rubricflow.data.arith import task_demo
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.data.traces import render_trace
    from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, save_pool

    samples = build_synthetic_dataset(root / "data", ["arith"], {"train": n_train, "val": 2}, seed=1, image_size=56)
    corpus = ([s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
              + list(task_demo("arith")))
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                                  vocab_size=400))
    save(model, tok, root / "init")
    pool = load_default_pool("rubricflow/methods/rucl/resources/rubric_pool_text.json")
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in pool.rubrics if r.id in TIERS]
    save_pool(RubricPool(rub, {"source": "bench"}), root / "tiers.json")


def start_server(lo_ms: float, hi_ms: float, concurrency: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "rubricflow.testing.metered_judge", "--latency-ms", str(lo_ms),
                             str(hi_ms), "--concurrency", str(concurrency)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise SystemExit(f"judge server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1"


def run_mode(root: Path, tag: str, mode: str, base_url: str, args) -> dict:
    from rubricflow.judge import JudgeConfig, make_judge
    from rubricflow.judge.config import OpenAIJudgeConfig
    from rubricflow.methods.rucl.config import RuCLConfig
    from rubricflow.methods.rucl.rubrics.pool import load_tiers
    from rubricflow.methods.rucl.train import train_rucl
    from rubricflow.sections import GenerationConfig

    out = root / tag
    cfg = RuCLConfig.model_validate({
        "init_from": str(root / "init"), "tiers_path": str(root / "tiers.json"), "out_dir": str(out / "model"),
        "checkpoint_dir": str(out / "ck"), "eval_samples": 0, "eval_k": 0,
        "reward": {"mode": "rucl", "alpha": 0.7,
                   "advanced_monitor": args.monitor if mode == "streamed+monitor" else None},
        "grpo": {"group_size": args.group, "prompts_per_step": args.prompts, "steps": args.steps,
                 "max_new_tokens": args.max_new_tokens, "lr": 1e-3, "checkpoint_every": 0,
                 "engine": {"kind": "torch"}, "stream_rewards": mode != "sequential",
                 "one_step_off": mode == "one_step_off"},
    })
    judge = make_judge(JudgeConfig(backend="openai", cache_enabled=False, openai=OpenAIJudgeConfig(
        base_url=base_url, model="loopback-judge", concurrency=args.concurrency, timeout_s=30)))
    t0 = time.perf_counter()
    train_rucl(cfg, root / "data", judge, load_tiers(root / "tiers.json"), out / "reports",
               gen_cfg=GenerationConfig(eval_batch_size=args.gen_batch), seed=0)
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (out / "reports" / "steps.jsonl").read_text().splitlines()][1:]  # warm-up out

    def mean(k):
        return statistics.fmean(r[k] for r in rows)

    return {"step_s": mean("step_time_s"), "cpu_s": mean("step_cpu_s"), "gen_s": mean("rollout/gen_time_s"),
            "judge_wait_s": mean("judge/time_s"),
            "update_s": mean("update_time_s"), "lag": max(r["pipeline/policy_lag"] for r in rows),
            "prompt_tok": mean("judge/prompt_tokens"), "completion_tok": mean("judge/completion_tokens"),
            "advanced_judged": mean("judge/advanced_judged"), "wall_s": wall}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, nargs=2, default=(100.0, 500.0), metavar=("LO", "HI"))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--gen-batch", type=int, default=16, help="completions per generation batch")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--monitor", type=int, default=16, help="rucl.reward.advanced_monitor of streamed+monitor")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="modes to run (sequential always)")
    args = ap.parse_args(argv)
    rubricflow.util.env.configure_threads()
    load0 = os.getloadavg()[0]

    server, base_url = start_server(*args.latency_ms, args.concurrency)
    try:
        with tempfile.TemporaryDirectory(prefix="judge-pipeline-") as tmp:
            root = Path(tmp)
            build(root, n_train=max(16, args.prompts * 2))
            modes = [m for m in MODES if m == "sequential" or m in args.modes]
            results: dict[str, list[dict]] = {m: [] for m in modes}
            for r in range(args.rounds):
                for mode in modes[r % len(modes):] + modes[: r % len(modes)]:  # each mode first in turn
                    res = run_mode(root, f"r{r}-{mode.replace('+', '-')}", mode, base_url, args)
                    results[mode].append(res)
                    print(f"# round {r} {mode}: step {res['step_s']:.3f}s, cpu {res['cpu_s']:.3f}s "
                          f"(run {res['wall_s']:.1f}s, "
                          f"load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        server.kill()
        server.wait()

    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in results.items()}
    base = med["sequential"]["step_s"]
    # per round: the mode's step time against sequential's of the same round (the load drifts between rounds)
    per_round = {m: [s["step_s"] / x["step_s"] for s, x in zip(results["sequential"], v)] for m, v in results.items()}
    lo, hi = args.latency_ms
    n = args.prompts * args.group
    print(f"latency {lo:g}-{hi:g} ms per call, server concurrency {args.concurrency} (client judge.openai.concurrency "
          f"{args.concurrency}); {args.prompts} prompts x {args.group} = {n} completions/step, generation batches of "
          f"{args.gen_batch}, {args.max_new_tokens} new tokens; {args.steps} steps (first left out), median of "
          f"{args.rounds} rounds; tiers {sum(t == 'foundational' for t in TIERS.values())} foundational + "
          f"{sum(t == 'advanced' for t in TIERS.values())} advanced rubrics")
    print(f"load average (1 min) at start {load0:.2f}, at end {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
    print(f"{'mode':18s} {'step_s':>7s} {'ratio':>6s} {'per-round ratio':>16s} {'cpu_s':>6s} {'gen_s':>6s} "
          f"{'judge_wait_s':>12s} "
          f"{'update_s':>8s} {'lag':>3s} {'adv_judged':>10s} {'prompt_tok/step':>15s} {'compl_tok/step':>14s}")
    for m, x in med.items():
        rr = per_round[m]
        print(f"{m:18s} {x['step_s']:7.3f} {base / x['step_s']:6.2f} {statistics.median(rr):5.2f} "
              f"({min(rr):.2f}-{max(rr):.2f}) {x['cpu_s']:6.3f} "
              f"{x['gen_s']:6.3f} "
              f"{x['judge_wait_s']:12.3f} {x['update_s']:8.3f} {x['lag']:3.0f} {x['advanced_judged']:10.1f} "
              f"{x['prompt_tok']:15.0f} {x['completion_tok']:14.0f}")
    last = [f"{m.replace('+', '_')}={base / med[m]['step_s']:.2f}" for m in ("streamed", "one_step_off") if m in med]
    if "streamed" in med and "streamed+monitor" in med:
        full = med["streamed"]["prompt_tok"] + med["streamed"]["completion_tok"]
        mon = med["streamed+monitor"]["prompt_tok"] + med["streamed+monitor"]["completion_tok"]
        last.append(f"tokens_monitor_vs_full={mon / full:.2f}")
    print("judge_pipeline " + " ".join(last))


if __name__ == "__main__":
    main()
