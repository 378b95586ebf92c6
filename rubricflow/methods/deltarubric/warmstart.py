"""SFT warm start for the shared policy on the examples of :mod:`rubricflow.methods.deltarubric.examples`.

``warm_start`` is the ``deltarubric_sft`` stage: the base model (``build_or_load_base``), the examples, the phases:
a fixed schedule (``perception_steps``, then ``steps``) or, with ``bar_reading`` / ``bar_oracle``, the staged phases
trained to the bars on val, restarted from a new init seed when a phase misses at its cap (``warm_start_to_bar``,
``rubricflow.methods.deltarubric.bars``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from models.loader import load_policy
from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save
from rubricflow.data.pairs import PreferencePair, read_pairs
from rubricflow.methods.deltarubric.bars import BarMissed, bar_values, bars_on, staged_phases, train_to_bar, val_measure
from rubricflow.methods.deltarubric.config import DeltaRubricConfig
from rubricflow.methods.deltarubric.evaluate import load_items
from rubricflow.methods.deltarubric.examples import (
    mode_examples,
    pair_tokenizer_corpus,
    perception_samples,
    read_examples,
    sft_examples,
)
from rubricflow.util.io import atomic_path, staged_dir, write_json
from rubricflow.pipeline.progress import progress
from rubricflow.sections import ModelsConfig
from rubricflow.training.sft import SFTExample, TokenWeights, train_sft


def build_or_load_base(models: ModelsConfig, dr: DeltaRubricConfig, train_pairs, seed: int,
                       init_seed: int | None = None):
    """Tiny profile: build a fresh tiny model whose tokenizer is trained on DeltaRubric's prompts and targets (the
    corpus drawn with ``seed``, the weights with ``init_seed``, default ``seed``); pretrained: load
    ``models.policy.path``."""
    spec = models.policy
    if spec.source == "pretrained":
        return load_policy(spec.path, dtype=spec.dtype)
    dims = TinyDims(
        hidden_size=dr.sft.hidden_size or spec.hidden_size, num_layers=dr.sft.num_layers or spec.num_layers,
        num_heads=spec.num_heads,
        num_kv_heads=max(1, spec.num_heads // 2), vision_hidden_size=spec.vision_hidden_size,
        vision_depth=spec.vision_depth, vocab_size=spec.vocab_size, image_size=dr.pairs.image_size,
    )
    build = build_tiny_vl if spec.arch == "qwen2_5_vl" else build_tiny_text
    init = seed if init_seed is None else init_seed
    corpus = pair_tokenizer_corpus(train_pairs, dr.sft, seed)
    model, proc = build(corpus, dims, seed=init)
    induction = None
    if dr.sft.induction_steps and dr.sft.induction_at == "base":
        induction = _induction(dr, model, proc, init, "base", lambda: corpus)
    with staged_dir(dr.sft.base_dir) as tmp:
        save(model, proc, tmp)
        if induction is not None:
            write_json(Path(tmp) / INDUCTION_FILE, induction)
    return model, proc


def _induction(dr: DeltaRubricConfig, model, proc, seed: int, where: str, texts: Callable[[], list[str]]) -> dict:
    """``sft.induction_steps`` of induction pretraining of ``model`` (``rubricflow.training.induction``), printed;
    ``sft.induction_pool: task`` draws its sequences from the most frequent tokens of ``texts()``."""
    from models.processor import text_tokenizer
    from rubricflow.training.induction import InductionTask, pretrain_induction, text_pool

    pool = (text_pool(text_tokenizer(proc), texts(), seed, InductionTask().pool) if dr.sft.induction_pool == "task"
            else None)
    out = pretrain_induction(model, proc, dr.sft.induction_steps, dr.sft.batch_size, dr.sft.lr, seed=seed,
                             clip=dr.sft.grad_clip, pool=pool)
    out["pool"] = dr.sft.induction_pool
    print(f"deltarubric {where}: induction pretraining, {out['steps']} steps: held-out copy accuracy "
          f"{out['copy_acc_before']:.3f} -> {out['copy_acc_after']:.3f} (chance {out['chance']:.3f})", flush=True)
    return out


def _start(dr: DeltaRubricConfig, models: ModelsConfig, train, seed: int, init_seed: int | None = None):
    if dr.sft.init_from:
        return load_policy(dr.sft.init_from, dtype=models.policy.dtype)
    return build_or_load_base(models, dr, train, seed, init_seed)


def _reading_examples(dr: DeltaRubricConfig, proc) -> list[SFTExample]:
    if not dr.sft.perception_images:
        return []
    samples = perception_samples(list(dr.pairs.tasks), dr.sft.perception_images, dr.pairs.seed,
                                 dr.pairs.image_size, dr.pairs.n_keys if dr.pairs.form == "wide" else None)
    return read_examples(proc, samples)


def warm_start(dr: DeltaRubricConfig, models: ModelsConfig, seed: int, reports_dir: Path, run: Any,
               log_fn=None, keep_missed: bool = False, resume_dir: Path | None = None) -> dict:
    """Warm start on the train pairs (and, with ``sft.perception_images``, the reading examples first): saves the
    policy to ``sft.out_dir`` and the loss curve to ``reports_dir/plots/deltarubric_sft_loss.json``; logs every
    10th step to ``run`` and every step to ``log_fn``; returns the example counts and the losses. With a bar
    (``sft.bar_reading`` / ``bar_oracle``) it trains the staged phases to the bars instead (``warm_start_to_bar``;
    ``keep_missed``, ``resume_dir``: see there)."""
    d = Path(dr.pairs.out_dir)
    train = read_pairs(d, "train")
    if not train:
        raise ValueError(f"{d}: no train pairs; set deltarubric.pairs.train > 0")
    if dr.sft.induction_steps and dr.sft.induction_at == "after_reading" and not bars_on(dr.sft):
        raise ValueError("deltarubric.sft.induction_at: 'after_reading' runs between the phases of a warm start to a "
                         "bar; set sft.bar_reading / bar_oracle > 0, or induction_at: base")
    if bars_on(dr.sft):
        return warm_start_to_bar(dr, models, seed, reports_dir, run, train, log_fn, keep_missed, resume_dir)
    model, proc = _start(dr, models, train, seed)
    examples = sft_examples(proc, load_items(d, train), dr.sft, seed=seed)
    n_pair_examples = len(examples)
    reading = _reading_examples(dr, proc)
    phases = [("roles", examples, dr.sft.steps, dr.sft.batch_size)]
    if reading and dr.sft.perception_steps:
        phases.insert(0, ("reading", reading, dr.sft.perception_steps, dr.sft.perception_batch_size))
    else:
        examples += reading
    curve: list[dict] = []
    offset = 0

    def log(step: int, m: dict, phase: str) -> None:
        curve.append({"step": offset + step, "phase": phase, "loss": m["sft/loss"]})
        if log_fn is not None:
            log_fn(offset + step, m)
        if step % 10 == 0:
            run.log_metrics(m, step=offset + step)

    t0 = time.perf_counter()
    losses: list[float] = []
    with progress("deltarubric sft", total=sum(p[2] for p in phases)) as bar:
        for phase, exs, steps, bs in phases:
            losses = train_sft(
                model, proc, exs, dr.sft.model_copy(update={"steps": steps, "batch_size": bs}), seed=seed,
                log_fn=lambda s, m, ph=phase: (log(s, m, ph), bar.advance(1, loss=m["sft/loss"])),
                weight_fn=verdict_weights(proc, dr.sft.verdict_weight),
            )
            offset += steps
    sft_s = time.perf_counter() - t0
    with staged_dir(dr.sft.out_dir) as tmp:
        save(model, proc, tmp)
    write_json(Path(reports_dir) / "plots" / "deltarubric_sft_loss.json", curve)
    tail = losses[-20:]
    return {
        "train_examples": len(examples),
        "pair_examples": n_pair_examples,
        "reading_examples": len(reading),
        "reading_steps": dr.sft.perception_steps if reading else 0,
        "params": sum(p.numel() for p in model.parameters()),
        "first_loss": losses[0] if losses else None,
        "final_loss": sum(tail) / len(tail) if tail else None,
        "sft_seconds": round(sft_s, 1),
    }


_VERDICT_END = re.compile(r"verdict: [AB]\Z")


def verdict_weights(processor, weight: float) -> TokenWeights | None:
    """``sft.verdict_weight``: the per-token loss weights of a judge's target (``train_sft``'s ``weight_fn``):
    ``weight`` on the token(s) writing the final verdict letter of a target that ends ``verdict: A`` or ``verdict:
    B``, 1 elsewhere (the end-of-turn token too); a target without a final verdict (the planner's, the reads) keeps
    every weight 1. None at weight 1 (the plain mean)."""
    if weight == 1.0:
        return None
    from models.processor import text_tokenizer

    tok = text_tokenizer(processor)

    def weights(target: str, ids: list[int]) -> list[float] | None:
        if not _VERDICT_END.search(target):
            return None
        spans = tok(target, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        at = len(target) - 1
        return [weight if a <= at < b else 1.0 for a, b in spans] + [1.0] * (len(ids) - len(spans))

    return weights


INDUCTION_FILE = "induction.json"  # in a base pretrained on the induction task: its copy accuracy before / after
BARS_FILE = "warm_start.json"  # in a checkpoint warm-started to a bar: whether it met its bars, its steps and restarts


def bars_record(policy_dir: str | Path) -> dict | None:
    """The bars record a warm start to a bar saved beside its weights (``BARS_FILE``), or None (a fixed schedule)."""
    try:
        return json.loads((Path(policy_dir) / BARS_FILE).read_text())
    except FileNotFoundError:
        return None


PROGRESS_FILE = "progress.json"  # in a warm start's resume folder: where the training to the bar had got to


def read_progress(resume_dir: str | Path) -> dict | None:
    """The checkpointed progress in ``resume_dir`` (``warm_start_to_bar``), or None where there is none yet. A
    progress file naming weights that are not there is an error naming both (never a silent fresh start)."""
    path = Path(resume_dir) / PROGRESS_FILE
    if not path.exists():
        return None
    try:
        rec = json.loads(path.read_text())
        weights = Path(resume_dir) / rec["weights"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a warm start's progress record ({e}); delete the folder "
                         f"{resume_dir} to train this start from the beginning") from None
    if not weights.is_file():
        raise ValueError(f"{path}: names the weights {weights.name}, which are not in {resume_dir}; delete the "
                         "folder to train this start from the beginning")
    return rec


def _checkpoint(resume_dir: Path, model, progress: dict, state: dict, curve: list, segments: list) -> None:
    """The model's weights and the progress after a block, in ``resume_dir``: the weights under a new name first,
    then the progress naming them (one atomic rename), then the earlier weights removed; an interruption at any
    point leaves a progress file whose weights are there."""
    from safetensors.torch import save_model

    n = sum(len(r["blocks"]) for a in progress["attempts"] for r in a["phases"]) \
        + sum(len(r["blocks"]) for r in progress["phases"]) + len(progress["blocks"])  # blocks trained so far
    name = f"block{n:05d}.safetensors"
    with atomic_path(resume_dir / name) as tmp:  # fsynced, then renamed: never a truncated file under its name
        save_model(model, str(tmp))
    write_json(resume_dir / PROGRESS_FILE, {
        **progress, "weights": name, "segments": segments, "curve": curve,
        "state": {**{k: state[k] for k in ("step", "logged", "losses", "induction")},
                  "seconds": time.perf_counter() - state["t0"]}})
    for old in [*resume_dir.glob("block*.safetensors"), *resume_dir.glob(".block*")]:  # and a killed write's
        if old.name != name:
            old.unlink()


def warm_start_to_bar(dr: DeltaRubricConfig, models: ModelsConfig, seed: int, reports_dir: Path, run: Any,
                      train: list[PreferencePair], log_fn=None, keep_missed: bool = False,
                      resume_dir: Path | None = None) -> dict:
    """The warm start to a bar (``bars``): the staged phases in blocks, measured on val, restarted from a new init
    seed when a phase misses its bar at its cap. Writes every attempt to ``reports_dir/plots/deltarubric_sft_bars.json``
    (also when the last one fails) and the loss curve of the attempt kept (``run`` and ``log_fn`` get every attempt's
    steps, numbered on over the attempts); returns the summary of ``warm_start`` plus
    ``phases`` (the kept attempt's phases: steps, the values after each block, bars, met), ``attempts`` (every
    attempt: init seed, phases, steps, met), ``restarts``, ``init_seed`` and ``met``. The checkpoint folder also holds
    ``BARS_FILE`` (met, steps, restarts, init seed, the values reached). When the last attempt misses, ``BarMissed``
    is raised, unless ``keep_missed`` (a study's per-seed start, which reports a miss instead of losing its seed):
    then the last attempt's model is saved with ``met`` false, and the study's preconditions say what that means.

    ``resume_dir``: a folder kept across interrupted runs (a study's start keeps one per seed, and carries it between
    machines): after each block the model's weights and the progress (``PROGRESS_FILE``) are checkpointed there, and
    a run that finds them goes on after the last block it checkpointed, training and measuring what the uninterrupted
    run would (each block draws its data from its own seed and starts its own optimizer). Each run's machine and
    where it took over are kept as ``segments`` (in ``BARS_FILE``; ``resumes``: how many runs took over)."""
    d = Path(dr.pairs.out_dir)
    val = read_pairs(d, "val", limit=dr.sft.bar_pairs or None)
    if not val:
        raise ValueError(f"{d}: no val pairs to measure the warm start's bars on; set deltarubric.pairs.val > 0")
    val_items, train_items = load_items(d, val), load_items(d, train)
    state: dict[str, Any] = {"logged": 0}  # steps logged over every attempt (MLflow's and log_fn's step)
    curve: list[dict] = []
    resume = read_progress(resume_dir) if resume_dir is not None else None
    segments = list(resume["segments"]) if resume else []
    where = ({"init_seed": resume["init_seed"], "phase": resume["phase"],
              "block": sum(len(r["blocks"]) for r in resume["phases"]) + len(resume["blocks"])} if resume else {})
    if resume_dir is not None:
        from rubricflow.study.report import machine

        segments.append({"machine": machine(), **where})
    # one clock over every run: it starts at the time the earlier runs trained to their last checkpointed block (a
    # block cut off is not counted)
    state["t0"] = time.perf_counter() - (resume["state"].get("seconds", 0.0) if resume else 0.0)
    if resume:  # the checkpointed attempt's counters are restored when it starts (attempt)
        print(f"deltarubric sft: resuming from {resume_dir}: attempt from init seed {where['init_seed']}, phase "
              f"{where['phase']}, after block {where['block']} (run {len(segments)})", flush=True)

    def attempt(init_seed: int):
        model, proc = _start(dr, models, train, seed, init_seed)
        pairs = [(e.role, ex) for e, ex in mode_examples(proc, train_items, dr.sft, seed=seed)]
        reading = _reading_examples(dr, proc)
        phases = staged_phases(reading, pairs, dr.sft)
        state.update(model=model, proc=proc, reading=len(reading), pair_examples=len(pairs), losses=[], step=0,
                     init_seed=init_seed, induction=None)
        curve.clear()
        if resume and resume["init_seed"] == init_seed:  # the checkpointed attempt: its weights and counters
            from safetensors.torch import load_model

            weights = Path(resume_dir) / resume["weights"]  # type: ignore[arg-type]
            try:
                load_model(model, str(weights))
            except Exception as e:  # a damaged file, or weights of another model shape
                raise ValueError(f"{weights}: the checkpointed weights do not load into the start's model ({e}); "
                                 f"delete the folder {resume_dir} to train this start from the beginning") from e
            saved = resume["state"]
            state.update(step=saved["step"], logged=saved["logged"], losses=saved["losses"],
                         induction=saved["induction"])
            curve.extend(resume["curve"])
        print(f"deltarubric sft: attempt from init seed {init_seed}: phases "
              + ", ".join(f"{p.name} ({len(p.examples)} examples, bars {p.bars or 'none'})" for p in phases),
              flush=True)

        def train_block(examples, steps, batch_size, block_seed):
            settings = dr.sft.model_copy(update={"steps": steps, "batch_size": batch_size})
            offset, logged = state["step"], state["logged"]

            def log(s: int, m: dict) -> None:
                curve.append({"step": offset + s, "loss": m["sft/loss"], "init_seed": init_seed})
                if log_fn is not None:
                    log_fn(logged + s, m)
                if (logged + s) % 10 == 0:
                    run.log_metrics(m, step=logged + s)

            state["losses"] = train_sft(model, proc, examples, settings, seed=block_seed, log_fn=log,
                                        weight_fn=verdict_weights(proc, dr.sft.verdict_weight))
            state["step"] += steps
            state["logged"] += steps

        return phases, train_block, val_measure(dr, val_items, model, proc)

    def report(rec: dict) -> None:
        print(f"deltarubric sft: phase {rec['phase']}: {rec['steps']} steps, reached "
              + (", ".join(f"{b} {v:.3f}" for b, v in rec["reached"].items()) or "no bar")
              + f" (bars {rec['bars'] or 'none'}): {'met' if rec['met'] else 'MISSED'}", flush=True)
        if (rec["phase"] == "reading" and rec["met"] and dr.sft.induction_steps
                and dr.sft.induction_at == "after_reading"):
            state["induction"] = _induction(dr, state["model"], state["proc"], state["init_seed"], "sft",
                                            lambda: pair_tokenizer_corpus(train, dr.sft, seed))

    out_json = Path(reports_dir) / "plots" / "deltarubric_sft_bars.json"
    met = True
    try:
        attempts = train_to_bar(attempt, dr.sft, seed, on_phase=report, on_block=lambda ph, b: print(
            f"deltarubric sft: phase {ph}, {b['steps']} steps: "
            + (", ".join(f"{k} {v:.3f}" for k, v in b.items() if k != "steps") or "no bar"), flush=True),
            progress=resume, checkpoint=None if resume_dir is None else lambda prog: _checkpoint(
                Path(resume_dir), state["model"], prog, state, curve, segments))
    except BarMissed as e:
        write_json(out_json, {"met": False, "attempts": e.attempts, "error": str(e)})  # type: ignore[attr-defined]
        if not keep_missed:
            raise
        print(f"deltarubric sft: kept the last attempt, which missed its bar ({e})", flush=True)
        attempts, met = e.attempts, False  # type: ignore[attr-defined]
    sft_s = time.perf_counter() - state["t0"]  # with the earlier runs' time where it was resumed
    model, proc = state["model"], state["proc"]
    kept = attempts[-1]
    reached = {b: v for p in kept["phases"] for b, v in p["reached"].items()}
    record = {"met": met, "steps": kept["steps"], "restarts": len(attempts) - 1, "init_seed": kept["init_seed"],
              "bars": {b: v for b, v in bar_values(dr.sft).items() if v > 0}, "reached": reached}
    if resume_dir is not None:
        record.update(resumes=len(segments) - 1, segments=segments)
    if state.get("induction") is not None:
        record["induction"] = state["induction"]
    with staged_dir(dr.sft.out_dir) as tmp:
        save(model, proc, tmp)
        write_json(Path(tmp) / BARS_FILE, record)
    if met:
        write_json(out_json, {"met": True, "attempts": attempts})
    write_json(Path(reports_dir) / "plots" / "deltarubric_sft_loss.json", curve)
    losses = state["losses"]
    tail = losses[-20:]
    return {
        "train_examples": state["pair_examples"] + state["reading"],
        "pair_examples": state["pair_examples"],
        "reading_examples": state["reading"],
        "reading_steps": sum(p["steps"] for p in kept["phases"] if p["phase"] == "reading"),
        "params": sum(p.numel() for p in model.parameters()),
        "first_loss": curve[0]["loss"] if curve else None,
        "final_loss": sum(tail) / len(tail) if tail else None,
        "sft_seconds": round(sft_s, 1),
        **record,
        "phases": {p["phase"]: {k: v for k, v in p.items() if k != "phase"} for p in kept["phases"]},
        "attempts": attempts,
    }
