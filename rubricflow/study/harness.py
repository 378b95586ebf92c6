"""The study harness: plan the units of a study, run each unit once on its inputs, and report.

A *unit* is one (variant, seed). The method's study adapter (:class:`StudyMethod`, registered as ``Method.study``)
says how a unit's config is made from the variant and the seed, what it reuses from the main pipeline, what its
result depends on, and how it trains and evaluates; the harness (planning, keyed reuse, the test-split guard of
selection studies, tracking, reports) is the same for every method. Everything a unit writes is under
``<out_dir>/<variant>/seed<k>/``, so units never collide.

``result.json`` is written atomically when a unit finishes, with the hashes of what the unit was trained and
evaluated on (:func:`unit_inputs`). A rerun skips a finished unit only when those are unchanged; a unit finished
on other inputs is re-run, naming what changed, and its old result is kept as ``result.stale.json``. An interrupted
unit is picked up from its latest training checkpoint by the method's trainer. A unit runs under a lock of its
own and ``result.json`` carries a checksum (:mod:`rubricflow.study.units`): two processes never run one unit at
once, and a truncated or edited result is set aside as ``result.corrupt.json`` and re-run. The statistics are
``rubricflow.study.stats``, the report ``rubricflow.study.report``.

Entry points: ``rubricflow study <name>`` (the CLI), the Prefect flow ``study`` (flows/study.py, one task per
unit) and ``dvc repro studies/dvc.yaml``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rubricflow import registry, tracking
from rubricflow.util.hashing import code_hash, part_hashes
from rubricflow.util.io import write_json as write_json_file
from rubricflow.pipeline.progress import progress
from rubricflow.sections import ConfigError
from rubricflow.pipeline.splits import forbid_test_split
from rubricflow.pipeline.stage import NullRun, apply_overrides, flat_metrics
from rubricflow.study.adapter import StudyMethod, Unit, UnitFn
from rubricflow.study import provenance
from rubricflow.study.report import json_safe, machine, write_report
from rubricflow.study.seed_start import ensure_start, read_start, seed_starts, start_dir, start_inputs
from rubricflow.study.spec import StudySpec
from rubricflow.study.stats import select
from rubricflow.study.units import check_selection, load_result, locked, peek_result, write_result

RESULT_FILE = "result.json"
STALE_FILE = "result.stale.json"


class SharedOutputsMissing(FileNotFoundError):
    """The main pipeline's outputs a study reuses are missing."""


def study_method(spec: StudySpec) -> StudyMethod:
    """The study adapter of ``spec.method`` (the registered method's ``study``)."""
    adapters = registry.study_adapters()
    if spec.method not in adapters:
        raise ConfigError(f"study method {spec.method!r} has no adapter; registered: {sorted(adapters)}")
    method = adapters[spec.method]
    if spec.pair_metrics and method.pair_metric is None:  # refused before any unit runs, not at the report
        raise ConfigError(f"study: pair_metrics {spec.pair_metrics} need a pair_metric in the {spec.method!r} study "
                          "adapter, which has none")
    return method


# ------------------------------------------------------------------------------------------------------------
# planning


def study_spec(cfg: Any, name: str) -> StudySpec:
    spec = getattr(cfg.study, name, None)
    if not isinstance(spec, StudySpec):
        known = sorted(type(cfg.study).model_fields)
        raise ConfigError(f"unknown study {name!r}; studies in the `study` section: {known}")
    if spec.profile is not None and cfg.profile != spec.profile:
        raise ConfigError(f"study {name} belongs to profile {spec.profile!r} (study.{name}.profile); run it with "
                          f"`rubricflow --profile {spec.profile} study {name}` (the profile now is "
                          f"{cfg.profile!r})")
    return spec


def plan(spec: StudySpec, seeds: Sequence[int] | None = None, variants: Sequence[str] | None = None) -> list[Unit]:
    """The units to run: ``variants`` x ``seeds`` (``None``: the section's), variant-major. An empty, repeated,
    unknown or out-of-range selection is refused (:func:`rubricflow.study.units.check_selection`)."""
    check_selection(spec.method, None if seeds is None else list(seeds), None if variants is None else list(variants),
                    list(spec.variants))
    seeds = list(seeds) if seeds is not None else list(spec.seeds)
    variants = list(variants) if variants is not None else list(spec.variants)
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds {seeds} repeat a seed")
    return [Unit(v, s) for v in variants for s in seeds]


def unit_dir(spec: StudySpec, unit: Unit) -> Path:
    return Path(spec.out_dir) / unit.variant / f"seed{unit.seed}"


def unit_start_dir(spec: StudySpec, unit: Unit) -> Path:
    """The start ``unit`` trains from (``per_seed_start``): its seed's, of its variant's start group if any."""
    return start_dir(spec.out_dir, unit.seed, spec.start_group(unit.variant))


def start_order(spec: StudySpec, units: Sequence[Unit]) -> list[tuple[Unit, Unit | None]]:
    """The order to hand ``units`` to a pool of workers, each with the unit it must wait for (or None). Where a study
    builds a start per seed (``per_seed_start``) and a start is not built yet, the first of its units builds it and
    the others wait for that one, so a free worker takes a unit that can run instead of waiting on the start's lock
    behind another worker; the units that build starts come first. Without starts to build: ``units`` as they are."""
    if not spec.per_seed_start:
        return [(u, None) for u in units]
    builder: dict[Path, Unit] = {}
    waits: dict[Unit, Unit | None] = {}
    for u in units:
        d = unit_start_dir(spec, u)
        if read_start(d) is not None:
            waits[u] = None
        elif d in builder:
            waits[u] = builder[d]
        else:
            builder[d] = u
            waits[u] = None
    first = set(builder.values())
    return [(u, None) for u in builder.values()] + [(u, waits[u]) for u in units if u not in first]


def unit_config(cfg: Any, name: str, spec: StudySpec, unit: Unit) -> Any:
    """``cfg`` with the variant's overrides, then the unit seed and what the method sets per unit (its own seeds,
    output and checkpoint directories, the evaluation split)."""
    method = study_method(spec)
    overrides = dict(spec.variants[unit.variant])
    clash = sorted(k for k in overrides if k in ("seed", *method.reserved_keys))
    if clash:
        raise ConfigError(f"study.{name}.variants.{unit.variant}: {clash} are set by the study per unit")
    vcfg = apply_overrides(cfg, overrides)
    if spec.per_seed_start:
        if method.seed_start is None:
            raise ConfigError(f"study.{name}.per_seed_start: method {spec.method!r} builds no start per seed")
        vcfg = apply_overrides(vcfg, method.seed_start.overrides(vcfg, unit_start_dir(spec, unit)))
    return apply_overrides(vcfg, {"seed": unit.seed,
                                  **method.unit_overrides(vcfg, name, spec, unit, unit_dir(spec, unit))})


def shared_inputs(cfg: Any, name: str, spec: StudySpec, unit: Unit) -> dict[str, Path]:
    """What ``unit`` reuses from the main pipeline (stage -> file that proves it ran), read off the unit's own config
    (a method may build its environment per seed); the seed's start, when the study builds one, is not shared."""
    own = unit_start_dir(spec, unit).resolve() if spec.per_seed_start else None
    return {stage: Path(path)
            for stage, path in study_method(spec).shared_outputs(unit_config(cfg, name, spec, unit)).items()
            if own is None or not Path(path).resolve().is_relative_to(own)}


def require_shared(cfg: Any, name: str, spec: StudySpec, units: Iterable[Unit]) -> None:
    """Refuse (naming each missing path) unless the main pipeline's shared outputs exist for every unit."""
    method = study_method(spec)
    missing: dict[str, str] = {}
    for u in units:
        for stage, path in shared_inputs(cfg, name, spec, u).items():
            if not path.exists():
                missing.setdefault(str(path), stage)
    if missing:
        lines = "\n".join(f"  - {p} (stage `{s}`)" for p, s in missing.items())
        raise SharedOutputsMissing(
            f"study {name}: the main pipeline's shared outputs are missing (they are shared by every unit, not made "
            f"per seed):\n{lines}\n{spec.shared_hint or method.shared_hint}"
        )


# ------------------------------------------------------------------------------------------------------------
# units


def unit_inputs(ucfg: Any, unit: Unit, method: StudyMethod) -> dict[str, str]:
    """One hash per input a unit's result depends on: the method's parts (:attr:`StudyMethod.input_parts`: config
    sections, seed, the contents of what it reuses) and its ``code``."""
    return part_hashes({**method.input_parts(ucfg, unit), "code": code_hash(*method.code)})


def read_result(spec: StudySpec, unit: Unit, inputs: Mapping[str, str] | None = None) -> dict | None:
    """The unit's finished result, or None. With ``inputs`` (:func:`unit_inputs`), a result recorded for other
    inputs is stale: it is moved to ``result.stale.json`` (naming the parts that changed) and None is returned."""
    p = unit_dir(spec, unit) / RESULT_FILE
    result = load_result(p)  # verified against its checksum; a bad one is set aside and the unit re-runs
    if result is None:
        return None
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


def _reusable(cfg: Any, name: str, spec: StudySpec, unit: Unit, method: StudyMethod) -> dict | None:
    """At planning, the unit's result if it can be reused as it stands. With a start per seed, only while the
    seed's start is built on the current inputs: a start missing or stale is (re)built when the unit runs
    (:func:`run_unit`), which then checks the result against the start it has, so a result is never kept beside a
    start built on other inputs nor set aside before its start is there to compare with."""
    ucfg = unit_config(cfg, name, spec, unit)
    if spec.per_seed_start:
        built = read_start(unit_start_dir(spec, unit))
        if built is None or built.get("inputs") != start_inputs(method.seed_start, ucfg, unit.seed):
            return None
    return read_result(spec, unit, unit_inputs(ucfg, unit, method))


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
    method = study_method(spec)
    unit_fn = unit_fn or method.run_unit
    ucfg = unit_config(cfg, name, spec, unit)
    if spec.per_seed_start:  # the seed's start first (it trains: no test row): the unit's inputs hash its contents
        with forbid_test_split(f"study {name} (start of seed {unit.seed})"):
            ensure_start(method.seed_start, ucfg, unit.seed, unit_start_dir(spec, unit))
    inputs = unit_inputs(ucfg, unit, method)
    udir = unit_dir(spec, unit)
    with locked(udir / ".lock", f"unit {unit.key} of study {name}"):  # another process may be running it
        done = read_result(spec, unit, inputs)
        if done is not None:
            return {**done, "skipped": True}
        return _run_locked(cfg, name, spec, unit, unit_fn, track, secret_resolver, prefect_flow_run_id, method,
                           ucfg, udir, inputs)


def _run_locked(cfg, name, spec, unit, unit_fn, track, secret_resolver, prefect_flow_run_id, method, ucfg, udir,
                inputs) -> dict:
    udir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # a selection study chooses: it runs under the test-split guard, so not one test row is read
    guard = forbid_test_split(f"study {name}") if spec.eval_split != "test" else contextlib.nullcontext()
    with guard:
        out, run_id = _run_unit_fn(cfg, name, spec, unit, ucfg, udir, unit_fn, track, secret_resolver,
                                   prefect_flow_run_id, method)
    result = {"study": name, "variant": unit.variant, "seed": unit.seed,
              "overrides": dict(spec.variants[unit.variant]), "eval_split": spec.eval_split, "inputs": inputs, **out,
              "duration_s": round(time.perf_counter() - t0, 2), "mlflow_run_id": run_id, "machine": machine()}
    write_result(udir / RESULT_FILE, json_safe(result))
    return {**result, "skipped": False}


def _run_unit_fn(cfg, name, spec, unit, ucfg, udir, unit_fn, track, secret_resolver, prefect_flow_run_id, method):
    """The unit function inside its MLflow child run (``track``); returns (its output, the run id or None)."""
    if track:
        params = {"study": name, "variant": unit.variant, "seed": unit.seed,
                  "overrides": dict(spec.variants[unit.variant]),
                  **{sec: getattr(ucfg, sec).model_dump(mode="json") for sec in method.sections}}
        with tracking.stage_run(f"study_{name}/{unit.key}", experiment=cfg.tracking.experiment, params=params,
                                tags={"study": name, "variant": unit.variant, "seed": unit.seed,
                                      "profile": cfg.profile},
                                tracking_uri=cfg.tracking.tracking_uri, prefect_flow_run_id=prefect_flow_run_id) as run:
            out = unit_fn(ucfg, unit, udir, run, secret_resolver)
            run.log_metrics(flat_metrics({spec.eval_split: out["metrics"]}))
            return out, run.run_id
    return unit_fn(ucfg, unit, udir, NullRun(), secret_resolver), None


# ------------------------------------------------------------------------------------------------------------
# the whole study


def study_info(cfg: Any, name: str, spec: StudySpec, units: Sequence[Unit]) -> dict[str, Any]:
    variants = list(dict.fromkeys(u.variant for u in units))
    seeds = sorted({u.seed for u in units})
    starts = seed_starts(spec.out_dir, seeds) if spec.per_seed_start else {}
    shared = {s: p for u in units for s, p in shared_inputs(cfg, name, spec, u).items()}
    return {
        "seeds": seeds,
        "variants": variants,
        "overrides": {v: spec.variants[v] for v in variants},
        "untrained": [v for v in variants if v in spec.untrained],
        "method": spec.method,
        "shared": (", ".join(f"{s}: {p}" for s, p in shared.items())
                   or "nothing (every unit builds its own inputs)") + (
            "; built per seed instead, shared by the seed's variants: the start (seed_starts)" if spec.per_seed_start
            else ""),
        "seed_starts": {s: rec.get("summary") for s, rec in starts.items()},
        **({"group_starts": {g: {s: rec.get("summary") for s, rec in seed_starts(spec.out_dir, seeds, g).items()}
                             for g, members in spec.start_groups.items() if set(members) & set(variants)}}
           if spec.start_groups else {}),
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
    exploratory: bool = False,
) -> dict[str, Any]:
    """Plan, check the shared outputs, run the units not finished yet (progress bar with ETA), write the report
    (``<report_dir>/<report_name or name>.*``). Tracking: one MLflow parent run for this invocation, a child run
    per unit. A tree that differs from its commit is refused before any unit runs unless ``exploratory`` (the
    report is then stamped exploratory and adds nothing to the seed ledger)."""
    spec = study_spec(cfg, name)
    units = plan(spec, seeds, variants)
    provenance.require_clean(provenance.code_state([spec.report_dir]), exploratory, f"study {name}")
    require_shared(cfg, name, spec, units)
    method = study_method(spec)
    done = {u: r for u in units if (r := _reusable(cfg, name, spec, u, method)) is not None}
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
        # a unit another process finished while this one waited on its lock is reused, not counted as run here
        ran = sum(not results[u].get("skipped") for u in todo)
        return report_study(cfg, name, spec, units, results, n_ran=ran, track=track, report_name=report_name,
                            extra_info={"inputs_differ": inputs_differ(cfg, name, spec, results)},
                            exploratory=exploratory)
    finally:
        if track and not previous:
            os.environ.pop("RUBRICFLOW_PIPELINE_ID", None)


class UnitsUnfinished(RuntimeError):
    """``report_only``: some planned units have no verified result."""


def report_only(
    cfg: Any, name: str, seeds: Sequence[int] | None = None, variants: Sequence[str] | None = None,
    report_name: str | None = None, exploratory: bool = False,
) -> dict[str, Any]:
    """Write the report from the units' finished results without running or moving anything. Every planned unit
    needs a verified ``result.json`` (else :class:`UnitsUnfinished` names each one). A result finished on other
    inputs than the current ones (e.g. the code changed while a long study ran) is used as it is and the report
    names the unit and the parts that differ, so a reader sees what the numbers were computed with."""
    spec = study_spec(cfg, name)
    units = plan(spec, seeds, variants)
    provenance.require_clean(provenance.code_state([spec.report_dir]), exploratory, f"study {name} --report-only")
    method = study_method(spec)
    results: dict[Unit, Mapping] = {}
    missing = []
    for u in units:
        r, problem = peek_result(unit_dir(spec, u) / RESULT_FILE)
        if r is None:
            missing.append(f"{u.key} ({problem})")
            continue
        results[u] = r
    if missing:
        raise UnitsUnfinished(f"study {name}: --report-only needs every unit finished; not finished: "
                              + ", ".join(missing))
    return report_study(cfg, name, spec, units, results, n_ran=0, report_name=report_name,
                        extra_info={"inputs_differ": inputs_differ(cfg, name, spec, results, method)},
                        exploratory=exploratory)


def inputs_differ(cfg: Any, name: str, spec: StudySpec, results: Mapping[Unit, Mapping],
                  method: StudyMethod | None = None) -> dict[str, list[str]]:
    """Per unit whose result was computed on other inputs than the current ones, the parts that differ (e.g. the
    code changed while a long study ran, after the unit had started): what the report names beside the numbers."""
    method = method or study_method(spec)
    differ: dict[str, list[str]] = {}
    for u, r in results.items():
        now = unit_inputs(unit_config(cfg, name, spec, u), u, method)
        old = r.get("inputs") or {}
        if changed := sorted(k for k in set(old) | set(now) if old.get(k) != now.get(k)):
            differ[u.key] = changed
    return differ


def report_study(
    cfg: Any, name: str, spec: StudySpec, units: Sequence[Unit], results: Mapping[Unit, Mapping], n_ran: int,
    track: bool = False, report_name: str | None = None, extra_info: Mapping[str, Any] | None = None,
    exploratory: bool = False,
) -> dict[str, Any]:
    """Write the report of ``units`` from their ``results``; with ``track``, attach it to the parent run and close
    that. Returns a summary: unit counts, report paths, the verdict per claim.

    The report holds nothing that depends on when or how it was written (no count of units run now, no
    "report-only" mark): ``--report-only`` on the same commit rewrites it byte for byte. It records the commit, a
    hash of the effective params, the units' input hashes and the machine the units ran on; its claims are checked
    against the seed ledger (:mod:`rubricflow.study.provenance`) and, unless ``exploratory``, recorded in it."""
    ordered = [results[u] for u in units]
    state = provenance.code_state([spec.report_dir])
    provenance.require_clean(state, exploratory, f"study {name}")
    method = study_method(spec)
    info = {**study_info(cfg, name, spec, units),
            "eval_samples": next((r.get("eval_samples") for r in ordered if r.get("eval_samples")), None),
            "machine": machines_line(ordered),
            "git_commit": state.commit + ("-dirty" if state.dirty else ""),
            "params_hash": provenance.params_hash(cfg), "inputs": provenance.inputs_record(ordered),
            **(extra_info or {})}
    if exploratory:
        info["exploratory"] = ("the tree differs from its commit: " + ", ".join(state.changed[:8])) if state.dirty \
            else True
    stem = report_name or name  # write_report refuses a stem that is not a plain file name
    engine = provenance.engine_hash(spec, {s: getattr(cfg, s).model_dump(mode="json") for s in method.sections},
                                    ordered)
    entries = provenance.ledger_entries(name, stem, spec.claims, ordered, engine, state.commit)
    paths, agg = write_ledgered(name, stem, spec, ordered, info, entries, exploratory, method.report_extras,
                                method.pair_metric)
    if track:
        _finish_parent(cfg, paths)
    if agg["invalid_values"]:
        print(f"study {name}: warning: {len(agg['invalid_values'])} metric value(s) are not finite numbers and are "
              f"left out (listed in {paths['md']})", file=sys.stderr, flush=True)
    summary = {"units": len(units), "ran": n_ran, "skipped": len(units) - n_ran, "eval_split": spec.eval_split,
               "reports": {k: str(p) for k, p in paths.items()},
               "preconditions": {p["name"]: "holds" if p["holds"] else "fails" for p in agg["preconditions"]},
               "claims": {c["key"]: c["verdict"] for c in agg["claims"]}}
    chosen = select(agg, spec.selection)
    if chosen is not None:
        summary["selected"] = chosen["selected"]
        summary["selected_overrides"] = {v: spec.variants[v] for v in chosen["settings"].get(chosen["selected"], {})
                                         .get("variants", [])} if chosen["selected"] else {}
    return summary


def machines_line(results: Sequence[Mapping]) -> str:
    """The machines the units ran on: one, named; several (a study run in parts, ``rubricflow.study.carry``), each
    with its units' seeds, so a reader sees which paired differences mix machines; none recorded, this one's."""
    seeds: dict[str, set] = {}
    for r in results:
        if r.get("machine"):
            seeds.setdefault(r["machine"], set()).add(r.get("seed"))
    if not seeds:
        return f"{machine()} (where the report was written; the units did not record theirs)"
    if len(seeds) == 1:
        return next(iter(seeds))
    n = {m: sum(r.get("machine") == m for r in results) for m in seeds}
    return "; ".join(f"{m} ({n[m]} units; seeds {', '.join(str(s) for s in sorted(seeds[m], key=str))})"
                     for m in sorted(seeds))


def write_ledgered(name: str, stem: str, spec: StudySpec, results: Sequence[Mapping], info: Mapping,
                    entries: Sequence[Mapping], exploratory: bool, report_extras=None, pair_metric=None,
                    json_extras: Mapping | None = None) -> tuple[dict[str, Path], dict]:
    """Write the report under its lock, its claims checked against the seed ledger (claims re-tested on used seeds
    are exploratory) and, unless ``exploratory``, the others recorded in it; ``json_extras`` replace the JSON's
    ``extras``. Returns the paths and the aggregate."""
    reused = {} if exploratory else provenance.reused_seeds(provenance.read_ledger(spec.report_dir), entries)
    plain = bool(stem) and "/" not in stem and not stem.startswith(".")  # write_report refuses another stem
    lock = locked(Path(spec.report_dir) / f".{stem}.lock", f"report {stem} of study {name}") if plain \
        else contextlib.nullcontext()
    with lock:
        paths, agg = write_report(name, spec, results, info, stem, report_extras, pair_metric,
                                  exploratory_claims=reused)
        if json_extras:
            write_json_file(paths["json"], {**json.loads(paths["json"].read_text()), "extras": json_extras})
        if not exploratory:
            provenance.record_ledger(spec.report_dir, [e for e in entries if e["claim"] not in reused])
    return paths, agg


def _finish_parent(cfg: Any, paths: Mapping[str, Path]) -> None:
    """Attach the study report to the invocation's parent run and close it."""
    parent, children = tracking.pipeline_runs(experiment=cfg.tracking.experiment,
                                              tracking_uri=cfg.tracking.tracking_uri)
    if parent is None:  # every unit had finished before: no run was opened
        return
    import mlflow

    client = mlflow.tracking.MlflowClient()
    for p in paths.values():
        client.log_artifact(parent.info.run_id, str(p), artifact_path="study")
    tracking.finish_parent(parent.info.run_id, children)
