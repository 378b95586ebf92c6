"""A pipeline flow on DVC's stages: Prefect schedules, DVC decides what is stale, an override run is a DVC experiment.

``run_dvc_pipeline(pipe, stages, overrides, ...)`` (called inside a ``@flow``, by :func:`tasks.pipeline.run_pipeline`
when the project is a DVC repository whose ``dvc.yaml`` has the pipeline's stages):

* **the stage graph is DVC's**: the targets (the pipeline's stages, up to ``until``) and every stage upstream of
  them (the ``params`` stage included) come from ``dvc.yaml``; each stage is one Prefect task
  (``dvc_stage``) that runs ``dvc --wait-for-lock repro --single-item STAGE``, exactly what ``rubricflow repro`` runs.
  DVC skips a stage whose deps, params and outs did not change (the task says ``unchanged``), so a flow run after
  ``make run`` recomputes nothing, and ``dvc status`` agrees with Prefect afterwards. Prefect keeps no cache of
  its own here.
* **the Prefect graph is the stage DAG**: every task is submitted with ``wait_for=`` the futures of the stages it
  depends on, so independent chains run side by side (the flow's task runner bounds how many) and the flow run's
  graph draws DVC's edges.
* **a run with overrides is a DVC experiment**, never a write over the main workspace's tracked outputs: the stages
  run in a temporary git worktree of ``HEAD`` (sharing the project's DVC cache, so unchanged stages are checked out,
  not recomputed), with the overrides applied to its ``params.yaml`` as ``dvc exp run -S`` applies them; at the end
  ``dvc exp save`` records the worktree as experiment ``prefect-<flow run id prefix>`` of ``HEAD`` (``dvc exp
  show`` lists it, ``dvc exp apply`` brings it into the workspace), then the worktree is removed. The stages see
  ``DVC_EXP_NAME`` and ``DVC_EXP_BASELINE_REV`` as under ``dvc exp run`` (MLflow tags ``dvc.exp_name``).
  A run's uncommitted changes of the main workspace are not part of the experiment (its baseline is ``HEAD``).

Each stage's output goes to ``.rubricflow/logs/flows/<flow run id>/<stage>.log`` of the main workspace; a failed
stage's last lines are in the task's error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
import yaml

UNCHANGED = "didn't change, skipping"


class DvcStageFailed(RuntimeError):
    """``dvc repro --single-item STAGE`` exited non-zero (the message ends with the last lines of its log)."""


def dvc_address(dvc_file: str, stage: str) -> str:
    """How DVC names ``stage`` of ``dvc_file`` (``rucl`` in the root dvc.yaml, ``smol/dvc.yaml:rucl`` elsewhere)."""
    return stage if dvc_file == "dvc.yaml" else f"{dvc_file}:{stage}"


def is_dvc_pipeline(root: Path, dvc_file: str, stages: list[str]) -> bool:
    """True when ``root`` is a git + DVC project whose ``dvc_file`` defines every one of ``stages``."""
    if not (root / ".dvc").is_dir() or not (root / dvc_file).is_file():
        return False
    if subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=root, capture_output=True).returncode:
        return False

    defined = set(((yaml.safe_load((root / dvc_file).read_text()) or {}).get("stages") or {}))
    return set(stages) <= defined


def stage_dag(root: Path, targets: list[str]) -> dict[str, list[str]]:
    """``{stage address: the stage addresses it depends on}`` for ``targets`` and everything upstream of them, in
    a topological order (DVC's own graph of the project at ``root``)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        stages = set()
        for t in targets:
            stages.update(repo.stage.collect(t, with_deps=True))
        graph = repo.index.graph
        deps = {s.addressing: sorted(d.addressing for d in graph.successors(s) if d in stages) for s in stages}
    order: list[str] = []
    seen: set[str] = set()

    def visit(s: str) -> None:
        if s in seen:
            return
        seen.add(s)
        for d in deps[s]:
            visit(d)
        order.append(s)

    for s in sorted(deps):
        visit(s)
    return {s: deps[s] for s in order}


def _stage_name(address: str) -> str:
    return address.rsplit(":", 1)[-1]


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


@task(name="dvc-stage", cache_policy=NO_CACHE, persist_result=False)
def dvc_stage(address: str, workspace: str, env: dict[str, str], log: str, judge: bool = False) -> dict:
    """``dvc --wait-for-lock repro --single-item ADDRESS`` in ``workspace``; returns ``{"stage", "status"
    (ran | unchanged), "seconds", "metrics"}`` (metrics: the stage's ``reports/<stage>.json`` when it has one)."""
    logger = get_run_logger()
    log_path = Path(log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    slot = contextlib.nullcontext()
    if judge:  # the same global slot the in-process stage task holds
        from prefect.concurrency.sync import concurrency

        from tasks.concurrency import JUDGE_LIMIT

        slot = concurrency(JUDGE_LIMIT, occupy=1, strict=True)
    t0 = time.perf_counter()
    with slot, open(log_path, "ab") as out:
        rc = subprocess.call([sys.executable, "-m", "dvc", "--wait-for-lock", "repro", "--single-item", address],
                             cwd=workspace, env=env, stdout=out, stderr=subprocess.STDOUT)
    secs = time.perf_counter() - t0
    if rc != 0:
        raise DvcStageFailed(f"stage {address}: dvc repro exited {rc} (log {log_path}); last lines:\n{_tail(log_path)}")
    status = "unchanged" if UNCHANGED in log_path.read_text(errors="replace") else "ran"
    logger.info("stage %s: %s in %.1f s", address, status, secs)
    name = _stage_name(address)
    metrics: dict[str, Any] = {}
    report = Path(workspace) / "reports" / f"{name}.json"
    if report.is_file():
        try:
            metrics = json.loads(report.read_text())
        except ValueError:
            metrics = {}
    return {"stage": name, "status": status, "seconds": secs, "metrics": metrics if isinstance(metrics, dict) else {}}


@dataclass
class Workspace:
    """Where the stages run: the main workspace, or an experiment's temporary worktree."""

    path: Path
    experiment: str | None = None  # the DVC experiment name (None: the main workspace)
    baseline: str | None = None  # the commit the experiment starts from
    env: dict[str, str] = field(default_factory=dict)


def _run(cmd: list[str], cwd: Path, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} (in {cwd}) failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def override_args(overrides: dict[str, Any]) -> list[str]:
    """Dotted overrides as ``dvc exp run -S`` arguments (values in JSON, which DVC's override grammar reads)."""
    return [f"{k}={json.dumps(v)}" for k, v in overrides.items()]


@contextlib.contextmanager
def experiment_workspace(root: Path, name: str, overrides: dict[str, Any], env: dict[str, str],
                         params_file: str = "params.yaml") -> Iterator[Workspace]:
    """A detached git worktree of ``HEAD`` outside the project, on the project's DVC cache, with ``overrides``
    applied to its params file; removed on exit. The caller saves it as an experiment (:func:`save_experiment`)."""
    from dvc.repo import Repo
    from dvc.utils.hydra import apply_overrides

    baseline = _run(["git", "rev-parse", "HEAD"], root).stdout.strip()
    with Repo(str(root)) as repo:
        cache_dir = repo.cache.local_cache_dir  # the cache root (objects live under files/md5)
    tmp = Path(tempfile.mkdtemp(prefix=f"rubricflow-{name}-"))
    wt = tmp / "workspace"
    _run(["git", "worktree", "add", "--detach", str(wt), baseline], root)
    try:
        _run([sys.executable, "-m", "dvc", "config", "--local", "cache.dir", str(cache_dir)], wt, env=env)
        # outputs the cache has come from it (their stages stay unchanged); the others are recomputed
        _run([sys.executable, "-m", "dvc", "checkout", "--quiet"], wt, check=False, env=env)
        if overrides:
            apply_overrides(str(wt / params_file), override_args(overrides))
        yield Workspace(wt, name, baseline, {**env, "DVC_EXP_NAME": name, "DVC_EXP_BASELINE_REV": baseline})
    finally:
        _run(["git", "worktree", "remove", "--force", str(wt)], root, check=False)
        _run(["git", "worktree", "prune"], root, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def save_experiment(ws: Workspace, targets: list[str]) -> None:
    """``dvc exp save -n NAME TARGETS`` in the worktree: the experiment (params, dvc.lock, metrics, the outputs of
    the stages that ran in the cache) joins the project's experiments of the baseline commit. Only ``targets`` are
    cached: a run ``until`` a stage leaves the later stages' outputs absent, which a plain save refuses."""
    _run([sys.executable, "-m", "dvc", "exp", "save", "-n", str(ws.experiment), *targets], ws.path, env=ws.env)


def stage_env(pipeline_id: str, jobs: int, flow_run_id: str | None = None) -> dict[str, str]:
    """The stages' environment: this one, the pipeline id (one MLflow parent run) and the flow run id (its tag
    ``prefect_flow_run_id``), the venv's tools on PATH and the CPUs shared between the stages that may run at once
    (as ``rubricflow repro`` shares them)."""
    env = dict(os.environ)
    env["RUBRICFLOW_PIPELINE_ID"] = pipeline_id
    if flow_run_id:
        env["RUBRICFLOW_FLOW_RUN_ID"] = flow_run_id
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("RUBRICFLOW_THREADS", str(max(1, len(os.sched_getaffinity(0)) // max(1, jobs))))
    return env


def submit_dag(dag: dict[str, list[str]], ws: Workspace, log_dir: Path, judge: set[str] | None = None,
               retries: dict[str, int] | None = None) -> list[dict]:
    """Submit one ``dvc_stage`` task per stage of ``dag`` (topological order), each waiting for the futures of the
    stages it depends on; returns the outcomes in DAG order (``failed`` / ``not started`` for the ones that did not
    complete; the first failure's exception under ``"error"``)."""
    futures: dict[str, Any] = {}
    for address, deps in dag.items():
        name = _stage_name(address)
        opts: dict[str, Any] = {"name": name, "task_run_name": name}
        n = (retries or {}).get(name, 0)
        if n:
            opts.update(retries=n, retry_delay_seconds=10)
        futures[address] = dvc_stage.with_options(**opts).submit(
            address, str(ws.path), ws.env, str(log_dir / f"{address.replace('/', '_').replace(':', '_')}.log"),
            judge=name in (judge or set()), wait_for=[futures[d] for d in deps])
    wait(list(futures.values()))
    outcomes = []
    for address, fut in futures.items():
        state = fut.state
        if state.is_completed():
            outcomes.append(fut.result())
            continue
        out = {"stage": _stage_name(address), "status": "failed" if state.is_failed() else "not started",
               "seconds": None, "metrics": {}}
        if state.is_failed():
            try:
                fut.result()
            except BaseException as e:  # noqa: BLE001 - re-raised by the caller after the report
                out["error"] = e
        outcomes.append(out)
    return outcomes
