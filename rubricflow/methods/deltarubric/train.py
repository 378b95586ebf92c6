"""Multi-role GRPO for DeltaRubric on the shared GRPO machinery (no trainer of its own).

``train_policy`` wires DeltaRubric's rollout into ``rubricflow.grpo``: ``GRPOTrainer`` streams training pairs
(``prompts_per_step`` per step), calls ``rollout_fn`` (rubricflow.methods.deltarubric.rollout: N checklists, M guided
verdicts per valid checklist, K no-rubric verdicts; rewards of both roles) and hands the episodes of *both* roles
to one ``GRPOUpdater.update`` call, which normalises advantages per role (decoupled) and takes one optimiser step
on the shared policy (``train.judge: no_rubric | static | reading`` trains that judge mode alone instead: the
paper's trained baselines and the reading judge). The planner probe runs on validation pairs every
``probe_every`` steps (with the torch RNG forked, so probing does not change the training samples) and once after
the last step.

``run_training`` is the ``deltarubric_train`` stage: the warm start and the pairs (``training_inputs``), the resume
key (``resume_parts``), the curve and the summary metrics. ``start_readout`` describes a warm start before any RL
(accuracy per judge mode and the precondition of planner RL: flat planner groups, separating checklists).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from models.loader import load_policy
from models.processor import text_tokenizer
from rubricflow.data.pairs import PreferencePair, read_pairs
from rubricflow.grpo.causal_lm import CausalLMAdapter
from rubricflow.grpo.checkpoint import code_hash, content_hash
from rubricflow.grpo.engine import make_engine
from rubricflow.grpo.export import save_policy
from rubricflow.grpo.trainer import GRPOTrainer
from rubricflow.grpo.updater import GRPOUpdater
from rubricflow.methods.deltarubric.config import (
    PACKAGE_CODE,
    DeltaRubricConfig,
    DRTrainConfig,
    effective_grpo,
    role_max_tokens,
)
from rubricflow.methods.deltarubric.evaluate import evaluate_judge, load_items, planner_probe
from rubricflow.methods.deltarubric.modes import MODES
from rubricflow.methods.deltarubric.rollout import Item, collect, score
from rubricflow.pipeline.progress import progress
from rubricflow.sections import GenerationConfig, ModelsConfig
from rubricflow.training.generation import generator_for
from rubricflow.training.ranks import process_rank
from rubricflow.util.io import iter_jsonl, write_json

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
    quoted: bool = False,
) -> dict:
    """Run ``cfg.grpo.steps`` multi-role GRPO steps in place on ``model`` (resuming from ``checkpoint_dir`` if its
    checkpoints were trained on the same ``key_parts``) and, with ``save_to``, save the trained policy there
    (consolidated, written once by rank 0: ``rubricflow.grpo.export.save_policy``); returns ``{"curve": per-step
    rows, "final_probe", "steps", "resumed_from", "resume_refused", "corrupt_checkpoints", "run_time_s"}``. Under
    several ranks call it on every rank. ``quoted``: the verifier has the lookup tool (``sft.evidence_form:
    quoted``)."""
    g = effective_grpo(cfg)
    engine = make_engine(model, g)
    updater = GRPOUpdater(CausalLMAdapter(model, processor, g.temperature), engine, g)
    tok = text_tokenizer(processor)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    max_tokens = role_max_tokens(cfg)
    if cfg.judge != "deltarubric":  # a single-step judge run has no planner to probe
        val_items = []

    def probe(step: int) -> dict[str, float]:
        with torch.random.fork_rng(devices=[]):
            return planner_probe(gen, processor, val_items, cfg.n_checklists, max_tokens, g.temperature,
                                 seed=g.seed + step, quoted=quoted)

    def rollout_fn(step: int, items: list[Item]):
        gen.sync_weights(model)  # vLLM samples from the current (or resumed) weights; transformers: the same tensors
        metrics: dict[str, float] = {}
        if val_items and (step == 0 or (cfg.probe_every and step % cfg.probe_every == 0)):
            metrics.update(probe(step))
        episodes, m = score(collect(gen, processor, items, cfg, quoted=quoted), cfg, eos)
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
        for _, r in iter_jsonl(path):
            rows[int(r["step"])] = r
    return [rows[k] for k in sorted(rows) if k < steps]


# ----------------------------------------------------------------------------------------------------------------
# From the warm start (the ``deltarubric_train`` stage)


TRAINING_CODE = (*PACKAGE_CODE, "rubricflow.data.pairs", "rubricflow.grpo")


def resume_parts(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, seed: int) -> dict:
    """The resume key's parts: the pairs / sft / train sections (without their operational, output and resumable
    fields: ``Section``), the policy model settings, the generation section, the seed, the contents of the SFT policy
    folder and the pairs folder, and the training code."""
    parts = {k: getattr(dr, k).resume_dump() for k in ("pairs", "sft", "train")}
    parts.update({
        "models.policy": models.policy.model_dump(mode="json"),
        "generation": generation.essential_dump(),
        "seed": seed,
        "init_policy": content_hash(dr.sft.out_dir),
        "data": content_hash(Path(dr.pairs.out_dir)),
        "code": code_hash(*TRAINING_CODE),
    })
    return parts


def probe_subset(val: list[PreferencePair], n: int) -> list[PreferencePair]:
    """``n`` validation pairs for the planner probe, spread over the tasks (every k-th pair)."""
    return val[:: max(1, len(val) // n)][:n]


def training_inputs(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig) -> tuple:
    """``(model, processor, generator, train items, probe items)``: the warm start (``sft.out_dir``), the train
    pairs and ``train.probe_pairs`` validation pairs for the planner probe."""
    d = Path(dr.pairs.out_dir)
    model, proc = load_policy(dr.sft.out_dir, dtype=models.policy.dtype)
    train_items = load_items(d, read_pairs(d, "train"))
    val_items = load_items(d, probe_subset(read_pairs(d, "val"), dr.train.probe_pairs))
    gen = generator_for(generation, model, proc, model_path=dr.sft.out_dir, batch_size=dr.eval.batch_size)
    return model, proc, gen, train_items, val_items


def run_training(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, seed: int,
                 checkpoint_dir: str | Path, reports_dir: Path, run: Any, log_fn: LogFn | None = None) -> dict:
    """Multi-role GRPO from the warm start with a progress bar, per-step metrics to ``run`` and ``log_fn``, and the
    curve in ``reports_dir/plots/deltarubric_train.json``; returns the resume state, the probe accuracy at the
    start and the end, the step-0 precondition (the share of planner groups with zero reward variance and of
    separating checklists) and the last five steps' mean role metrics."""
    model, proc, gen, train_items, val_items = training_inputs(dr, models, generation)

    def log(step: int, m: dict) -> None:
        run.log_metrics(m, step=step)
        if log_fn is not None:
            log_fn(step, m)

    t0 = time.perf_counter()
    with progress("deltarubric train", total=dr.train.grpo.steps) as bar:
        out = train_policy(model, proc, gen, train_items, val_items, dr.train, checkpoint_dir, log_fn=log,
                           progress=bar.advance, key_parts=resume_parts(dr, models, generation, seed),
                           save_to=dr.train.out_dir, quoted=dr.verifier_quotes)
    if process_rank() == 0:
        write_json(Path(reports_dir) / "plots" / "deltarubric_train.json", out["curve"])
    last = out["curve"][-5:]
    first = out["curve"][0] if out["curve"] else {}
    probes = [r["probe/accuracy"] for r in out["curve"] if "probe/accuracy" in r]

    def tail_mean(key: str) -> float | None:
        xs = [r[key] for r in last if key in r]
        return sum(xs) / len(xs) if xs else None

    return {
        "steps": out["steps"],
        "resumed_from": out["resumed_from"],
        "resume_refused": out["resume_refused"],
        "corrupt_checkpoints": out["corrupt_checkpoints"],
        "train_seconds": round(time.perf_counter() - t0, 1),
        "probe_accuracy_start": probes[0] if probes else None,
        "probe_accuracy_end": out["final_probe"].get("probe/accuracy"),
        "planner_format_violation_end": out["final_probe"].get("probe/format_violation"),
        # the precondition at step 0 (rollouts of the warm start): flat planner groups, separating checklists
        "planner_flat_groups_step0": first.get("planner/flat_groups"),
        "planner_separating_step0": first.get("planner/separating"),
        "probe_separating_start": first.get("probe/separating"),
        "probe_separating_end": out["final_probe"].get("probe/separating"),
        "last5": {k: tail_mean(k) for k in ("verifier/accuracy", "no_rubric/accuracy", "planner/reward",
                                              "planner/format_violation", "planner/gain_over_no_rubric",
                                              "planner/flat_groups", "planner/separating")},
    }


# ----------------------------------------------------------------------------------------------------------------
# What a warm start leaves RL to do (the study's start per seed, the warm-start choice on val)


READOUT_REWARDS = ("improvement", "absolute")  # `shift` is flat exactly when `absolute` is (acc0 is per group)


def start_readout(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, policy_dir: str | Path,
                  split: str = "val", seed: int = 0) -> dict[str, float | None]:
    """A warm start on ``split`` before RL: greedy accuracy in every judge mode (``<split>_<mode>``), the share of the
    planner's greedy checklists that separate the responses (``<split>_separating``; executed against the facts:
    ``<split>_deciding``), and the precondition of planner RL on ``train.probe_pairs`` pairs: one rollout sampled as
    training samples it (N checklists, M verdicts each, K no-rubric verdicts; seeded by ``seed``), scored as training
    scores it, gives the share of planner groups with zero reward variance under the relative and the absolute planner
    reward (``flat_groups_<reward>``) and the share of sampled checklists that separate the responses
    (``rollout_separating``)."""
    d = Path(dr.pairs.out_dir)
    model, proc = load_policy(str(policy_dir), dtype=models.policy.dtype)
    gen = generator_for(generation, model, proc, model_path=str(policy_dir), batch_size=dr.eval.batch_size)
    items = load_items(d, read_pairs(d, split, limit=dr.eval.test_pairs or None))
    table = evaluate_judge(gen, proc, items, MODES, role_max_tokens(dr.train), exhaustive=dr.eval.exhaustive,
                           quoted=dr.verifier_quotes)
    out: dict[str, float | None] = {f"{split}_{m}": s["accuracy"] for m, s in table["modes"].items()}
    out[f"{split}_separating"] = table["modes"].get("deltarubric", {}).get("separating")
    out[f"{split}_deciding"] = table["modes"].get("deltarubric", {}).get("deciding")
    cfg = dr.train.model_copy(update={"judge": "deltarubric"})
    probe = load_items(d, probe_subset(read_pairs(d, split), dr.train.probe_pairs))
    eos = text_tokenizer(proc).convert_tokens_to_ids("<|im_end|>")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ro = collect(gen, proc, probe, cfg, seed=seed, quoted=dr.verifier_quotes)
    for reward in READOUT_REWARDS:
        _, m = score(ro, cfg.model_copy(update={"planner_reward": reward}), eos)
        out[f"flat_groups_{reward}"] = m["planner/flat_groups"]
    out["rollout_separating"] = m["planner/separating"]
    return out
