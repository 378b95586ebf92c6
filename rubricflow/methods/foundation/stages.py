"""Foundation stages: data -> validate -> base model -> SFT (shared by the pipelines that train the VL policy).

Each is a ``@stage`` (``rubricflow.stage``): it takes its config sections by name and a ``StageContext``. Outputs
are written to a staging path and renamed into place, so a failed stage leaves earlier outputs intact.
"""

from __future__ import annotations

from pathlib import Path

from rubricflow.io import staged_dir, write_json
from rubricflow.sections import DataConfig, GenerationConfig, ModelsConfig, SFTConfig
from rubricflow.data.validate import dataset_key, require_gate, stamp_path
from rubricflow.stage import StageContext, stage


# ================================================================================================================
# data


@stage("data", reads_test=True)
def data_stage(data: DataConfig, ctx: StageContext) -> dict:
    """Generate the synthetic multimodal dataset (deterministic by seed)."""
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.progress import progress

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
    from rubricflow.data.validate import validate_dataset, write_stamp

    pipeline = _is_pipeline_dataset(data, data_dir)
    data_dir = data_dir or data.out_dir
    required = [s for s, n in data.splits.model_dump().items() if n > 0] if pipeline else []
    report = validate_dataset(data_dir, min_split_size=data.min_split_size, required_splits=required)
    write_stamp(report, stamp_path(ctx.reports_dir, data_dir))
    return {"n_rows": report.n_rows, "expectations": report.expectations, "splits": report.split_counts}


# ================================================================================================================
# base model


def tokenizer_corpus(data: DataConfig) -> list[str]:
    """Text the offline tokenizer is trained on: task questions, gold traces and the methods' prompt words."""
    from rubricflow.data.schema import read_dataset
    from rubricflow.data.traces import render_trace

    samples = read_dataset(data.out_dir, split="train")
    corpus = [s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
    corpus += [
        "Response A Response B Check: Verdict: A B favours evidence checklist relevance factual consistency "
        "key visual information reasoning clarity completeness neutral question image answer",
        "step Start with Add Subtract Multiply by #### criterion weight score satisfied rubric",
    ]
    return corpus


@stage("base_model")
def base_model_stage(models: ModelsConfig, data: DataConfig, ctx: StageContext) -> dict:
    """Build the tiny policy (offline tokenizer + Qwen2.5-VL config) — or check a pretrained one resolves."""
    from models.loader import load_policy
    from models.processor import text_tokenizer
    from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save

    spec = models.policy
    if spec.source == "pretrained":
        model, _ = load_policy(spec.path, dtype=spec.dtype)
        return {"params": sum(p.numel() for p in model.parameters()), "source": "pretrained"}
    require_gate(data, ctx.reports_dir)
    dims = TinyDims(
        hidden_size=spec.hidden_size,
        num_layers=spec.num_layers,
        num_heads=spec.num_heads,
        num_kv_heads=max(1, spec.num_heads // 2),
        vision_hidden_size=spec.vision_hidden_size,
        vision_depth=spec.vision_depth,
        vocab_size=spec.vocab_size,
        image_size=data.image_size,
    )
    corpus = tokenizer_corpus(data)
    build = build_tiny_vl if spec.arch == "qwen2_5_vl" else build_tiny_text
    model, proc = build(corpus, dims, seed=ctx.seed)
    with staged_dir(spec.path) as tmp:
        save(model, proc, tmp)
    n = sum(p.numel() for p in model.parameters())
    return {"params": n, "vocab": len(text_tokenizer(proc)), "source": "tiny", "arch": spec.arch}


# ================================================================================================================
# SFT warm start


def sft_examples(processor, data_dir: str | Path, samples) -> list:
    """Gold-trace examples with the prompts the policy is evaluated and trained on later (a text task's one-shot
    demonstration included: rubricflow.evaluation.policy_requests)."""
    from models.processor import chat_prompt
    from rubricflow.data.arith import task_demo
    from rubricflow.data.schema import load_images
    from rubricflow.data.traces import render_trace
    from rubricflow.sft import SFTExample

    return [
        SFTExample(
            chat_prompt(processor, s.question, n_images=len(s.images), demo=task_demo(s.task)),
            render_trace(s.facts, s.answer),
            load_images(data_dir, s),
        )
        for s in samples
    ]


@stage("sft", retries=1)
def sft_stage(
    sft: SFTConfig, models: ModelsConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """Fine-tune the base policy on gold reasoning traces (LoRA adapters when ``sft.lora.rank > 0``, merged into the
    weights before saving); report val accuracy before and after."""
    from models.loader import load_policy
    from rubricflow.grpo.lora import apply_lora, merge_lora
    from rubricflow.data.schema import read_dataset
    from rubricflow.evaluation import evaluate_policy, majority_baseline
    from rubricflow.progress import progress
    from rubricflow.sft import train_sft

    require_gate(data, ctx.reports_dir)
    model, proc = load_policy(models.policy.path, dtype=models.policy.dtype)
    data_dir = data.out_dir
    train = read_dataset(data_dir, split="train")
    # choose on val, report on test: SFT is training, so its before/after accuracy is measured on val (the test
    # numbers of the SFT start come from the final evaluation stage, rucl_eval)
    val = read_dataset(data_dir, split="val")[: sft.eval_samples * len(data.tasks)]
    before = evaluate_policy(model, proc, data_dir, val, generation)
    examples = sft_examples(proc, data_dir, train)
    model = apply_lora(model, sft.lora)
    loss_log: list[dict] = []

    def log(step: int, m: dict) -> None:
        loss_log.append({"step": step, "loss": m["sft/loss"]})
        if step % 10 == 0:
            ctx.run.log_metrics(m, step=step)

    with progress("sft", total=sft.steps) as bar:
        losses = train_sft(
            model,
            proc,
            examples,
            steps=sft.steps,
            batch_size=sft.batch_size,
            lr=sft.lr,
            warmup_steps=sft.warmup_steps,
            weight_decay=sft.weight_decay,
            schedule=sft.schedule,
            seed=ctx.seed,
            log_fn=lambda s, m: (log(s, m), bar.advance(1, loss=m["sft/loss"])),
        )
    model = merge_lora(model)
    after = evaluate_policy(model, proc, data_dir, val, generation)
    from models.tiny import save

    with staged_dir(sft.out_dir) as tmp:
        save(model, proc, tmp)
    write_json(ctx.reports_dir / "plots" / "sft_loss.json", loss_log)
    return {
        "accuracy_before": before,
        "accuracy_after": after,
        "majority_baseline": majority_baseline(train, val),
        "final_loss": losses[-1] if losses else None,
        "train_examples": len(examples),
        "eval_samples": len(val),
        "eval_split": "val",
    }
