"""The policy a pipeline starts from: the tiny base model built offline and its SFT warm start.

The foundation's ``base_model`` and ``sft`` stages bind these to their sections; a study whose seed covers the whole
chain (``study.<name>.per_seed_start``) builds the same start once per seed with them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rubricflow.sections import DataConfig, GenerationConfig, ModelsConfig, SFTConfig
from rubricflow.util.io import staged_dir


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


def build_base(models: ModelsConfig, data: DataConfig, out_dir: str | Path, seed: int) -> dict:
    """Build the tiny policy (offline tokenizer + Qwen2.5-VL or Qwen2 config) into ``out_dir`` with ``seed``, or check
    that a pretrained one (``models.policy.source: pretrained``) loads."""
    from models.loader import load_policy
    from models.processor import text_tokenizer
    from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save

    spec = models.policy
    if spec.source == "pretrained":
        model, _ = load_policy(spec.path, dtype=spec.dtype)
        return {"params": sum(p.numel() for p in model.parameters()), "source": "pretrained"}
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
    build = build_tiny_vl if spec.arch == "qwen2_5_vl" else build_tiny_text
    model, proc = build(tokenizer_corpus(data), dims, seed=seed)
    with staged_dir(out_dir) as tmp:
        save(model, proc, tmp)
    n = sum(p.numel() for p in model.parameters())
    return {"params": n, "vocab": len(text_tokenizer(proc)), "source": "tiny", "arch": spec.arch}


def sft_examples(processor, data_dir: str | Path, samples) -> list:
    """Gold-trace examples with the prompts the policy is evaluated and trained on later (a text task's one-shot
    demonstration included: rubricflow.evaluation.heldout.policy_requests)."""
    from models.processor import chat_prompt
    from rubricflow.data.arith import task_demo
    from rubricflow.data.schema import load_images
    from rubricflow.data.traces import render_trace
    from rubricflow.training.sft import SFTExample

    return [
        SFTExample(
            chat_prompt(processor, s.question, n_images=len(s.images), demo=task_demo(s.task)),
            render_trace(s.facts, s.answer),
            load_images(data_dir, s),
        )
        for s in samples
    ]


def warm_start(sft: SFTConfig, models: ModelsConfig, data: DataConfig, generation: GenerationConfig,
               base_path: str | Path, out_dir: str | Path, seed: int,
               log_fn: Callable[[int, dict], None] | None = None) -> tuple[dict, list[dict]]:
    """Fine-tune the policy at ``base_path`` on gold reasoning traces (LoRA adapters when ``sft.lora.rank > 0``,
    merged into the weights before saving) into ``out_dir``; returns the metrics (val accuracy before and after, per
    task, against the majority answer) and the loss curve."""
    from models.loader import load_policy
    from models.tiny import save
    from rubricflow.data.schema import read_dataset
    from rubricflow.evaluation.heldout import evaluate_policy, majority_baseline
    from rubricflow.grpo.lora import apply_lora, merge_lora
    from rubricflow.pipeline.progress import progress
    from rubricflow.training.sft import train_sft

    model, proc = load_policy(str(base_path), dtype=models.policy.dtype)
    data_dir = data.out_dir
    train = read_dataset(data_dir, split="train")
    # choose on val, report on test: SFT is training, so its before/after accuracy is measured on val (the test
    # numbers of the SFT start come from the final evaluation)
    val = read_dataset(data_dir, split="val")[: sft.eval_samples * len(data.tasks)]
    before = evaluate_policy(model, proc, data_dir, val, generation)
    examples = sft_examples(proc, data_dir, train)
    model = apply_lora(model, sft.lora)
    loss_log: list[dict] = []

    def log(step: int, m: dict) -> None:
        loss_log.append({"step": step, "loss": m["sft/loss"]})
        if log_fn is not None:
            log_fn(step, m)

    with progress("sft", total=sft.steps) as bar:
        losses = train_sft(
            model,
            proc,
            examples,
            sft,
            seed=seed,
            log_fn=lambda s, m: (log(s, m), bar.advance(1, loss=m["sft/loss"])),
        )
    model = merge_lora(model)
    after = evaluate_policy(model, proc, data_dir, val, generation)
    with staged_dir(out_dir) as tmp:
        save(model, proc, tmp)
    metrics = {
        "accuracy_before": before,
        "accuracy_after": after,
        "majority_baseline": majority_baseline(train, val),
        "final_loss": losses[-1] if losses else None,
        "train_examples": len(examples),
        "eval_samples": len(val),
        "eval_split": "val",
    }
    return metrics, loss_log
