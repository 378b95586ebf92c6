"""Multi-seed studies: every variant trained once per seed, aggregated into means, 95% t-intervals and verdicts.

A *unit* is one (variant, seed). For RuCL (:func:`run_rucl_unit`) a unit trains with
:func:`rubricflow.methods.rucl.train.train_rucl` on the variant's overrides with ``seed`` set to the unit seed, then scores
greedy test-split responses of the trained checkpoint with the final evaluation
(:func:`rubricflow.methods.rucl.evaluate.evaluate_policies`); an *untrained* variant (``sft``) only evaluates its start
checkpoint. Everything a unit writes is under ``<out_dir>/<variant>/seed<k>/`` (policy ``model/``, training
reports ``train/``, ``result.json``) and its training checkpoints under
``<rucl.checkpoint_dir>/../studies/<study>/<variant>/seed<k>/``, so units never collide.

The shared stages are *not* re-run per seed: the dataset, its validation stamp, the SFT checkpoint and the rubric
tiers come from the main pipeline's outputs (``dvc repro rucl_eval`` / ``make run``), and every unit starts from the
same SFT model. :func:`require_shared` refuses to start, naming each missing output.

``result.json`` is written atomically when a unit finishes, with the hashes of what the unit was trained and
evaluated on (:func:`unit_inputs`: its config sections and seed, the contents of the SFT start, the tiers and the
data set, and the training and evaluation code). A rerun skips a finished unit only when those are unchanged; a unit
finished on other inputs (say the SFT model was retrained) is re-run, naming what changed, and its old result is
kept as ``result.stale.json``. An interrupted unit is picked up from its latest training checkpoint. :func:`aggregate` reports per variant and metric the mean and
a t-interval over seeds, and per claim the paired per-seed difference ``a - b`` with its interval and a verdict:
``shown`` (the interval excludes 0 in the claimed direction), ``reversed`` (excludes 0 the other way) or
``not shown``. :func:`write_report` writes ``<report_dir>/<study>.md``, ``.json`` and ``.png``.

Methods plug in through :class:`StudyMethod` (``study.<name>.method`` picks one from :data:`METHODS`): how a unit's
config is made from the variant and seed, what it reuses from the main pipeline, what its result depends on, and the
unit function that trains and evaluates it. The harness (planning, keyed reuse, the test-split guard of selection
studies, tracking, intervals, verdicts, reports) is the same for every method. RuCL's adapter is :data:`RUCL`.

Entry points: ``rubricflow study <name>`` (flows/cli_study.py), the Prefect flow ``study`` (flows/study.py, one task
per unit) and ``dvc repro studies/dvc.yaml``.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricflow.io import atomic_path, atomic_write_text, write_json
from rubricflow.sections import ConfigError
from rubricflow.stage import NullRun, StageContext, apply_overrides
from rubricflow.study_config import Claim, Selection, StudySpec

RESULT_FILE = "result.json"
STALE_FILE = "result.stale.json"


class SharedOutputsMissing(FileNotFoundError):
    """The main pipeline's outputs a study reuses are missing."""


@dataclass(frozen=True)
class Unit:
    variant: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.variant}/seed{self.seed}"


# A unit function: (unit config, unit, unit dir, tracking run, secret resolver) -> {"metrics": {...}, ...}
UnitFn = Callable[[Any, Unit, Path, Any, Callable[[str], str] | None], dict]


@dataclass(frozen=True)
class StudyMethod:
    """What the harness needs from a method to study it.

    * ``unit_overrides(vcfg, name, spec, unit, udir)``: the dotted keys the study sets per unit (the method's own
      seeds, output and checkpoint folders under ``udir``, the evaluation split ``spec.eval_split``), given the
      config with the variant's overrides applied; the top-level ``seed`` is set by the harness;
    * ``reserved_keys``: those keys, which no variant may override;
    * ``shared_outputs(ucfg)``: what every unit reuses from the main pipeline (stage -> file that proves it ran);
    * ``input_parts(ucfg, unit)``: what a unit's result depends on, one entry per part (hashed into ``inputs``),
      beside the method's ``code`` (dotted modules or packages);
    * ``run_unit``: trains the unit (unless its variant is in ``spec.untrained``) and evaluates it on the unit
      config's split, returning ``{"metrics": {...}, "eval_samples": n, ...}``;
    * ``sections``: the config sections logged with each unit's MLflow run; ``shared_hint``: how to make the shared
      outputs;
    * ``report_extras(name, spec, results, stem_path)`` (optional): more of the report from the units' results
      (e.g. a training-dynamics curve over seeds): ``{"markdown": [lines], "files": {key: path}, "json": {...}}``,
      appended to ``<stem>.md``, listed among the report's files and stored under ``extras`` in ``<stem>.json``.
    """

    name: str
    run_unit: UnitFn
    unit_overrides: Callable[[Any, str, StudySpec, Unit, Path], dict[str, Any]]
    reserved_keys: tuple[str, ...]
    shared_outputs: Callable[[Any], dict[str, Path]]
    input_parts: Callable[[Any, Unit], dict[str, Any]]
    code: tuple[str, ...]
    sections: tuple[str, ...]
    shared_hint: str
    report_extras: Callable[[str, StudySpec, Sequence[Mapping], Path], dict] | None = None


# study.<name>.method -> "module:attribute" of its StudyMethod (imported when a study of it runs)
METHODS: dict[str, str] = {"rucl": "rubricflow.study:RUCL", "deltarubric": "rubricflow.methods.deltarubric.study:METHOD",
                           "roro": "rubricflow.methods.roro.study:METHOD"}


def study_method(spec: StudySpec) -> StudyMethod:
    import importlib

    ref = METHODS.get(spec.method)
    if ref is None:
        raise ConfigError(f"study method {spec.method!r} has no adapter; known: {sorted(METHODS)}")
    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)


# ------------------------------------------------------------------------------------------------------------
# planning


def study_spec(cfg: Any, name: str) -> StudySpec:
    spec = getattr(cfg.study, name, None)
    if not isinstance(spec, StudySpec):
        known = sorted(type(cfg.study).model_fields)
        raise ConfigError(f"unknown study {name!r}; studies in the `study` section: {known}")
    if spec.profile is not None and str(getattr(cfg.profile, "value", cfg.profile)) != spec.profile:
        raise ConfigError(f"study {name} belongs to profile {spec.profile!r} (study.{name}.profile); run it with "
                          f"`rubricflow --profile {spec.profile} study {name}` (the profile now is "
                          f"{str(getattr(cfg.profile, 'value', cfg.profile))!r})")
    return spec


def plan(spec: StudySpec, seeds: Sequence[int] | None = None, variants: Sequence[str] | None = None) -> list[Unit]:
    """The units to run: ``variants`` x ``seeds`` (default: the section's), variant-major."""
    seeds = list(seeds) if seeds else list(spec.seeds)
    variants = list(variants) if variants else list(spec.variants)
    unknown = [v for v in variants if v not in spec.variants]
    if unknown:
        raise ConfigError(f"study variants {unknown} are not defined; known: {sorted(spec.variants)}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds {seeds} repeat a seed")
    return [Unit(v, s) for v in variants for s in seeds]


def unit_dir(spec: StudySpec, unit: Unit) -> Path:
    return Path(spec.out_dir) / unit.variant / f"seed{unit.seed}"


def unit_config(cfg: Any, name: str, spec: StudySpec, unit: Unit) -> Any:
    """``cfg`` with the variant's overrides, then the unit seed and what the method sets per unit (its own seeds,
    output and checkpoint directories, the evaluation split)."""
    method = study_method(spec)
    overrides = dict(spec.variants[unit.variant])
    clash = sorted(k for k in overrides if k in ("seed", *method.reserved_keys))
    if clash:
        raise ConfigError(f"study.{name}.variants.{unit.variant}: {clash} are set by the study per unit")
    vcfg = apply_overrides(cfg, overrides)
    return apply_overrides(vcfg, {"seed": unit.seed,
                                  **method.unit_overrides(vcfg, name, spec, unit, unit_dir(spec, unit))})


def require_shared(cfg: Any, name: str, spec: StudySpec, units: Iterable[Unit]) -> None:
    """Refuse (naming each missing path) unless the main pipeline's shared outputs exist for every unit."""
    method = study_method(spec)
    missing: dict[str, str] = {}
    for u in units:
        for stage, path in method.shared_outputs(unit_config(cfg, name, spec, u)).items():
            if not path.exists():
                missing.setdefault(str(path), stage)
    if missing:
        lines = "\n".join(f"  - {p} (stage `{s}`)" for p, s in missing.items())
        raise SharedOutputsMissing(
            f"study {name}: the main pipeline's shared outputs are missing (they are shared by every unit, not made "
            f"per seed):\n{lines}\n{method.shared_hint}"
        )


# ------------------------------------------------------------------------------------------------------------
# units


def unit_inputs(ucfg: Any, unit: Unit, method: StudyMethod | None = None) -> dict[str, str]:
    """One hash per input a unit's result depends on: the method's parts (:attr:`StudyMethod.input_parts`: config
    sections, seed, the contents of what it reuses) and its ``code``."""
    from rubricflow.grpo.checkpoint import code_hash, part_hashes

    method = method or RUCL
    return part_hashes({**method.input_parts(ucfg, unit), "code": code_hash(*method.code)})


def read_result(spec: StudySpec, unit: Unit, inputs: Mapping[str, str] | None = None) -> dict | None:
    """The unit's finished result, or None. With ``inputs`` (:func:`unit_inputs`), a result recorded for other
    inputs is stale: it is moved to ``result.stale.json`` (naming the parts that changed) and None is returned."""
    import json

    p = unit_dir(spec, unit) / RESULT_FILE
    if not p.exists():
        return None
    result = json.loads(p.read_text())
    if inputs is None:
        return result
    old = result.get("inputs") or {}
    changed = sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))
    if not changed:
        return result
    what = ", ".join(changed) if old else "no input hashes recorded"
    print(f"study: {unit.key} finished on other inputs ({what} changed); re-running it "
          f"(the old result is kept as {p.with_name(STALE_FILE)})", flush=True)
    os.replace(p, p.with_name(STALE_FILE))
    return None


def run_unit(
    cfg: Any,
    name: str,
    spec: StudySpec,
    unit: Unit,
    unit_fn: UnitFn | None = None,
    track: bool = False,
    secret_resolver=None,
    prefect_flow_run_id: str | None = None,
) -> dict:
    """Run ``unit`` with ``unit_fn`` (default: the method's) unless it finished on the same inputs
    (:func:`read_result`); returns the result (``skipped`` true when it did not run)."""
    from rubricflow.splits import forbid_test_split

    method = study_method(spec)
    unit_fn = unit_fn or method.run_unit
    ucfg = unit_config(cfg, name, spec, unit)
    inputs = unit_inputs(ucfg, unit, method)
    done = read_result(spec, unit, inputs)
    if done is not None:
        return {**done, "skipped": True}
    udir = unit_dir(spec, unit)
    udir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # a selection study chooses: it runs under the test-split guard, so not one test row is read
    guard = forbid_test_split(f"study {name}") if spec.eval_split == "val" else contextlib.nullcontext()
    with guard:
        out, run_id = _run_unit_fn(cfg, name, spec, unit, ucfg, udir, unit_fn, track, secret_resolver,
                                   prefect_flow_run_id, method)
    result = {"study": name, "variant": unit.variant, "seed": unit.seed,
              "overrides": dict(spec.variants[unit.variant]), "eval_split": spec.eval_split, "inputs": inputs, **out,
              "duration_s": round(time.perf_counter() - t0, 2), "mlflow_run_id": run_id}
    write_json(udir / RESULT_FILE, _json_safe(result))
    return {**result, "skipped": False}


def _run_unit_fn(cfg, name, spec, unit, ucfg, udir, unit_fn, track, secret_resolver, prefect_flow_run_id, method):
    """The unit function inside its MLflow child run (``track``); returns (its output, the run id or None)."""
    if track:
        from rubricflow.stage import flat_metrics
        from rubricflow.tracking import stage_run

        params = {"study": name, "variant": unit.variant, "seed": unit.seed,
                  "overrides": dict(spec.variants[unit.variant]),
                  **{sec: getattr(ucfg, sec).model_dump(mode="json") for sec in method.sections}}
        with stage_run(f"study_{name}/{unit.key}", experiment=cfg.tracking.experiment, params=params,
                       tags={"study": name, "variant": unit.variant, "seed": unit.seed, "profile": cfg.profile},
                       tracking_uri=cfg.tracking.tracking_uri, prefect_flow_run_id=prefect_flow_run_id) as run:
            out = unit_fn(ucfg, unit, udir, run, secret_resolver)
            run.log_metrics(flat_metrics({spec.eval_split: out["metrics"]}))
            return out, run.run_id
    return unit_fn(ucfg, unit, udir, NullRun(), secret_resolver), None


# ------------------------------------------------------------------------------------------------------------
# aggregation


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean and the two-sided Student-t interval ``mean +- t_{(1+c)/2, n-1} * sd / sqrt(n)`` (sd with n-1).
    With one value the interval is undefined (None)."""
    from scipy import stats

    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "half_width": None, "ci_low": None, "ci_high": None}
    mean = sum(xs) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "ci_low": None, "ci_high": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "ci_low": mean - half, "ci_high": mean + half}


def verdict(ci_low: float | None, ci_high: float | None, direction: str) -> str:
    """'shown' when the interval excludes 0 in the claimed direction, 'reversed' the other way, else 'not shown'."""
    if ci_low is None or ci_high is None:
        return "not shown"
    above, below = ci_low > 0, ci_high < 0
    if direction == "higher":
        return "shown" if above else "reversed" if below else "not shown"
    if direction == "lower":
        return "shown" if below else "reversed" if above else "not shown"
    raise ValueError(f"claim direction {direction!r}: expected 'higher' or 'lower'")


def _value(result: Mapping, metric: str) -> float | None:
    v = (result.get("metrics") or {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


MIN_SEEDS_FOR_CLAIM = 5  # CONTRIBUTING.md: a claim about an effect needs at least 5 seeds


def aggregate(
    results: Iterable[Mapping], claims: Iterable[Claim | Mapping], metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Per variant and metric the mean and t-interval over seeds; per claim the paired per-seed difference
    ``a - b`` (seeds where both have the metric) with its t-interval and :func:`verdict`.

    ``results``: ``{"variant", "seed", "metrics": {metric: value}}`` (a missing or None metric is left out)."""
    results = list(results)
    if metrics is None:
        metrics = sorted({m for r in results for m in (r.get("metrics") or {})})
    by_variant: dict[str, dict[int, Mapping]] = {}
    for r in results:
        seeds = by_variant.setdefault(r["variant"], {})
        if r["seed"] in seeds:
            raise ValueError(f"two results for variant {r['variant']!r} seed {r['seed']}")
        seeds[r["seed"]] = r
    variants = {}
    for v, seeds in by_variant.items():
        row: dict[str, Any] = {"seeds": sorted(seeds)}
        for m in metrics:
            vals = {s: _value(r, m) for s, r in sorted(seeds.items())}
            vals = {s: x for s, x in vals.items() if x is not None}
            row[m] = {**t_interval(list(vals.values()), confidence), "values": vals}
        variants[v] = row
    out_claims = []
    for c in claims:
        c = c if isinstance(c, Claim) else Claim.model_validate(dict(c))
        a, b = by_variant.get(c.a, {}), by_variant.get(c.b, {})
        diffs = {}
        for s in sorted(set(a) & set(b)):
            xa, xb = _value(a[s], c.metric), _value(b[s], c.metric)
            if xa is not None and xb is not None:
                diffs[s] = xa - xb
        ci = t_interval(list(diffs.values()), confidence)
        note = ""
        if ci["n"] < 2:
            note = "fewer than 2 paired seeds: no interval"
        elif ci["n"] < MIN_SEEDS_FOR_CLAIM:
            note = f"only {ci['n']} paired seeds (a claim needs {MIN_SEEDS_FOR_CLAIM})"
        out_claims.append({
            **c.model_dump(), "n_pairs": ci["n"], "diff_mean": ci["mean"], "ci_low": ci["ci_low"],
            "ci_high": ci["ci_high"], "half_width": ci["half_width"], "diffs": diffs,
            "verdict": verdict(ci["ci_low"], ci["ci_high"], c.direction), "note": note,
        })
    return {"confidence": confidence, "metrics": list(metrics), "variants": variants, "claims": out_claims}


def select(agg: Mapping[str, Any], selection: Selection | Mapping | None) -> dict[str, Any] | None:
    """The setting a selection study chooses: per setting, the mean over its variants of their mean ``metric``
    over seeds; the best score wins (``direction``; ties: the first setting listed). A setting with a variant that
    has no value is not eligible (it would be scored on fewer methods than the others)."""
    if selection is None:
        return None
    sel = selection if isinstance(selection, Selection) else Selection.model_validate(dict(selection))
    groups = sel.settings or {v: [v] for v in agg["variants"]}
    scores: dict[str, Any] = {}
    for setting, members in groups.items():
        means = [(agg["variants"].get(v) or {}).get(sel.metric, {}).get("mean") for v in members]
        ok = all(m is not None for m in means)
        scores[setting] = {"variants": list(members), "means": dict(zip(members, means)),
                           "score": sum(means) / len(means) if ok else None}
    eligible = [(k, v["score"]) for k, v in scores.items() if v["score"] is not None]
    best = None
    if eligible:
        sign = 1.0 if sel.direction == "higher" else -1.0
        best = max(eligible, key=lambda kv: sign * kv[1])[0]  # max keeps the first of equal keys
    return {"metric": sel.metric, "direction": sel.direction, "settings": scores, "selected": best}


# ------------------------------------------------------------------------------------------------------------
# report


def machine() -> str:
    """CPU model (/proc/cpuinfo, else platform.processor()), core count and OS."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine() or "unknown CPU"
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pm(cell: Mapping) -> str:
    if cell.get("mean") is None:
        return "n/a"
    if cell.get("half_width") is None:
        return f"{cell['mean']:.3f} (n=1)"
    return f"{cell['mean']:.3f} ± {cell['half_width']:.3f}"


def render_markdown(name: str, agg: Mapping, info: Mapping, chosen: Mapping | None = None) -> str:
    pct = round(100 * agg["confidence"])
    metrics = agg["metrics"]
    split = info.get("eval_split", "test")
    lines = [
        f"# Study `{name}`",
        "",
        f"Per variant: mean ± half-width of the {pct}% t-interval over seeds, {split} split "
        f"({info.get('eval_samples', 'n/a')} samples, greedy). Claims: paired per-seed difference a - b.",
        "",
        "| variant | n seeds | " + " | ".join(metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for v, row in agg["variants"].items():
        lines.append(f"| {v} | {len(row['seeds'])} | " + " | ".join(_pm(row[m]) for m in metrics) + " |")
    if chosen is not None:
        lines += [
            "",
            f"Selection on {split}: each setting's score is the mean over its variants of their mean "
            f"{chosen['metric']} ({chosen['direction']} is better).",
            "",
            "| setting | variants | score | selected |",
            "|---|---|---|---|",
        ]
        for k, v in chosen["settings"].items():
            members = ", ".join(f"{m} {_fmt(x)}" for m, x in v["means"].items())
            lines.append(f"| {k} | {members} | {_fmt(v['score'])} | {'**selected**' if k == chosen['selected'] else ''} |")
        lines += ["", f"**selected: {chosen['selected']}**"]
    if agg["claims"]:
        lines += [
            "",
            f"| claim | metric | direction | n pairs | difference | {pct}% CI | verdict | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for c in agg["claims"]:
        ci = "n/a" if c["ci_low"] is None else f"[{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
        lines.append(f"| {c['a']} vs {c['b']} | {c['metric']} | {c['direction']} | {c['n_pairs']} | "
                     f"{_fmt(c['diff_mean'])} | {ci} | **{c['verdict']}** | {c['note']} |")
    lines += [
        "",
        f"- seeds: {', '.join(str(s) for s in info.get('seeds', []))} (study parameters, fixed in advance)",
        f"- variants: " + "; ".join(f"`{v}`: " + ("untrained start checkpoint" if v in info.get("untrained", ())
                                                   else str(info["overrides"].get(v) or "params.yaml as it is"))
                                   for v in agg["variants"]) if info.get("overrides") else "- variants: n/a",
        f"- shared, not per seed: {info.get('shared', 'n/a')}",
        f"- machine: {info.get('machine', 'n/a')}",
        f"- git commit: {info.get('git_commit', 'n/a')}",
        f"- units: {info.get('n_units', 'n/a')} ({info.get('n_ran', 0)} run now, {info.get('n_skipped', 0)} "
        "finished before)",
        "",
    ]
    return "\n".join(lines)


def plot_study(name: str, agg: Mapping, path: Path) -> Path:
    """One panel per metric: per-variant means with t-interval error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = agg["metrics"]
    variants = list(agg["variants"])
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics) + 1, 3.4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        means = [agg["variants"][v][m]["mean"] for v in variants]
        errs = [agg["variants"][v][m]["half_width"] or 0.0 for v in variants]
        xs = range(len(variants))
        ax.bar(xs, [x if x is not None else math.nan for x in means], yerr=errs, capsize=4, color="#4c72b0")
        ax.set_xticks(list(xs), variants, rotation=45, ha="right", fontsize=8)
        ax.set_title(m, fontsize=9)
    fig.suptitle(f"study {name}: mean and {round(100 * agg['confidence'])}% t-interval over seeds", fontsize=10)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:  # the temporary name ends in .png: savefig infers the format
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def write_report(name: str, spec: StudySpec, results: Sequence[Mapping], info: Mapping,
                 report_name: str | None = None) -> dict[str, Path]:
    """Aggregate ``results`` and write ``<report_dir>/<report_name>.md``, ``.json`` and ``.png`` (``report_name``
    defaults to the study name; another name keeps, say, a second seed set's report beside the first)."""
    agg = aggregate(results, spec.claims, spec.metrics, spec.confidence)
    chosen = select(agg, spec.selection)
    out = Path(spec.report_dir)
    stem = report_name or name
    if not stem or "/" in stem or stem.startswith("."):
        raise ConfigError(f"study report name {stem!r}: expected a plain file name")
    paths = {"md": out / f"{stem}.md", "json": out / f"{stem}.json", "png": out / f"{stem}.png"}
    method = study_method(spec)
    extras = method.report_extras(name, spec, results, out / stem) if method.report_extras else {}
    md = render_markdown(name, agg, info, chosen)
    if extras.get("markdown"):
        md = md.rstrip("\n") + "\n" + "\n".join(extras["markdown"]) + "\n"
    atomic_write_text(paths["md"], md)
    paths.update(extras.get("files") or {})
    units = [{k: r.get(k) for k in ("variant", "seed", "metrics", "duration_s")} for r in results]
    write_json(paths["json"], _json_safe({"study": name, **info, **agg, "selection": chosen, "units": units,
                                          **({"extras": extras["json"]} if extras.get("json") else {})}))
    plot_study(name, agg, paths["png"])
    return paths


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


# ------------------------------------------------------------------------------------------------------------
# the whole study


def study_info(cfg: Any, spec: StudySpec, units: Sequence[Unit]) -> dict[str, Any]:
    from rubricflow.tracking import git_commit

    variants = list(dict.fromkeys(u.variant for u in units))
    return {
        "seeds": sorted({u.seed for u in units}),
        "variants": variants,
        "overrides": {v: spec.variants[v] for v in variants},
        "untrained": [v for v in variants if v in spec.untrained],
        "method": spec.method,
        "shared": ", ".join(f"{s}: {p}" for s, p in study_method(spec).shared_outputs(cfg).items()),
        "machine": machine(),
        "git_commit": git_commit(),
        "profile": cfg.profile,
        "eval_split": spec.eval_split,
        "n_units": len(units),
    }


def run_study(
    cfg: Any,
    name: str,
    seeds: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
    unit_fn: UnitFn | None = None,
    track: bool = False,
    secret_resolver=None,
    report_name: str | None = None,
) -> dict[str, Any]:
    """Plan, check the shared outputs, run the units not finished yet (progress bar with ETA), write the report
    (``<report_dir>/<report_name or name>.*``). Tracking: one MLflow parent run for this invocation, a child run
    per unit."""
    from rubricflow.progress import progress

    spec = study_spec(cfg, name)
    units = plan(spec, seeds, variants)
    require_shared(cfg, name, spec, units)
    method = study_method(spec)
    done = {u: r for u in units
            if (r := read_result(spec, u, unit_inputs(unit_config(cfg, name, spec, u), u, method))) is not None}
    todo = [u for u in units if u not in done]
    previous = os.environ.get("RUBRICFLOW_PIPELINE_ID")
    if track and not previous:
        os.environ["RUBRICFLOW_PIPELINE_ID"] = f"study-{name}-{uuid.uuid4().hex[:12]}"
    results: dict[Unit, Mapping] = dict(done)
    try:
        with progress(f"study {name} ({len(done)}/{len(units)} units done before; left)", total=len(todo)) as bar:
            for u in todo:
                results[u] = run_unit(cfg, name, spec, u, unit_fn, track, secret_resolver)
                bar.advance(1, unit=u.key)
        return report_study(cfg, name, spec, units, results, n_ran=len(todo), track=track, report_name=report_name)
    finally:
        if track and not previous:
            os.environ.pop("RUBRICFLOW_PIPELINE_ID", None)


def report_study(
    cfg: Any, name: str, spec: StudySpec, units: Sequence[Unit], results: Mapping[Unit, Mapping], n_ran: int,
    track: bool = False, report_name: str | None = None,
) -> dict[str, Any]:
    """Write the report of ``units`` from their ``results``; with ``track``, attach it to the parent run and close
    that. Returns a summary: unit counts, report paths, the verdict per claim."""
    ordered = [results[u] for u in units]
    info = {**study_info(cfg, spec, units), "n_ran": n_ran, "n_skipped": len(units) - n_ran,
            "eval_samples": next((r.get("eval_samples") for r in ordered if r.get("eval_samples")), None)}
    paths = write_report(name, spec, ordered, info, report_name)
    if track:
        _finish_parent(cfg, paths)
    agg = aggregate(ordered, spec.claims, spec.metrics, spec.confidence)
    summary = {"units": len(units), "ran": n_ran, "skipped": len(units) - n_ran, "eval_split": spec.eval_split,
               "reports": {k: str(p) for k, p in paths.items()},
               "claims": {f"{c['a']} vs {c['b']} ({c['metric']})": c["verdict"] for c in agg["claims"]}}
    chosen = select(agg, spec.selection)
    if chosen is not None:
        summary["selected"] = chosen["selected"]
        summary["selected_overrides"] = {v: spec.variants[v] for v in chosen["settings"].get(chosen["selected"], {})
                                         .get("variants", [])} if chosen["selected"] else {}
    return summary


def _finish_parent(cfg: Any, paths: Mapping[str, Path]) -> None:
    """Attach the study report to the invocation's parent run and close it."""
    from rubricflow import tracking

    parent, children = tracking.pipeline_runs(experiment=cfg.tracking.experiment,
                                              tracking_uri=cfg.tracking.tracking_uri)
    if parent is None:  # every unit had finished before: no run was opened
        return
    import mlflow

    client = mlflow.tracking.MlflowClient()
    for p in paths.values():
        client.log_artifact(parent.info.run_id, str(p), artifact_path="study")
    tracking.finish_parent(parent.info.run_id, children)


# ------------------------------------------------------------------------------------------------------------
# RuCL: a unit trains from the shared SFT start with the variant's reward and curriculum, then the final evaluation

RUCL_EVAL_NAME = "policy"  # the name of the unit's checkpoint in rucl.eval_policies
# Judge settings that change how verdicts are fetched, not what they are (as in rubricflow.methods.rucl.train).
_JUDGE_OPERATIONAL = {"cache_enabled", "cache_programmatic", "cache_path", "preflight", "max_failed_frac",
                      "failure_window"}


def _rucl_unit_overrides(vcfg: Any, name: str, spec: StudySpec, unit: Unit, udir: Path) -> dict[str, Any]:
    out = str(udir / "model")
    policy = vcfg.rucl.init_from if unit.variant in spec.untrained else out
    return {
        # the GRPO trainer draws the prompt order, rollouts and minibatches from rucl.grpo.seed (the run-level `seed`
        # alone would leave every unit on the same trajectory: a study of one run, repeated)
        "rucl.grpo.seed": unit.seed,
        "rucl.name": "train",
        "rucl.out_dir": out,
        "rucl.checkpoint_dir": str(Path(vcfg.rucl.checkpoint_dir).parent / "studies" / name / unit.variant
                                   / f"seed{unit.seed}"),
        "rucl.eval_split": spec.eval_split,  # test for a reporting study, val for a selection study
        "rucl.eval_policies": {RUCL_EVAL_NAME: policy},
    }


def _rucl_shared_outputs(cfg: Any) -> dict[str, Path]:
    from rubricflow.data.validate import stamp_path

    return {
        "data": Path(cfg.data.out_dir) / "manifest.json",
        "validate": stamp_path(cfg.reports_dir, cfg.data.out_dir),
        "sft": Path(cfg.rucl.init_from) / "config.json",
        "stratify": Path(cfg.rucl.tiers_path),
    }


def _rucl_input_parts(ucfg: Any, unit: Unit) -> dict[str, Any]:
    from rubricflow.grpo.checkpoint import content_hash

    judge = ucfg.judge.model_dump(mode="json", exclude=_JUDGE_OPERATIONAL)
    return {
        "config": {"rucl": ucfg.rucl.model_dump(mode="json"), "judge": judge,
                   "generation": ucfg.generation.model_dump(mode="json", exclude={"vllm_gpu_memory_utilization"}),
                   "data": ucfg.data.model_dump(mode="json")},
        "seed": unit.seed,
        "init_policy": content_hash(ucfg.rucl.init_from),
        "tiers": content_hash(ucfg.rucl.tiers_path),
        "data_set": content_hash(ucfg.data.out_dir),
    }


def run_rucl_unit(ucfg: Any, unit: Unit, udir: Path, run: Any, secret_resolver=None) -> dict:
    """One RuCL unit: train on the unit config (unless untrained), then the final evaluation on
    ``rucl.eval_split``."""
    from rubricflow.data.validate import require_gate
    from rubricflow.methods.rucl.evaluate import evaluate_policies

    ctx = StageContext.of(ucfg, run, secret_resolver)
    require_gate(ucfg.data, ctx.reports_dir)
    train = None
    if Path(ucfg.rucl.eval_policies[RUCL_EVAL_NAME]) != Path(ucfg.rucl.init_from):
        from rubricflow.methods.rucl.rubrics.pool import load_tiers
        from rubricflow.methods.rucl.train import train_rucl

        rcfg = ucfg.rucl
        backend, rubrics = None, []
        if rcfg.reward.mode != "outcome" or Path(rcfg.tiers_path).exists():
            rubrics = load_tiers(rcfg.tiers_path)
        if rcfg.reward.mode != "outcome":
            from rubricflow.judge.factory import make_judge

            backend = make_judge(ucfg.judge, secret_resolver, image_root=ucfg.data.out_dir)
        train = train_rucl(rcfg, ucfg.data.out_dir, backend, rubrics, udir / "train", ucfg.generation, run=run,
                           seed=unit.seed)
    ev = evaluate_policies(ucfg.rucl, ucfg.judge, ucfg.data.out_dir, ucfg.generation, secret_resolver)
    return {"metrics": ev[RUCL_EVAL_NAME], "eval_samples": ev["eval_samples"], "rubrics": ev["rubrics"],
            "train": train}


RUCL = StudyMethod(
    name="rucl",
    run_unit=run_rucl_unit,
    unit_overrides=_rucl_unit_overrides,
    reserved_keys=("rucl.grpo.seed", "rucl.name", "rucl.out_dir", "rucl.checkpoint_dir", "rucl.eval_policies",
                   "rucl.eval_split"),
    shared_outputs=_rucl_shared_outputs,
    input_parts=_rucl_input_parts,
    # training (as rubricflow.methods.rucl.train.TRAINING_CODE), the judge, the evaluation and the independent verifier
    code=("rubricflow.methods.rucl", "rubricflow.grpo", "rubricflow.methods.rucl.rewards", "rubricflow.methods.rucl.curriculum", "rubricflow.answers",
          "rubricflow.judge", "rubricflow.evaluation", "rubricflow.trace_check"),
    sections=("rucl",),
    shared_hint="run the main pipeline first (`dvc repro rucl_eval` or `make run`): the data, the SFT model and the "
    "rubric tiers are shared by every unit",
)
