"""Foundation stages: data -> validate -> base model -> SFT (shared by the pipelines that train the VL policy).

Each is a ``@stage`` (``rubricflow.pipeline.stage``): it takes its config sections by name and a ``StageContext``.
Outputs are written to a staging path and renamed into place, so a failed stage leaves earlier outputs intact.
"""

from __future__ import annotations

from pathlib import Path

from rubricflow.util.io import staged_dir, write_json
from rubricflow.training.policy_start import build_base, warm_start
from rubricflow.sections import DataConfig, GenerationConfig, ModelsConfig, SFTConfig
from rubricflow.data.validate import dataset_key, require_gate, stamp_path, validate_dataset, write_stamp
from rubricflow.pipeline.progress import progress
from rubricflow.pipeline.stage import StageContext, stage


# ================================================================================================================
# data


@stage("data", reads_test=True)
def data_stage(data: DataConfig, ctx: StageContext) -> dict:
    """Generate the synthetic multimodal dataset (deterministic by seed)."""
    from rubricflow.data.synthetic import build_synthetic_dataset  # loads PIL: off the CLI's start

    d = data
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


def _is_pipeline_dataset(data: DataConfig, data_dir: str | Path | None) -> bool:
    return data_dir is None or dataset_key(data_dir) == dataset_key(data.out_dir)


def validate_report_name(cfg, data_dir: str | Path | None = None) -> str:
    """The stage report of ``validate``: ``validate`` (``reports/validate.json``) for the pipeline's data set
    (``data.out_dir``), ``validate/<dataset_key>`` (``reports/validate/<key>.json``) for any other folder, so
    validating another folder never rewrites the pipeline's report."""
    return "validate" if _is_pipeline_dataset(cfg.data, data_dir) else f"validate/{dataset_key(data_dir)}"


@stage("validate", reads_test=True, report_name=validate_report_name)
def validate_stage(data: DataConfig, ctx: StageContext, data_dir: str | None = None) -> dict:
    """Great Expectations gate; writes the validation stamp only on success."""
    pipeline = _is_pipeline_dataset(data, data_dir)
    data_dir = data_dir or data.out_dir
    required = [s for s, n in data.splits.model_dump().items() if n > 0] if pipeline else []
    report = validate_dataset(data_dir, min_split_size=data.min_split_size, required_splits=required)
    write_stamp(report, stamp_path(ctx.reports_dir, data_dir))
    return {"n_rows": report.n_rows, "expectations": report.expectations, "splits": report.split_counts}


# ================================================================================================================
# base model and SFT warm start (rubricflow.training.policy_start)


@stage("base_model")
def base_model_stage(models: ModelsConfig, data: DataConfig, ctx: StageContext) -> dict:
    """Build the tiny policy (offline tokenizer + Qwen2.5-VL config) — or check a pretrained one resolves."""
    if models.policy.source != "pretrained":
        require_gate(data, ctx.reports_dir)
        ctx.run.log_input(data.out_dir, split="train", context="training")
    return build_base(models, data, models.policy.path, ctx.seed)


@stage("sft", retries=1, outputs=("sft.out_dir",), metric_ns="train",
       metric_names={"accuracy_before/": "val/accuracy_before/", "accuracy_after/": "val/accuracy_after/",
                     "majority_baseline/": "val/majority_baseline/", "eval_samples": "val/eval_samples"})
def sft_stage(
    sft: SFTConfig, models: ModelsConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """Fine-tune the base policy on gold reasoning traces (LoRA adapters when ``sft.lora.rank > 0``, merged into the
    weights before saving); report val accuracy before and after."""
    require_gate(data, ctx.reports_dir)
    ctx.run.log_input(data.out_dir, split="train", context="training")
    ctx.run.log_input(data.out_dir, split="val", context="evaluation")

    def log(step: int, m: dict) -> None:
        if step % 10 == 0:
            ctx.run.log_metrics(m, step=step)

    metrics, loss_log = warm_start(sft, models, data, generation, models.policy.path, sft.out_dir, ctx.seed, log)
    write_json(ctx.reports_dir / "plots" / "sft_loss.json", loss_log)
    return metrics
