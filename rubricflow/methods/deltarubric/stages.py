"""DeltaRubric pipeline stages: pairs -> sft -> train -> eval.

Each is a ``@stage`` (``rubricflow.stage``: MLflow child run, ``reports/<name>.json``) taking the ``deltarubric``
section (and the shared ones it reads), run by the CLI (``rubricflow deltarubric-<stage>``), dvc.yaml and the
Prefect flow. Outputs:

* ``deltarubric_pairs``  ``deltarubric.pairs.out_dir`` (parquet + images), gated by ``validate_pairs``;
* ``deltarubric_sft``    the tiny base model (``sft.base_dir``, tokenizer trained on DeltaRubric's texts) and the
                         warm-started policy (``sft.out_dir``); the loss curve (``reports/plots/deltarubric_sft_loss.json``);
* ``deltarubric_train``  the multi-role GRPO policy (``train.out_dir``) and its curves
                         (``reports/plots/deltarubric_train.json``: per-step role metrics and the planner probe);
* ``deltarubric_eval``   the judge tables (no-rubric / static / DeltaRubric / oracle) of the SFT and trained policies
                         on the held-out synthetic pairs and every benchmark in ``eval.benchmarks``
                         (``eval.out_dir/eval.json``).
"""

from __future__ import annotations

import time
from pathlib import Path

from rubricflow.methods.deltarubric.config import DeltaRubricConfig
from rubricflow.io import staged_dir, write_json
from rubricflow.ranks import process_rank
from rubricflow.generation import GENERATION_OPERATIONAL
from rubricflow.sections import GenerationConfig, ModelsConfig
from rubricflow.stage import StageContext, stage


def _max_tokens(dr: DeltaRubricConfig) -> dict[str, int]:
    return {"planner": dr.train.planner_max_tokens, "verifier": dr.train.verifier_max_tokens}


def _generator(g: GenerationConfig, model, proc, model_path: str | None = None, batch_size: int | None = None):
    from rubricflow.generation import make_generator

    return make_generator(g, model, proc, model_path=model_path, batch_size=batch_size)


def _pairs_dir(dr: DeltaRubricConfig) -> Path:
    return Path(dr.pairs.out_dir)


def _gate(dr: DeltaRubricConfig) -> None:
    """Fail before any training if the pairs are missing or fail the data gate."""
    from rubricflow.data.pairs import validate_pairs

    validate_pairs(_pairs_dir(dr), balance_tol=dr.pairs.balance_tol)


# ================================================================================================================


@stage("deltarubric_pairs", reads_test=True)
def pairs_stage(deltarubric: DeltaRubricConfig, ctx: StageContext) -> dict:
    """Generate the synthetic preference pairs and run the data gate before publishing them."""
    from rubricflow.data.pairs import validate_pairs
    from rubricflow.methods.deltarubric.synthetic import build_pairs

    p = deltarubric.pairs
    sizes = {"train": p.train, "val": p.val, "test": p.test}
    with staged_dir(p.out_dir) as tmp:
        pairs = build_pairs(tmp, list(p.tasks), sizes, p.seed, p.image_size, p.partial_frac)
        stats = validate_pairs(tmp, balance_tol=p.balance_tol)
    cats: dict[str, int] = {}
    for x in pairs:
        cats[x.category] = cats.get(x.category, 0) + 1
    return {
        "n_pairs": len(pairs),
        "splits": {s: sum(x.split == s for x in pairs) for s in sizes},
        "frac_a": stats["frac_a"],
        "partial_frac": sum(x.meta.get("kind") == "partial" for x in pairs) / max(len(pairs), 1),
        "categories": cats,
    }


# ================================================================================================================


def build_or_load_base(models: ModelsConfig, dr: DeltaRubricConfig, train_pairs, seed: int):
    """Tiny profile: build a fresh tiny model whose tokenizer is trained on DeltaRubric's prompts and targets;
    pretrained: load ``models.policy.path``."""
    from models.loader import load_policy
    from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save
    from rubricflow.methods.deltarubric.warmstart import pair_tokenizer_corpus

    spec = models.policy
    if spec.source == "pretrained":
        return load_policy(spec.path, dtype=spec.dtype)
    dims = TinyDims(
        hidden_size=dr.sft.hidden_size or spec.hidden_size, num_layers=spec.num_layers, num_heads=spec.num_heads,
        num_kv_heads=max(1, spec.num_heads // 2), vision_hidden_size=spec.vision_hidden_size,
        vision_depth=spec.vision_depth, vocab_size=spec.vocab_size, image_size=dr.pairs.image_size,
    )
    build = build_tiny_vl if spec.arch == "qwen2_5_vl" else build_tiny_text
    model, proc = build(pair_tokenizer_corpus(train_pairs, dr.sft, seed), dims, seed=seed)
    with staged_dir(dr.sft.base_dir) as tmp:
        save(model, proc, tmp)
    return model, proc


@stage("deltarubric_sft", retries=1)
def sft_stage(deltarubric: DeltaRubricConfig, models: ModelsConfig, ctx: StageContext, log_fn=None) -> dict:
    """Warm start on templated plans / verdicts from facts (the judge table after SFT is part of the eval stage)."""
    from models.tiny import save
    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.deltarubric.evaluate import load_items
    from rubricflow.methods.deltarubric.warmstart import perception_samples, read_examples, sft_examples
    from rubricflow.progress import progress
    from rubricflow.sft import train_sft

    dr = deltarubric
    _gate(dr)
    d = _pairs_dir(dr)
    train = read_pairs(d, "train")
    if not train:
        raise ValueError(f"{d}: no train pairs; set deltarubric.pairs.train > 0")
    if dr.sft.init_from:
        from models.loader import load_policy

        model, proc = load_policy(dr.sft.init_from, dtype=models.policy.dtype)
    else:
        model, proc = build_or_load_base(models, dr, train, ctx.seed)
    examples = sft_examples(proc, load_items(d, train), dr.sft, seed=ctx.seed)
    n_pair_examples = len(examples)
    reading: list = []
    if dr.sft.perception_images:
        samples = perception_samples(list(dr.pairs.tasks), dr.sft.perception_images, dr.pairs.seed,
                                     dr.pairs.image_size)
        reading = read_examples(proc, samples)
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
            ctx.run.log_metrics(m, step=offset + step)

    t0 = time.perf_counter()
    losses: list[float] = []
    with progress("deltarubric sft", total=sum(p[2] for p in phases)) as bar:
        for phase, exs, steps, bs in phases:
            losses = train_sft(
                model, proc, exs, steps=steps, batch_size=bs, lr=dr.sft.lr, warmup_steps=dr.sft.warmup_steps,
                seed=ctx.seed, schedule=dr.sft.schedule,
                log_fn=lambda s, m, ph=phase: (log(s, m, ph), bar.advance(1, loss=m["sft/loss"])),
            )
            offset += steps
    sft_s = time.perf_counter() - t0
    with staged_dir(dr.sft.out_dir) as tmp:
        save(model, proc, tmp)
    write_json(ctx.reports_dir / "plots" / "deltarubric_sft_loss.json", curve)
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


# ================================================================================================================


TRAINING_CODE = ("rubricflow.methods.deltarubric", "rubricflow.grpo")


def _checkpoint_dir(ctx: StageContext) -> Path:
    """One checkpoint root per seed; what it was trained on is checked by :func:`resume_parts` (``key.json``)."""
    return ctx.artifacts_dir / "deltarubric" / "checkpoints" / f"train-seed{ctx.seed}"


def resume_parts(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, seed: int) -> dict:
    """The resume key's parts: the pairs / sft / train sections, the policy model settings, the generation section,
    the seed, the contents of the SFT policy folder and the pairs folder, and the training code."""
    from rubricflow.grpo.checkpoint import code_hash, content_hash

    parts = {k: getattr(dr, k).model_dump(mode="json") for k in ("pairs", "sft", "train")}
    parts.update({
        "models.policy": models.policy.model_dump(mode="json"),
        "generation": generation.model_dump(mode="json", exclude=GENERATION_OPERATIONAL),
        "seed": seed,
        "init_policy": content_hash(dr.sft.out_dir),
        "data": content_hash(_pairs_dir(dr)),
        "code": code_hash(*TRAINING_CODE),
    })
    return parts


@stage("deltarubric_train", retries=3, resumable=True)
def train_stage(
    deltarubric: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, ctx: StageContext, log_fn=None
) -> dict:
    """Multi-role GRPO from the SFT checkpoint; saves the policy and the per-step role metrics."""
    from models.loader import load_policy
    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.deltarubric.evaluate import load_items
    from rubricflow.methods.deltarubric.train import train_policy
    from rubricflow.progress import progress

    dr = deltarubric
    _gate(dr)
    d = _pairs_dir(dr)
    model, proc = load_policy(dr.sft.out_dir, dtype=models.policy.dtype)
    train_items = load_items(d, read_pairs(d, "train"))
    val = read_pairs(d, "val")
    val = val[:: max(1, len(val) // dr.train.probe_pairs)][: dr.train.probe_pairs]  # spread over the tasks
    val_items = load_items(d, val)
    gen = _generator(generation, model, proc, model_path=dr.sft.out_dir, batch_size=dr.eval.batch_size)

    def log(step: int, m: dict) -> None:
        ctx.run.log_metrics(m, step=step)
        if log_fn is not None:
            log_fn(step, m)

    t0 = time.perf_counter()
    with progress("deltarubric train", total=dr.train.grpo.steps) as bar:
        out = train_policy(model, proc, gen, train_items, val_items, dr.train, _checkpoint_dir(ctx),
                           log_fn=log, progress=bar.advance,
                           key_parts=resume_parts(dr, models, generation, ctx.seed), save_to=dr.train.out_dir)
    if process_rank() == 0:
        write_json(ctx.reports_dir / "plots" / "deltarubric_train.json", out["curve"])
    last = out["curve"][-5:]
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
        "last5": {k: tail_mean(k) for k in ("verifier/accuracy", "no_rubric/accuracy", "planner/reward",
                                              "planner/format_violation", "planner/gain_over_no_rubric")},
    }


# ================================================================================================================


def judge_tables(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig,
                 model_dirs: dict[str, str], pair_sets: dict[str, tuple[str, str | None, int]],
                 modes: tuple[str, ...], examples: int = 0) -> dict[str, dict]:
    """``{"<model>/<set>": evaluate_judge(...)}`` for every model directory and pair set
    (``name -> (dir, split or None, limit)``); every benchmark directory passes the data gate first."""
    from models.loader import load_policy
    from rubricflow.data.pairs import read_pairs, validate_pairs
    from rubricflow.methods.deltarubric.evaluate import evaluate_judge, load_items

    sets = {}
    for name, (d, split, limit) in pair_sets.items():
        validate_pairs(d, balance_tol=None)  # benchmarks need not be A/B balanced; everything else must hold
        sets[name] = load_items(d, read_pairs(d, split, limit=limit or None))
    out: dict[str, dict] = {}
    for mname, mdir in model_dirs.items():
        model, proc = load_policy(mdir, dtype=models.policy.dtype)
        gen = _generator(generation, model, proc, model_path=mdir, batch_size=dr.eval.batch_size)
        for sname, items in sets.items():
            out[f"{mname}/{sname}"] = evaluate_judge(gen, proc, items, modes, _max_tokens(dr), examples=examples)
    return out


@stage("deltarubric_eval", retries=2, judge=True, reads_test=True)
def eval_stage(
    deltarubric: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """Judge accuracy in every mode (no-rubric / static / DeltaRubric / oracle / the agreed-claims control) of the
    SFT and the trained policy on the held-out synthetic pairs and every configured benchmark; writes the tables and
    prints them."""
    from rubricflow.methods.deltarubric.evaluate import MODES, format_table

    dr = deltarubric
    _gate(dr)
    sets = {"synthetic-test": (str(_pairs_dir(dr)), "test", dr.eval.test_pairs)}
    for b in dr.eval.benchmarks:
        if not Path(b).is_dir():
            raise FileNotFoundError(f"deltarubric.eval.benchmarks: {b} is not a directory (ingest it first)")
        sets[Path(b).name] = (b, None, dr.eval.benchmark_limit)
    policies = {"sft": dr.sft.out_dir, "grpo": dr.train.out_dir}
    tables = judge_tables(dr, models, generation, policies, sets, MODES, examples=3)
    write_json(Path(dr.eval.out_dir) / "eval.json", tables)
    text = format_table(tables)
    (Path(dr.eval.out_dir) / "eval.txt").write_text(text + "\n")
    print(text)
    metrics: dict = {}
    for name, t in tables.items():
        for mode, s in t["modes"].items():
            metrics.setdefault(name, {})[mode] = s["accuracy"]
            metrics.setdefault(name, {})[f"{mode}_format_violation"] = s["format_violation"]
    return metrics
