"""Prefect flow ``study``: a multi-seed study (``rubricflow.study``) with one Prefect task per (variant, seed) unit.

The same units ``rubricflow study rucl`` runs: a unit whose ``result.json`` exists is skipped, the shared stages
(data, SFT, rubric tiers) are the main pipeline's outputs and the flow refuses to start without them. By default
the units run one after the other in the flow's process (what a CPU laptop can afford); ``fan_out=True`` submits
them all to the flow's task runner, so a task runner or work pool with more workers runs them side by side;
``ray=ADDRESS`` (``rubricflow study NAME --ray ADDRESS``) runs them as Ray tasks through prefect-ray's
``RayTaskRunner`` (``tasks/ray_runner.py``), each asking for the ``cluster`` section's CPUs and GPUs. A unit on Ray
works in the driver's project folder (a filesystem every node shares at the same path) and checks there that it sees
its inputs; a unit whose worker or node dies is rerun by Ray elsewhere, and one that fails for a reason a retry
cannot change (a missing input, a bad setting) fails the study naming it, after the other units have finished.
Every unit logs an MLflow child run under one parent run per flow run; the report (markdown, JSON, plot) is
written when all units are done. Run it directly: ``python -m flows.study``.
"""

import rubricflow.util.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

import contextlib
import importlib
import os
import socket
from pathlib import Path
from typing import Any, Optional

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.futures import wait
from pydantic import Field

from flows.params import profile_choice
from rubricflow.config import DEFAULT_PROFILE, ConfigError, load_config
from rubricflow.util.env import configure_threads
from rubricflow.study.harness import (
    SharedOutputsMissing,
    Unit,
    inputs_differ,
    plan,
    report_study,
    require_shared,
    run_unit,
    start_order,
    study_spec,
)
from tasks.secrets import load_secret

# environment variables a unit on a Ray worker takes from the driver (a worker's own come from its raylet)
DRIVER_ENV = ("MLFLOW_TRACKING_URI", "RUBRICFLOW_MLFLOW_ARTIFACTS", "RUBRICFLOW_PIPELINE_ID")


class ProjectNotShared(FileNotFoundError):
    """A Ray worker cannot see the project folder or the parameters file of the flow's driver."""


class UnitsFailed(RuntimeError):
    """Units of a study failed (each named with its reason); the others' results are kept."""


def load_unit_fn(path: str):
    """The unit function at ``module:attribute`` (a drill's or a benchmark's stand-in for the method's)."""
    module, _, attr = str(path).partition(":")
    if not module or not attr:
        raise ConfigError(f"unit_fn: expected `module:attribute`, got {path!r}")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"unit_fn: cannot load {path!r}: {e}") from None
    if not callable(fn):
        raise ConfigError(f"unit_fn: {path!r} is not callable")
    return fn


@contextlib.contextmanager
def _on_worker(key: str, worker: Optional[dict]):
    """On a Ray worker: the driver's project folder as the working directory, its MLflow and pipeline variables, the
    unit's thread count; each restored afterwards. Refuses by name a worker that cannot see the project."""
    if not worker:
        yield
        return
    root, params = Path(worker["root"]), Path(worker["params"])
    for what, p in (("the project folder", root), ("the parameters file", params)):
        if not p.exists():

            raise ProjectNotShared(
                f"study unit {key} on {socket.gethostname()}: {what} {p} does not exist on this worker; a study on "
                f"a Ray cluster needs the project on a filesystem every node shares at the same path "
                f"(docs/operations.md, 'Run a study on a Ray cluster')")
    before_cwd, before_env = os.getcwd(), {k: os.environ.get(k) for k in worker["env"]}
    os.chdir(root)
    os.environ.update(worker["env"])
    configure_threads(worker["threads"])
    try:
        yield
    finally:
        os.chdir(before_cwd)
        for k, v in before_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _retry_unless_deterministic(task, task_run, state) -> bool:
    """Prefect retries a unit that raised, unless a retry cannot change the outcome (a missing input, a bad
    setting)."""
    try:
        state.result()
    except (ConfigError, SharedOutputsMissing, ProjectNotShared):
        return False
    except Exception:
        return True
    return True


@task(name="study-unit", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10,
      retry_condition_fn=_retry_unless_deterministic)
def unit_task(name: str, variant: str, seed: int, profile: str, overrides: dict, track: bool,
              flow_run_id: Optional[str] = None, worker: Optional[dict] = None,
              unit_fn: Optional[str] = None) -> dict:
    """Train and evaluate one (variant, seed) unit (skipped when its result.json exists; a retry resumes from the
    unit's latest training checkpoint). ``worker``: set when the unit runs on a Ray worker (see ``_on_worker``)."""
    unit = Unit(variant, seed)
    with _on_worker(unit.key, worker):
        cfg = load_config(worker["params"] if worker else None, profile=profile, overrides=overrides)
        spec = study_spec(cfg, name)
        if worker:  # what this node sees, not what the driver saw
            require_shared(cfg, name, spec, [unit])
        fn = {"unit_fn": load_unit_fn(unit_fn)} if unit_fn else {}
        result = run_unit(cfg, name, spec, unit, track=track, secret_resolver=load_secret,
                          prefect_flow_run_id=flow_run_id, **fn)
    get_run_logger().info("unit %s/seed%d: %s", variant, seed, "finished before" if result["skipped"] else "done")
    return result


def _collect(name: str, futures: dict) -> dict:
    """Every future's result once all have finished; a failed unit fails the study naming it and its reason (the
    finished units' results are on disk)."""
    wait(list(futures.values()))
    results, failed = {}, []
    for u, f in futures.items():
        try:
            results[u] = f.result()
        except Exception as e:  # noqa: BLE001  (reported with the unit's name below)
            failed.append(f"{u.key}: {type(e).__name__}: {' '.join(str(e).split())}")
    if failed:
        raise UnitsFailed(f"study {name}: {len(failed)} of {len(futures)} units failed (the others' results are "
                          f"kept): " + "; ".join(failed))
    return results


def _check_tracking(cfg: Any, track: bool) -> None:
    """Units on other machines than the driver's log to an MLflow server, never to a local SQLite file."""
    from tasks.ray_runner import cluster_hosts

    uri = cfg.tracking.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not track or not (uri.startswith("sqlite:") or uri.startswith("file:") or "://" not in uri):
        return
    import ray

    here = ray.util.get_node_ip_address()
    others = [h for h in cluster_hosts() if h != here]
    if others:
        raise ConfigError(f"tracking.tracking_uri: the units run on other machines ({', '.join(others)}) but MLflow "
                          f"logs to {uri!r} on this one; give a tracking server (e.g. http://HOST:5000, `make ui`) "
                          f"or run without tracking")


def _submit(name: str, ordered: list[tuple[Unit, Optional[Unit]]], args: dict) -> dict:
    """Every unit submitted in ``ordered``'s order, each after the unit it waits for (``start_order``)."""
    futures: dict = {}
    for u, after in ordered:
        wait_for = [futures[after]] if after is not None else None
        futures[u] = unit_task.submit(name, u.variant, u.seed, wait_for=wait_for, **args)
    return futures


@flow(name="study-units", log_prints=True)
def study_units(name: str, units: list[tuple[str, int, Optional[tuple[str, int]]]], args: dict,
                resources: dict) -> dict:
    """``units`` (variant, seed, the (variant, seed) it waits for or None) as tasks of this sub-flow's task runner,
    in that order, each with Ray's ``resources``; returns each unit's result by its key. :func:`units_on_ray` gives
    it prefect-ray's runner."""
    from prefect_ray.context import remote_options

    if args.get("worker"):
        _check_tracking(load_config(args["worker"]["params"], profile=args["profile"], overrides=args["overrides"]),
                        args["track"])
    ordered = [(Unit(v, s), Unit(*after) if after else None) for v, s, after in units]
    with remote_options(**resources):
        futures = _submit(name, ordered, args)
    return {u.key: r for u, r in _collect(name, futures).items()}


def units_on_ray(address: str, name: str, ordered: list[tuple[Unit, Optional[Unit]]], args: dict,
                 cluster: Any) -> dict:
    """Run ``ordered`` (``start_order``) as Ray tasks: :func:`study_units` with prefect-ray's ``RayTaskRunner`` on
    ``address``."""
    from tasks.ray_runner import task_runner, unit_resources

    on_ray = study_units.with_options(task_runner=task_runner(address))
    units = [(u.variant, u.seed, (w.variant, w.seed) if w else None) for u, w in ordered]
    by_key = on_ray(name, units, args, unit_resources(cluster))
    return {u: by_key[u.key] for u, _ in ordered}


@flow(name="study", log_prints=True)
def study(
    name: str = Field("rucl", description="Study: a sub-section of `study` in params.yaml."),
    profile: profile_choice() = Field(DEFAULT_PROFILE, description="Profile overlay of params.yaml (its `profiles`: "
                                      "tiny is CPU, gpu a cluster)."),
    seeds: Optional[list[int]] = Field(None, description="Seeds (empty: study.<name>.seeds)."),
    variants: Optional[list[str]] = Field(None, description="Variants (empty: all of study.<name>.variants)."),
    overrides: dict = Field({}, description="Dotted config overrides applied to every unit."),
    fan_out: bool = Field(False, description="Submit every unit to the task runner at once (default: one by one)."),
    ray: Optional[str] = Field(
        None, description="Run the units on Ray (prefect-ray): `auto`, `local` (started on this machine, loopback "
        "only), `ray://host:10001` or `host:port`; each unit asks for the `cluster` section's CPUs and GPUs. The "
        "project folder must be on a filesystem every node shares. Empty: in the flow's own task runner."),
    track: bool = Field(True, description="Log a parent MLflow run and one child run per unit."),
    report_name: Optional[str] = Field(None, description="Report file stem (empty: the study name)."),
    unit_fn: Optional[str] = Field(
        None, description="`module:attribute` of a unit function replacing the method's (drills and benchmarks; "
        "empty: the method's)."),
    exploratory: bool = Field(
        False, description="Allow a working tree that differs from its commit: the report is stamped exploratory "
        "and adds nothing to the seed ledger (default: refused before any unit runs)."),
) -> dict:
    from rubricflow.study.provenance import code_state, require_clean
    from tasks.ray_runner import check_address

    address = check_address(ray) if ray else None
    cfg = load_config(profile=profile, overrides=overrides)
    spec = study_spec(cfg, name)
    units = plan(spec, seeds or None, variants or None)  # empty lists: the section's (see the fields)
    require_clean(code_state([spec.report_dir]), exploratory, f"study {name}")
    require_shared(cfg, name, spec, units)
    if unit_fn:
        load_unit_fn(unit_fn)  # refused here, before any unit is submitted
    ctx = FlowRunContext.get()
    flow_run_id = str(ctx.flow_run.id) if ctx and ctx.flow_run else None
    previous = os.environ.get("RUBRICFLOW_PIPELINE_ID")
    os.environ["RUBRICFLOW_PIPELINE_ID"] = f"prefect-study-{flow_run_id or os.getpid()}"
    try:
        args = dict(profile=profile, overrides=overrides, track=track, flow_run_id=flow_run_id, unit_fn=unit_fn)
        if address:
            params = Path(os.environ.get("RUBRICFLOW_PARAMS", "params.yaml")).resolve()
            worker = {"root": os.getcwd(), "params": str(params), "threads": cfg.cluster.unit_cpus,
                      "env": {k: os.environ[k] for k in DRIVER_ENV if k in os.environ}}
            results = units_on_ray(address, name, start_order(spec, units), {**args, "worker": worker}, cfg.cluster)
        elif fan_out:
            results = _collect(name, _submit(name, start_order(spec, units), args))
        else:
            results = {u: unit_task(name, u.variant, u.seed, **args) for u in units}
        ran = sum(not r["skipped"] for r in results.values())
        return report_study(cfg, name, spec, units, results, n_ran=ran, track=track, report_name=report_name,
                            extra_info={"inputs_differ": inputs_differ(cfg, name, spec, results)},
                            exploratory=exploratory)
    finally:
        if previous is None:
            os.environ.pop("RUBRICFLOW_PIPELINE_ID", None)
        else:
            os.environ["RUBRICFLOW_PIPELINE_ID"] = previous


if __name__ == "__main__":
    import json

    print(json.dumps(study(), indent=1, default=str))
