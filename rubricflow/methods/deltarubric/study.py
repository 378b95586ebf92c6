"""DeltaRubric's study adapter (:data:`ADAPTER`, ``study.<name>.method: deltarubric``); the studies are in
:mod:`rubricflow.methods.deltarubric.study_specs`.

A unit trains multi-role GRPO (or one single-step judge mode, ``deltarubric.train.judge``) from its seed's warm start
with the variant's overrides and the unit seed, then evaluates the trained policy on the held-out pairs
(``deltarubric.eval.split``) in every judge mode: no-rubric, static rubric, reading judge, DeltaRubric (its own
checklist), oracle (the reference checklist) and the agreed-claims control. An untrained variant evaluates the warm
start as it is: the before-RL table. Shared by every unit: the synthetic pairs (``deltarubric_pairs``). With
``per_seed_start`` (the default study) each seed trains its own warm start (``SEED_START``: the tiny base and the
warm start of ``deltarubric_sft`` under the seed, in ``<out_dir>/_start/seed<k>/``), shared by that seed's variants
so differences stay paired, and reports it (``train.start_readout`` on val: accuracy per judge mode, the separating
share of the planner's checklists, the flat planner groups of a step-0 rollout); without it every unit starts from
the main pipeline's warm start.

Metrics of a unit (``metrics`` of its result): ``accuracy`` / ``format_violation`` of the judge mode the unit was
trained for (``deltarubric`` for DeltaRubric runs and the warm start, ``no_rubric`` / ``static`` / ``reading`` for
the trained single-step judges, ``generative`` for the generative no-rubric judge), so claims compare each method in
its own mode; ``acc_<mode>`` and ``fmt_<mode>`` for every mode (``acc_generative``: the generative control, issue 39
item 3b); the planner probe at the end of training (``probe_end``); ``sep_deltarubric``, the share of the planner's
greedy checklists that separate the responses (before RL for the untrained variant, after for the trained ones), and
``dec_deltarubric``, the share that separate the pair executed against the facts (``planning.decides``: on wide
partial pairs a check on a claim both responses misread separates nothing); ``planner_gain`` = ``acc_deltarubric -
acc_exhaustive``, what the planner adds over the static-exhaustive checklist (every claim key in a fixed order,
``eval.exhaustive``) executed by the same verifier (issue 39, item 3a: a within-unit difference, so it needs no
variant of its own; a claim on it compares variants, e.g. DeltaRubric against its warm start on ``planner_gain``, and
on the wide pairs, ``deltarubric.pairs.form: wide``, it is where the planner has something to choose); the step-0
precondition of the unit's training (``flat_step0``: the trained role's groups with zero reward variance at the first
step, the planner's for DeltaRubric runs, the judge's for a single-step judge; ``flat_mean`` over every step);
``relative_differs``, the mean share of planner groups whose advantages the relative and the absolute reward would
set differently (``rewards.same_direction``); readouts that are not the greedy verdict against the label:
``acc_sampled`` / ``fmt_sampled`` (the own mode, ``train.m_verdicts`` trajectories per pair sampled as the rollouts
sample, ``sampled_readout``), ``reading_exact`` (the share of held-out images whose greedy reading states every claim
with its true value: a drift of the reading every mode shares) and ``dec_generative`` (the share of the unit's greedy
generative tool calls whose keys decide the pair against the facts, beside ``dec_deltarubric``); ``start_met`` /
``start_steps``, whether the warm start met its bars and its steps, where it was trained to a bar (``sft.bar_*``;
None for a fixed schedule); ``start_val_*`` / ``start_flat_*`` (``START_METRICS``), the seed's start as its readout on
val saw it (the same for every variant of the seed; None without a per-seed start). The unit's result also keeps the
probe curve (planner probe accuracy on val pairs over training steps), which :func:`report_probe_curve` averages over
seeds into the report's training-dynamics table and ``<report>-probe.png``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rubricflow.data.pairs import read_pairs, validate_pairs
from rubricflow.methods.deltarubric.config import PACKAGE_CODE, role_max_tokens
from rubricflow.methods.deltarubric.modes import MODES
from rubricflow.methods.deltarubric.stages import log_train_inputs
from rubricflow.pipeline.stage import StageContext
from rubricflow.study.adapter import SeedStart, StudyMethod, Unit
from rubricflow.study.spec import StudySpec
from rubricflow.study.stats import t_interval
from rubricflow.training.generation import generator_for
from rubricflow.util.hashing import content_hash
from rubricflow.util.io import save_figure

# This module is loaded at every CLI start (the registry); the warm start, training and evaluation load torch, so
# the functions import them when they run.


def _unit_overrides(vcfg: Any, name: str, spec: StudySpec, unit: Unit, udir: Path) -> dict[str, Any]:
    return {
        # the trainer draws the pair order, rollouts and minibatches from train.grpo.seed: the unit seed
        "deltarubric.train.grpo.seed": unit.seed,
        "deltarubric.train.out_dir": str(udir / "model"),
        "deltarubric.eval.out_dir": str(udir / "eval"),
        "deltarubric.eval.split": spec.eval_split,
    }


# ----------------------------------------------------------------------------------------------------------------
# a seed that covers the warm start (study.<name>.per_seed_start)

# the train settings the start's readout samples with (the variants' rewards, lambdas and budgets are not among them)
_READOUT_TRAIN = ("n_checklists", "m_verdicts", "k_no_rubric", "planner_max_tokens", "verifier_max_tokens",
                  "probe_pairs")


def start_overrides(vcfg: Any, sdir: Path) -> dict[str, Any]:
    return {"deltarubric.sft.out_dir": str(sdir / "sft"), "deltarubric.sft.base_dir": str(sdir / "base")}


def start_inputs(ucfg: Any, seed: int) -> dict[str, Any]:
    dr = ucfg.deltarubric
    tr = dr.train
    readout = {k: getattr(tr, k) for k in _READOUT_TRAIN}
    readout.update(temperature=tr.grpo.temperature, top_p=tr.grpo.top_p, eval_pairs=dr.eval.test_pairs)
    return {"config": {"pairs": dr.pairs.input_dump(), "sft": dr.sft.input_dump(),
                       "models.policy": ucfg.models.policy.model_dump(mode="json"),
                       "generation": ucfg.generation.essential_dump(), "readout": readout},
            "seed": seed, "pairs_set": content_hash(dr.pairs.out_dir)}


class _NoRun:
    """The warm start logs every 10th step to a run; a seed's start is reported by its summary instead."""

    def log_metrics(self, metrics, step=None):
        pass


def build_start(ucfg: Any, seed: int, build_dir: Path, final_dir: Path, resume_dir: Path) -> dict:
    """The seed's tiny base and warm start (the ``deltarubric_sft`` recipe under the seed), then its readout on val
    (``train.start_readout``); returns the warm start's losses and time and the readout. A warm start to a bar
    checkpoints after each block in ``resume_dir/warm_start`` and goes on from there when the build is run again."""
    from rubricflow.methods.deltarubric.train import start_readout
    from rubricflow.methods.deltarubric.warmstart import warm_start

    dr = ucfg.deltarubric
    sft = dr.sft.model_copy(update={"out_dir": str(build_dir / "sft"), "base_dir": str(build_dir / "base")})
    dr = dr.model_copy(update={"sft": sft})
    ws = warm_start(dr, ucfg.models, seed, build_dir / "reports", _NoRun(), keep_missed=True,
                    resume_dir=resume_dir / "warm_start")
    readout = start_readout(dr, ucfg.models, ucfg.generation, sft.out_dir, split="val", seed=seed)
    bars = {k: ws[k] for k in ("met", "steps", "restarts", "init_seed", "resumes") if k in ws}
    return {"sft_seconds": ws["sft_seconds"], "sft_final_loss": ws["final_loss"],
            **{f"bars_{k}": v for k, v in bars.items()}, **readout}


SEED_START = SeedStart(overrides=start_overrides, inputs=start_inputs, build=build_start,
                       code=(*PACKAGE_CODE, "rubricflow.training.sft", "models.tiny"), resumable=True)


def _shared_outputs(cfg: Any) -> dict[str, Path]:
    dr = cfg.deltarubric
    return {"deltarubric_pairs": Path(dr.pairs.out_dir) / "manifest.json",
            "deltarubric_sft": Path(dr.sft.out_dir) / "config.json"}


def _input_parts(ucfg: Any, unit: Unit) -> dict[str, Any]:
    dr = ucfg.deltarubric
    return {
        "config": {"train": dr.train.model_dump(mode="json"), "eval": dr.eval.model_dump(mode="json"),
                   "pairs": dr.pairs.model_dump(mode="json"),
                   "models.policy": ucfg.models.policy.model_dump(mode="json"),
                   "generation": ucfg.generation.essential_dump(),
                   # the lookup tool changes rollouts and evaluation, not only the start (named only where it is on,
                   # so the keys of units without it are those of the code before it)
                   **({"verifier_quotes": True} if dr.verifier_quotes else {})},
        "seed": unit.seed,
        "init_policy": content_hash(dr.sft.out_dir),
        "pairs_set": content_hash(dr.pairs.out_dir),
    }


def _own_mode(ucfg: Any) -> str:
    return ucfg.deltarubric.train.judge  # deltarubric | no_rubric | static | reading | generative


def run_unit(ucfg: Any, unit: Unit, udir: Path, run: Any, secret_resolver=None) -> dict:
    """Train (unless the variant is untrained: ``deltarubric.train.out_dir`` is then the warm start) and evaluate."""
    from models.loader import load_policy
    from rubricflow.methods.deltarubric.bars import reading_exact
    from rubricflow.methods.deltarubric.evaluate import evaluate_judge, load_items
    from rubricflow.methods.deltarubric.rollout import with_readings
    from rubricflow.methods.deltarubric.train import resume_parts, train_policy, training_inputs
    from rubricflow.methods.deltarubric.warmstart import bars_record

    dr = ucfg.deltarubric
    d = Path(dr.pairs.out_dir)
    validate_pairs(d, balance_tol=dr.pairs.balance_tol)
    untrained = Path(dr.train.out_dir) == Path(dr.sft.out_dir)
    train_out = None
    if not untrained:
        model, proc, gen, train_items, val_items = training_inputs(dr, ucfg.models, ucfg.generation)
        ctx = StageContext.of(ucfg, run, secret_resolver)
        log_train_inputs(run, dr)
        train_out = train_policy(model, proc, gen, train_items, val_items, dr.train, udir / "checkpoints",
                                 log_fn=lambda s, m: ctx.run.log_metrics(m, step=s),
                                 key_parts=resume_parts(dr, ucfg.models, ucfg.generation, unit.seed),
                                 save_to=dr.train.out_dir, quoted=dr.verifier_quotes)
    model, proc = load_policy(dr.train.out_dir, dtype=ucfg.models.policy.dtype)
    gen = generator_for(ucfg.generation, model, proc, model_path=dr.train.out_dir, batch_size=dr.eval.batch_size)
    run.log_input(d, split=dr.eval.split, context="evaluation")
    items = load_items(d, read_pairs(d, dr.eval.split, limit=dr.eval.test_pairs or None))
    tokens = role_max_tokens(dr.train)
    # the policy's greedy reading of each image: the lookup tool quotes it, and its exactness is a readout of its own
    read = with_readings(gen, proc, items, tokens["verifier"])
    if dr.verifier_quotes:
        items = read
    table = evaluate_judge(gen, proc, items, MODES, tokens, exhaustive=dr.eval.exhaustive, quoted=dr.verifier_quotes)
    own = "deltarubric" if untrained else _own_mode(ucfg)
    modes = table["modes"]
    metrics: dict[str, float | None] = {"accuracy": modes[own]["accuracy"],
                                        "format_violation": modes[own]["format_violation"]}
    for m in MODES:
        metrics[f"acc_{m}"] = modes[m]["accuracy"]
        metrics[f"fmt_{m}"] = modes[m]["format_violation"]
    metrics.update(sampled_readout(dr, gen, proc, items, own, unit.seed))
    facts = [it for it in read if it.pair.facts]
    metrics["reading_exact"] = (sum(reading_exact(it.reading, it.pair.facts) for it in facts) / len(facts)
                                if facts else None)
    curve: list[list[float]] = []
    if train_out is not None:
        curve = [[r["step"], r["probe/accuracy"]] for r in train_out["curve"] if "probe/accuracy" in r]
        if train_out["final_probe"]:
            curve.append([dr.train.grpo.steps, train_out["final_probe"]["probe/accuracy"]])
    metrics["probe_end"] = curve[-1][1] if curve else None
    metrics["sep_deltarubric"] = modes["deltarubric"].get("separating")
    metrics["dec_deltarubric"] = modes["deltarubric"].get("deciding")
    metrics["dec_generative"] = modes["generative"].get("deciding")
    # what the planner adds over the static-exhaustive checklist, both executed by this unit's verifier
    metrics["planner_gain"] = modes["deltarubric"]["accuracy"] - modes["exhaustive"]["accuracy"]
    # the warm start's bars (a start trained to a bar records them beside its weights; a fixed schedule has none)
    bars = bars_record(dr.sft.out_dir) or {}
    metrics["start_met"] = None if not bars else float(bars["met"])
    metrics["start_steps"] = bars.get("steps")
    metrics.update(training_readouts(train_out["curve"] if train_out is not None else [], _own_mode(ucfg)))
    metrics.update(start_metrics(dr.sft.out_dir, unit.seed))
    return {"metrics": metrics, "eval_samples": table["n"], "own_mode": own, "probe_curve": curve,
            "by_category": {m: modes[m]["by_category"] for m in MODES},
            "train": None if train_out is None else {k: train_out[k] for k in ("steps", "resumed_from", "run_time_s")
                                                     if k in train_out}}


def training_readouts(rows: Sequence[Mapping], judge: str) -> dict[str, float | None]:
    """From a unit's per-step rows (``steps.jsonl``) trained as ``judge`` (``train.judge``): ``flat_step0``, the share
    of flat groups of the trained role at the first step (the planner's for DeltaRubric, the judge's own for a
    single-step judge), ``flat_mean`` that share over every step, and ``relative_differs``, the mean share of planner
    groups where the relative and the absolute reward would differ (DeltaRubric runs); None where the rows have
    none."""
    key = f"{'planner' if judge == 'deltarubric' else judge}/flat_groups"

    def mean(xs: list[float]) -> float | None:
        return sum(xs) / len(xs) if xs else None

    flats = [r[key] for r in rows if key in r]
    return {"flat_step0": rows[0].get(key) if rows else None, "flat_mean": mean(flats),
            "relative_differs": mean([r["planner/relative_differs"] for r in rows if "planner/relative_differs" in r])}


def sampled_readout(dr: Any, gen, processor, items: list, mode: str, seed: int) -> dict[str, float]:
    """The unit's own judge mode sampled as its rollouts sample: ``train.m_verdicts`` trajectories per held-out pair
    at the rollout temperature and top-p, the first call under the unit seed (``evaluate.Sampling``), in a forked
    random state: ``acc_sampled`` (the share of right verdicts; an unusable one is wrong) and ``fmt_sampled``. What RL
    sharpens shows in the greedy accuracy; what it teaches the whole distribution shows here as well."""
    import torch

    from rubricflow.methods.deltarubric.evaluate import Sampling, judge, summarize

    tr = dr.train
    with torch.random.fork_rng(devices=[]):
        s = summarize(judge(gen, processor, items, mode, role_max_tokens(tr), exhaustive=dr.eval.exhaustive,
                            quoted=dr.verifier_quotes,
                            sampling=Sampling(tr.m_verdicts, tr.grpo.temperature, tr.grpo.top_p, seed)))
    return {"acc_sampled": s["accuracy"], "fmt_sampled": s["format_violation"]}


# The seed's start as its readout on val saw it (``build_start``: ``train.start_readout``), the same for every variant
# of the seed: the room its planner leaves and its controls, which preconditions on val read.
START_METRICS = ("start_val_oracle_gap", "start_val_deciding", "start_val_exhaustive", "start_val_generative",
                 "start_val_reading", "start_flat_improvement", "start_flat_absolute")


def start_metrics(sft_dir: str | Path, seed: int) -> dict[str, float | None]:
    """``START_METRICS`` of ``seed``'s per-seed start whose warm start is ``sft_dir`` (``<start>/sft``,
    ``start_overrides``; every value None without a start of that seed there): the oracle gap (reference checklist
    minus the planner's own, val accuracy), the planner's deciding share, the static-exhaustive / generative / reading
    judges' val accuracy, and the share of flat planner groups of one rollout under the relative and the absolute
    reward."""
    from rubricflow.study.seed_start import read_start

    rec = read_start(Path(sft_dir).parent) or {}
    s = (rec.get("summary") or {}) if rec.get("seed") == seed else {}

    def diff(a: str, b: str) -> float | None:
        return None if s.get(a) is None or s.get(b) is None else s[a] - s[b]

    return {"start_val_oracle_gap": diff("val_oracle", "val_deltarubric"), "start_val_deciding": s.get("val_deciding"),
            "start_val_exhaustive": s.get("val_exhaustive"), "start_val_generative": s.get("val_generative"),
            "start_val_reading": s.get("val_reading"), "start_flat_improvement": s.get("flat_groups_improvement"),
            "start_flat_absolute": s.get("flat_groups_absolute")}


def _untrained_overrides(vcfg: Any, name: str, spec: StudySpec, unit: Unit, udir: Path) -> dict[str, Any]:
    out = _unit_overrides(vcfg, name, spec, unit, udir)
    if unit.variant in spec.untrained:  # evaluate the warm start itself
        out["deltarubric.train.out_dir"] = vcfg.deltarubric.sft.out_dir
    return out


# ----------------------------------------------------------------------------------------------------------------
# The training-dynamics figure: planner probe accuracy over steps, mean and t-interval over seeds per variant


def probe_curves(results: Sequence[Mapping], confidence: float = 0.95) -> dict[str, dict[int, dict]]:
    """``variant -> step -> t_interval`` of the planner probe accuracy over the variant's seeds."""
    by: dict[str, dict[int, list[float]]] = {}
    for r in results:
        for step, acc in r.get("probe_curve") or []:
            if acc is not None and math.isfinite(float(acc)):
                by.setdefault(r["variant"], {}).setdefault(int(step), []).append(float(acc))
    return {v: {s: t_interval(xs, confidence) for s, xs in sorted(steps.items())} for v, steps in by.items()}


def report_probe_curve(name: str, spec: StudySpec, results: Sequence[Mapping], stem_path: Path) -> dict[str, Any]:
    """Markdown lines and ``<stem>-probe.png`` for the planner probe curves (nothing when no unit has a curve)."""
    curves = probe_curves(results, spec.confidence)
    if not curves:
        return {"markdown": [], "files": {}, "json": {}}
    steps = sorted({s for c in curves.values() for s in c})
    pct = round(100 * spec.confidence)
    lines = ["", f"Planner probe accuracy over training (val pairs; mean ± {pct}% t-interval over seeds): the fraction "
             "of sampled checklists whose greedy verifier verdict is right.", "",
             "| variant | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for v, c in curves.items():
        cells = []
        for s in steps:
            x = c.get(s)
            cells.append("n/a" if x is None or x["mean"] is None else
                         (f"{x['mean']:.3f}" if x["half_width"] is None
                          else f"{x['mean']:.3f} ± {x['half_width']:.3f}"))
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    png = stem_path.with_name(f"{stem_path.name}-probe.png")
    _plot_probe(name, curves, png, pct)
    return {"markdown": lines, "files": {"probe_png": png},
            "json": {v: {str(s): x for s, x in c.items()} for v, c in curves.items()}}


def _plot_probe(name: str, curves: Mapping[str, Mapping[int, Mapping]], path: Path, pct: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for v, c in curves.items():
        xs = list(c)
        ys = [c[s]["mean"] for s in xs]
        lo = [c[s]["ci_low"] if c[s]["ci_low"] is not None else c[s]["mean"] for s in xs]
        hi = [c[s]["ci_high"] if c[s]["ci_high"] is not None else c[s]["mean"] for s in xs]
        ax.plot(xs, ys, marker="o", label=v)
        ax.fill_between(xs, lo, hi, alpha=0.15)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("planner probe accuracy (val)")
    ax.set_title(f"study {name}: planner probe, mean and {pct}% t-interval over seeds", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, path, dpi=110)


ADAPTER = StudyMethod(
    name="deltarubric",
    run_unit=run_unit,
    unit_overrides=_untrained_overrides,
    reserved_keys=("deltarubric.train.grpo.seed", "deltarubric.train.out_dir", "deltarubric.eval.out_dir",
                   "deltarubric.eval.split"),
    shared_outputs=_shared_outputs,
    input_parts=_input_parts,
    code=(*PACKAGE_CODE, "rubricflow.grpo"),
    sections=("deltarubric",),
    shared_hint="run the main pipeline first (`dvc repro deltarubric_sft` or `make run`): the pairs (and, unless the "
    "study builds a warm start per seed, the warm start) are shared by every unit",
    report_extras=report_probe_curve,
    seed_start=SEED_START,
)

