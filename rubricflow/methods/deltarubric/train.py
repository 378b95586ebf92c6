"""Multi-role GRPO for DeltaRubric on the shared GRPO machinery (no trainer of its own).

``train_policy`` wires DeltaRubric's rollout into ``rubricflow.grpo``: ``GRPOTrainer`` streams training pairs
(``prompts_per_step`` per step), calls ``rollout_fn`` (rubricflow.methods.deltarubric.rollout: N checklists, M guided
verdicts per valid checklist, K no-rubric verdicts; rewards of both roles) and hands the episodes of *both* roles
to one ``GRPOUpdater.update`` call, which normalises advantages per role (decoupled) and takes one optimiser step
on the shared policy (``train.judge: no_rubric | static`` trains that judge mode alone instead: the paper's
trained baselines). The planner probe runs on validation pairs every ``probe_every`` steps (with the torch RNG
forked, so probing does not change the training samples) and once after the last step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import torch

from models.processor import text_tokenizer
from rubricflow.methods.deltarubric.config import DRTrainConfig, effective_grpo
from rubricflow.methods.deltarubric.evaluate import planner_probe
from rubricflow.methods.deltarubric.rollout import Item, collect, score

LogFn = Callable[[int, dict[str, float]], None]


def _finite(m: dict) -> dict[str, float]:
    return {k: float(v) for k, v in m.items() if isinstance(v, (int, float)) and math.isfinite(float(v))}


def train_policy(
    model,
    processor,
    gen,
    train_items: list[Item],
    val_items: list[Item],
    cfg: DRTrainConfig,
    checkpoint_dir: str | Path,
    log_fn: LogFn | None = None,
    progress: Callable[[int], None] | None = None,
    key_parts: dict | None = None,
    save_to: str | Path | None = None,
) -> dict:
    """Run ``cfg.grpo.steps`` multi-role GRPO steps in place on ``model`` (resuming from ``checkpoint_dir`` if its
    checkpoints were trained on the same ``key_parts``) and, with ``save_to``, save the trained policy there
    (consolidated, written once by rank 0: ``rubricflow.grpo.export.save_policy``); returns ``{"curve": per-step
    rows, "final_probe", "steps", "resumed_from", "resume_refused", "corrupt_checkpoints", "run_time_s"}``. Under
    several ranks call it on every rank."""
    from rubricflow.grpo.causal_lm import CausalLMAdapter
    from rubricflow.grpo.engine import make_engine
    from rubricflow.grpo.export import save_policy
    from rubricflow.grpo.trainer import GRPOTrainer
    from rubricflow.grpo.updater import GRPOUpdater

    g = effective_grpo(cfg)
    engine = make_engine(model, g)
    updater = GRPOUpdater(CausalLMAdapter(model, processor, g.temperature), engine, g)
    tok = text_tokenizer(processor)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    max_tokens = {"planner": cfg.planner_max_tokens, "verifier": cfg.verifier_max_tokens}
    if cfg.judge != "deltarubric":  # a single-step judge run has no planner to probe
        val_items = []

    def probe(step: int) -> dict[str, float]:
        with torch.random.fork_rng(devices=[]):
            return planner_probe(gen, processor, val_items, cfg.n_checklists, max_tokens, g.temperature, seed=g.seed + step)

    def rollout_fn(step: int, items: list[Item]):
        gen.sync_weights(model)  # vLLM samples from the current (or resumed) weights; transformers: the same tensors
        metrics: dict[str, float] = {}
        if val_items and (step == 0 or (cfg.probe_every and step % cfg.probe_every == 0)):
            metrics.update(probe(step))
        episodes, m = score(collect(gen, processor, items, cfg), cfg, eos)
        metrics.update(m)
        return episodes, metrics

    # per-step rows are appended to <checkpoint_dir>/steps.jsonl, so a resumed run reports the whole curve
    steps_path = Path(checkpoint_dir) / "steps.jsonl"
    steps_path.parent.mkdir(parents=True, exist_ok=True)

    def on_step(step: int, metrics: dict) -> None:
        row = {"step": step, **_finite(metrics)}
        if engine.rank == 0:  # metrics are averaged over ranks already: one writer
            with steps_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
        if log_fn is not None:
            log_fn(step, _finite(metrics))
        if progress is not None:
            progress(1)

    trainer = GRPOTrainer(updater, train_items, rollout_fn, g, checkpoint_dir, log_fn=on_step, key_parts=key_parts)
    info = trainer.run(g.steps)
    if val_items:
        gen.sync_weights(model)  # the final probe samples from the trained weights
    final = probe(g.steps) if val_items else {}
    if log_fn is not None and final:
        log_fn(g.steps, final)
    if save_to is not None:
        save_policy(engine.module, processor, save_to)
    return {"curve": read_curve(steps_path, g.steps), "final_probe": final, **info}


def read_curve(path: Path, steps: int) -> list[dict]:
    """Rows of steps.jsonl, one per step < ``steps`` (the last write wins: a step repeated after a crash between
    logging and checkpointing is logged twice)."""
    rows: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                rows[int(r["step"])] = r
    return [rows[k] for k in sorted(rows) if k < steps]
