"""RuCL, DeltaRubric and RoRo training under DeepSpeed ZeRO-3 on several local processes (the multi-rank checks).

Prepare the inputs once, in one process (a counting data set with a val split, a tiny Qwen2.5-VL warm-started by a
few SFT steps, the rubric tiers; DeltaRubric's pairs and warm start; RoRo's step models)::

    python -m tests.grpo.zero3_train prepare --work DIR

then run jobs on every rank, one after another in the same processes::

    torchrun --standalone --nproc_per_node 2 -m tests.grpo.zero3_train run --work DIR \\
        --job rucl:a:4 --job rucl-missing:c:2 --job deltarubric:d:2 --job roro:e:3

A job ``<kind>:<name>:<steps>`` trains under ``DIR/<name>/`` (checkpoints, the saved model) with the real stage
functions (``train_rucl``, DeltaRubric's ``train_stage``, RoRo's ``run_router``) on DeepSpeed ZeRO-3 (gloo), and
each rank writes ``DIR/<name>/rank<r>.json``: its per-step metrics and the function's result. Running the same job
name again resumes from its checkpoints (a fresh launch is a fresh process). ``rucl-missing``: the judge of the
last rank fails every judgment, so all of that rank's rewards are missing.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import rubricflow.util.env  # noqa: F401  (project-local caches before torch)

TIERS = {"C17": "foundational", "C18": "foundational", "C05": "foundational",
         "C08": "advanced", "C11": "advanced", "C20": "advanced"}
ZERO3 = {"kind": "deepspeed", "zero_stage": 3, "dist_backend": "gloo", "cpu_shm_comm": False}


# ----------------------------------------------------------------------------------------------------------------
# inputs


def rucl_cfg(work: Path, name: str, steps: int):
    from rubricflow.methods.rucl.config import RuCLConfig

    return RuCLConfig.model_validate({
        "init_from": str(work / "rucl-sft"), "tiers_path": str(work / "tiers.json"),
        "out_dir": str(work / name / "model"), "checkpoint_dir": str(work / name / "ck"), "eval_samples": 5,
        "reward": {"mode": "rucl", "alpha": 0.7},
        "curriculum": {"threshold": 0.3, "window": 2, "ramp_steps": 2, "peak": 0.5, "shape": "linear"},
        "grpo": {"group_size": 4, "prompts_per_step": 2, "steps": steps, "max_new_tokens": 28, "lr": 1e-3,
                 "checkpoint_every": 2, "eval_every": 2, "engine": ZERO3},
    })


def deltarubric_sections(work: Path, name: str, steps: int) -> dict:
    """DeltaRubric's stage sections and context (the stage functions take them by name)."""
    from rubricflow.methods.deltarubric.config import DeltaRubricConfig
    from rubricflow.pipeline.stage import StageContext
    from rubricflow.sections import GenerationConfig, ModelsConfig

    dr = DeltaRubricConfig.model_validate({
        "pairs": {"out_dir": str(work / "dr-pairs"), "tasks": ["counting"], "train": 12, "val": 4, "test": 6,
                  "balance_tol": 0.2},
        "sft": {"out_dir": str(work / "dr-sft"), "base_dir": str(work / "dr-base"), "steps": 6, "batch_size": 8,
                "warmup_steps": 1, "hidden_size": None, "perception_images": 4},
        "train": {"out_dir": str(work / name / "model"), "n_checklists": 2, "m_verdicts": 2, "k_no_rubric": 2,
                  "planner_max_tokens": 12, "verifier_max_tokens": 12, "probe_every": 1, "probe_pairs": 2,
                  "grpo": {"steps": steps, "prompts_per_step": 1, "lr": 1e-3, "scale_rewards": "batch",
                           "engine": ZERO3}},
        "eval": {"out_dir": str(work / "dr-eval"), "test_pairs": 4, "batch_size": 16},
    })
    models = ModelsConfig.model_validate({"policy": {"source": "tiny", "hidden_size": 32, "num_layers": 1,
                                                     "num_heads": 2, "vision_hidden_size": 32, "vision_depth": 1,
                                                     "vocab_size": 400}})
    # checkpoints go under <artifacts_dir>/deltarubric/checkpoints/
    ctx = StageContext(reports_dir=work / name / "reports", artifacts_dir=work / name / "artifacts")
    return {"deltarubric": dr, "models": models, "generation": GenerationConfig(), "ctx": ctx}


def roro_cfg(work: Path, name: str, steps: int):
    from rubricflow.methods.roro.config import RoRoConfig

    a = work / "roro"
    return RoRoConfig.model_validate({
        "data_dir": str(work / "roro-data"), "out_dir": str(work / name / "out"),
        "task": {"n_sft": 300, "n_train": 8, "n_val": 4, "n_test": 4},
        "slm": {"path": str(a / "slm"), "hidden_size": 32, "num_layers": 1, "sft_steps": 30, "sft_decay_steps": 0,
                "target_step_acc": 0.0},
        "lrm": {"path": str(a / "lrm"), "hidden_size": 32, "num_layers": 1, "sft_steps": 30, "sft_decay_steps": 0,
                "target_step_acc": 0.0},
        "router": {"process_weight": 0.0, "cost_weight": 0.5, "sweep_cost_weights": [0.5],
                   "checkpoint_dir": str(work / name / "ck"),
                   "grpo": {"steps": steps, "group_size": 4, "prompts_per_step": 2, "checkpoint_every": 2,
                            "lr": 0.05, "engine": ZERO3}},
    })


def prepare(work: Path) -> None:
    import dataclasses

    from models.tiny import TinyDims, build_tiny_vl, save
    from rubricflow.data.schema import load_images
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.data.traces import render_trace
    from rubricflow.methods.deltarubric.stages import pairs_stage, sft_stage
    from rubricflow.methods.roro.env.step_models import run_models
    from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, save_pool
    from rubricflow.sections import SFTSchedule
    from rubricflow.training.sft import SFTExample, train_sft

    samples = build_synthetic_dataset(work / "data", ["counting"], {"train": 16, "val": 5}, seed=1, image_size=56)
    corpus = [s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
    model, proc = build_tiny_vl(corpus, TinyDims(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                                                 vocab_size=400, vision_hidden_size=32, vision_depth=1))
    train = [s for s in samples if s.split == "train"]
    ex = [SFTExample(proc.chat_prompt(s.question, 1), render_trace(s.facts, s.answer), load_images(work / "data", s))
          for s in train]
    train_sft(model, proc, ex, SFTSchedule(steps=120, batch_size=16, lr=3e-3, warmup_steps=5, schedule="constant"))
    save(model, proc, work / "rucl-sft")
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in load_default_pool().rubrics if r.id in TIERS]
    save_pool(RubricPool(rub, {"source": "test"}), work / "tiers.json")
    sec = deltarubric_sections(work, "prep", 1)
    pairs_stage.fn(deltarubric=sec["deltarubric"], ctx=sec["ctx"])
    sft_stage.fn(**{k: sec[k] for k in ("deltarubric", "models", "ctx")})
    run_models(roro_cfg(work, "prep", 1))


# ----------------------------------------------------------------------------------------------------------------
# jobs


class Recorder:
    """The stage's ``run``: keeps the per-step metrics."""

    def __init__(self):
        self.steps: dict[int, dict] = {}

    def log_metrics(self, m: dict, step: int | None = None) -> None:
        self.steps.setdefault(int(step or 0), {}).update({k: float(v) for k, v in m.items()
                                                          if isinstance(v, (int, float))})

    def event(self, *a, **kw) -> None:
        pass

    def log_artifact(self, *a, **kw) -> None:
        pass


class DownJudge:
    """A judge whose every judgment failed (as when its server is down)."""

    name, model_id, prompt_version = "down", "down", "0"

    def preflight(self) -> None:
        pass

    def judge(self, requests):
        from rubricflow.judge.protocol import Judgment

        return [Judgment(status="failed", reason="the judge of this rank is down") for _ in requests]


def run_job(work: Path, kind: str, name: str, steps: int) -> dict:
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rec = Recorder()
    if kind in ("rucl", "rucl-missing"):
        from rubricflow.judge.programmatic import ProgrammaticJudge
        from rubricflow.methods.rucl.rubrics.pool import load_tiers
        from rubricflow.methods.rucl.train import train_rucl

        judge = DownJudge() if (kind == "rucl-missing" and rank == world - 1) else ProgrammaticJudge()
        result = train_rucl(rucl_cfg(work, name, steps), work / "data", judge, load_tiers(work / "tiers.json"),
                            work / name / f"reports-rank{rank}", run=rec, seed=7)
    elif kind == "deltarubric":
        from rubricflow.methods.deltarubric.stages import train_stage

        result = train_stage.fn(**deltarubric_sections(work, name, steps),
                                log_fn=lambda s, m: rec.log_metrics(m, step=s))
    elif kind == "roro":
        from rubricflow.methods.roro.router.train import run_router

        result = run_router(roro_cfg(work, name, steps), log=lambda tag, row: rec.log_metrics(
            {f"{tag}/{k}": v for k, v in row.items()}, step=int(row["step"])))
    else:
        raise ValueError(f"job kind: expected rucl, rucl-missing, deltarubric or roro, got {kind!r}")
    out = {"rank": rank, "world_size": dist.get_world_size() if dist.is_initialized() else 1,
           "steps": {str(k): v for k, v in sorted(rec.steps.items())}, "result": result}
    (work / name).mkdir(parents=True, exist_ok=True)
    (work / name / f"rank{rank}.json").write_text(json.dumps(out, indent=1, default=str))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--work", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--job", action="append", required=True, help="<kind>:<name>:<steps>")
    args = ap.parse_args(argv)
    rubricflow.util.env.configure_threads()
    work = Path(args.work)
    if args.cmd == "prepare":
        work.mkdir(parents=True, exist_ok=True)
        prepare(work)
        return
    for job in args.job:
        kind, name, steps = job.split(":")
        run_job(work, kind, name, int(steps))


if __name__ == "__main__":
    main()
