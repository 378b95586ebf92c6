"""Pipeline stages of the foundation: data -> validate -> base model -> SFT.

A stage is a plain function ``fn(cfg, run) -> metrics`` wrapped by ``@stage(name)``, which opens the MLflow
child run, logs the config and the returned metrics, writes ``reports/<name>.json`` atomically and returns the
metrics. The CLI (``rubricflow <name>``), ``dvc.yaml`` and the Prefect tasks all call these same functions.
Outputs are written to a staging path and renamed into place, so a failed stage leaves earlier outputs intact.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the stage modules of method packages import this module while rubricflow.config composes
    from rubricflow.config import Config

StageFn = Callable[..., dict]
REGISTRY: dict[str, StageFn] = {}


class NullRun:
    """Stand-in for a tracking run when tracking is disabled (unit tests of stage logic)."""

    run_id = None
    parent_id = None

    def log_metrics(self, *a, **k):
        pass

    def log_params(self, *a, **k):
        pass

    def set_tags(self, *a, **k):
        pass

    def log_artifact(self, *a, **k):
        pass

    def log_dict(self, *a, **k):
        pass

    def event(self, *a, **k):
        pass


def reports_dir(cfg: Config) -> Path:
    return Path(cfg.reports_dir)


def write_json(path: str | Path, obj: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)
    return path


@contextmanager
def staged_dir(final: str | Path):
    """Yield a staging directory; on success it atomically replaces ``final`` (on failure ``final`` is untouched)."""
    final = Path(final)
    staging = final.with_name(f".{final.name}.staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def stage(name: str, sections: tuple[str, ...] = (), report_name: Callable[[Any], str] | None = None):
    """Register a stage; the wrapper handles tracking and the metrics report.

    ``report_name(cfg)`` names one run of a stage that has variants (e.g. RuCL's outcome-only baseline): the
    report file, the MLflow run and the DVC stage then use that name instead of ``name``.
    """

    def deco(fn: StageFn) -> StageFn:
        @functools.wraps(fn)
        def wrapper(cfg: Config, *args, track: bool = True, prefect_flow_run_id: str | None = None, **kw) -> dict:
            t0 = time.perf_counter()
            run_name = report_name(cfg) if report_name else name
            params = {s: getattr(cfg, s).model_dump(mode="json") for s in sections if hasattr(cfg, s)}
            params["profile"] = cfg.profile
            params["seed"] = cfg.seed
            if not track:
                metrics = fn(cfg, *args, run=NullRun(), **kw)
            else:
                from rubricflow.tracking import stage_run

                with stage_run(
                    run_name,
                    experiment=cfg.tracking.experiment,
                    params=params,
                    tags={"profile": cfg.profile},
                    tracking_uri=cfg.tracking.tracking_uri,
                    prefect_flow_run_id=prefect_flow_run_id,
                ) as run:
                    metrics = fn(cfg, *args, run=run, **kw)
                    metrics.setdefault("duration_s", round(time.perf_counter() - t0, 2))
                    run.log_metrics({k: v for k, v in _flat(metrics).items()})
                    metrics["mlflow_run_id"] = run.run_id
            metrics.setdefault("duration_s", round(time.perf_counter() - t0, 2))
            # the MLflow run id stays out of the DVC metrics file (it would differ on every run in `dvc exp show`)
            write_json(reports_dir(cfg) / f"{run_name}.json", {k: v for k, v in metrics.items() if k != "mlflow_run_id"})
            return metrics

        wrapper.stage_name, wrapper.sections = name, sections  # read by the tasks layer (cache keys)
        REGISTRY[name] = wrapper
        return wrapper

    return deco


def _flat(d: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


# ================================================================================================================
# data


@stage("data", sections=("data",))
def data_stage(cfg: Config, run=NullRun()) -> dict:
    """Generate the synthetic multimodal dataset (deterministic by seed)."""
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.progress import progress

    d = cfg.data
    sizes = d.splits.model_dump()
    total = sum(sizes.values()) * len(d.tasks)
    with staged_dir(d.out_dir) as tmp, progress("data", total=total) as bar:
        samples = build_synthetic_dataset(tmp, list(d.tasks), sizes, d.seed, d.image_size, progress=bar.advance)
    counts: dict[str, int] = {}
    for s in samples:
        counts[s.split] = counts.get(s.split, 0) + 1
    return {"n_samples": len(samples), "splits": counts, "tasks": len(d.tasks)}


# ================================================================================================================
# validate


def stamp_path(cfg: Config, data_dir: str | Path) -> Path:
    return reports_dir(cfg) / "validation" / f"{Path(data_dir).name}.json"


@stage("validate", sections=("data",))
def validate_stage(cfg: Config, data_dir: str | None = None, run=NullRun()) -> dict:
    """Great Expectations gate; writes the validation stamp only on success."""
    from rubricflow.data.validate import validate_dataset, write_stamp

    data_dir = data_dir or cfg.data.out_dir
    required = [s for s, n in cfg.data.splits.model_dump().items() if n > 0] if data_dir == cfg.data.out_dir else []
    report = validate_dataset(data_dir, min_split_size=cfg.data.min_split_size, required_splits=required)
    write_stamp(report, stamp_path(cfg, data_dir))
    return {"n_rows": report.n_rows, "expectations": report.expectations, "splits": report.split_counts}


def require_gate(cfg: Config, data_dir: str | Path | None = None) -> None:
    from rubricflow.data.validate import require_validated

    data_dir = data_dir or cfg.data.out_dir
    require_validated(data_dir, stamp_path(cfg, data_dir))


# ================================================================================================================
# base model


def tokenizer_corpus(cfg: Config) -> list[str]:
    """Text the offline tokenizer is trained on: task questions, gold traces and the methods' prompt words."""
    from rubricflow.data.schema import read_dataset
    from rubricflow.data.traces import render_trace

    samples = read_dataset(cfg.data.out_dir, split="train")
    corpus = [s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
    corpus += [
        "Response A Response B Check: Verdict: A B favours evidence checklist relevance factual consistency "
        "key visual information reasoning clarity completeness neutral question image answer",
        "step Start with Add Subtract Multiply by #### criterion weight score satisfied rubric",
    ]
    return corpus


@stage("base_model", sections=("models",))
def base_model_stage(cfg: Config, run=NullRun()) -> dict:
    """Build the tiny policy (offline tokenizer + Qwen2.5-VL config) — or check a pretrained one resolves."""
    from models.loader import load_policy
    from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save

    spec = cfg.models.policy
    if spec.source == "pretrained":
        model, _ = load_policy(spec.path, dtype=spec.dtype)
        return {"params": sum(p.numel() for p in model.parameters()), "source": "pretrained"}
    require_gate(cfg)
    dims = TinyDims(
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        num_heads=spec.num_heads,
        num_kv_heads=max(1, spec.num_heads // 2),
        vision_hidden_size=spec.vision_hidden_size,
        vision_depth=spec.vision_depth,
        vocab_size=spec.vocab_size,
        image_size=cfg.data.image_size,
    )
    corpus = tokenizer_corpus(cfg)
    build = build_tiny_vl if spec.arch == "qwen2_5_vl" else build_tiny_text
    model, proc = build(corpus, dims, seed=cfg.seed)
    with staged_dir(spec.path) as tmp:
        save(model, proc, tmp)
    n = sum(p.numel() for p in model.parameters())
    return {"params": n, "vocab": len(getattr(proc, "tokenizer", proc)), "source": "tiny", "arch": spec.arch}


# ================================================================================================================
# SFT warm start


def sft_examples(processor, data_dir: str | Path, samples) -> list:
    from rubricflow.data.schema import load_images
    from rubricflow.data.traces import render_trace
    from rubricflow.sft import SFTExample

    return [
        SFTExample(
            processor.chat_prompt(s.question, n_images=len(s.images)),
            render_trace(s.facts, s.answer),
            load_images(data_dir, s),
        )
        for s in samples
    ]


@stage("sft", sections=("sft", "models"))
def sft_stage(cfg: Config, run=NullRun()) -> dict:
    """Fine-tune the base policy on gold reasoning traces; report held-out accuracy before and after."""
    from models.loader import load_policy
    from rubricflow.data.schema import read_dataset
    from rubricflow.evaluation import evaluate_policy, majority_baseline
    from rubricflow.progress import progress
    from rubricflow.sft import train_sft

    require_gate(cfg)
    model, proc = load_policy(cfg.models.policy.path, dtype=cfg.models.policy.dtype)
    data_dir = cfg.data.out_dir
    train = read_dataset(data_dir, split="train")
    test = read_dataset(data_dir, split="test")[: cfg.sft.eval_samples * len(cfg.data.tasks)]
    before = evaluate_policy(model, proc, data_dir, test, cfg.generation)
    examples = sft_examples(proc, data_dir, train)
    loss_log: list[dict] = []

    def log(step: int, m: dict) -> None:
        loss_log.append({"step": step, "loss": m["sft/loss"]})
        if step % 10 == 0:
            run.log_metrics(m, step=step)

    with progress("sft", total=cfg.sft.steps) as bar:
        losses = train_sft(
            model,
            proc,
            examples,
            steps=cfg.sft.steps,
            batch_size=cfg.sft.batch_size,
            lr=cfg.sft.lr,
            warmup_steps=cfg.sft.warmup_steps,
            weight_decay=cfg.sft.weight_decay,
            seed=cfg.seed,
            log_fn=lambda s, m: (log(s, m), bar.advance(1, loss=m["sft/loss"])),
        )
    after = evaluate_policy(model, proc, data_dir, test, cfg.generation)
    from models.tiny import save

    with staged_dir(cfg.sft.out_dir) as tmp:
        save(model, proc, tmp)
    write_json(reports_dir(cfg) / "plots" / "sft_loss.json", loss_log)
    return {
        "accuracy_before": before,
        "accuracy_after": after,
        "majority_baseline": majority_baseline(train, test),
        "final_loss": losses[-1] if losses else None,
        "train_examples": len(examples),
        "eval_samples": len(test),
    }
