"""MLflow tracking: one parent run per pipeline invocation, one nested child run per stage.

A *pipeline invocation* is one ``make run`` / ``dvc repro`` / Prefect flow run. Stages run as separate processes
under DVC, so they find their parent by a pipeline id tag:

1. ``$RUBRICFLOW_PIPELINE_ID`` if set (``make run`` and the Prefect flows set it), else
2. the id of the enclosing ``dvc repro`` process (pid + start time, read from /proc), else
3. a fresh id (a stage run by hand is its own pipeline).

Child runs are tagged with the git commit, the profile and the Prefect flow-run id when running under Prefect
(``$PREFECT__FLOW_RUN_ID``, set by Prefect for its runs, or the ``prefect_flow_run_id`` argument the tasks
layer passes). DVC writes ``dvc.lock`` only after a stage succeeds, so the stage's lock hashes are added after
``dvc repro`` by ``backfill_dvc_tags`` (``rubricflow summary``, which ``make run`` calls).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rubricflow.env import PROJECT_ROOT, STATE_DIR

TAG_PIPELINE = "rubricflow.pipeline_id"
TAG_STAGE = "rubricflow.stage"


def git_commit(root: Path = PROJECT_ROOT) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (subprocess.SubprocessError, FileNotFoundError):
        return "unknown"


def _proc_start(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _dvc_ancestor() -> str | None:
    pid = os.getppid()
    for _ in range(8):
        if pid <= 1:
            return None
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        argv = [c.decode(errors="replace") for c in cmd if c]
        if any(Path(a).name == "dvc" for a in argv[:2]) and any(a in ("repro", "exp") for a in argv):
            return f"dvc-{pid}-{_proc_start(pid)}"
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None
    return None


def pipeline_id() -> str:
    pid = os.environ.get("RUBRICFLOW_PIPELINE_ID") or _dvc_ancestor()
    if not pid:
        pid = f"adhoc-{uuid.uuid4().hex[:12]}"
        os.environ["RUBRICFLOW_PIPELINE_ID"] = pid
    return pid


def dvc_lock_hashes(stage: str, lock_path: Path | None = None) -> dict[str, str]:
    """``{"dvc.dep.<path>": md5, "dvc.out.<path>": md5}`` for ``stage`` from dvc.lock (empty if absent)."""
    import yaml

    lock_path = lock_path or PROJECT_ROOT / "dvc.lock"
    if not lock_path.exists():
        return {}
    try:
        lock = yaml.safe_load(lock_path.read_text()) or {}
    except yaml.YAMLError:
        return {}
    st = (lock.get("stages") or {}).get(stage) or {}
    tags = {}
    for kind in ("deps", "outs"):
        for item in st.get(kind) or []:
            h = item.get("md5") or item.get("hash") or ""
            tags[f"dvc.{kind[:-1]}.{item.get('path')}"] = str(h)
    return tags


_READY: set[str] = set()


def _file_lock(path: Path):
    """An inter-process lock at ``path`` (its folder created), waiting at most 10 minutes."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=600)


def init_store(uri: str) -> None:
    """Create (or migrate) a local SQLite MLflow store under a file lock, once per process.

    MLflow creates and migrates its tables on the first connection; two processes doing that at once on a new
    database (study units on a local Ray cluster, parallel stages) collide in alembic ("table _alembic_tmp_params
    already exists"). The first process here builds the tables while the others wait on the lock, then find them.
    """
    if uri in _READY or not uri.startswith("sqlite:///"):
        return
    import mlflow

    db = Path(uri[len("sqlite:///"):])
    with _file_lock(db.parent / f"{db.name}.init.lock"):
        mlflow.tracking.MlflowClient(uri).search_experiments(max_results=1)
    _READY.add(uri)


def _mlflow(tracking_uri: str | None):
    import mlflow

    uri = tracking_uri or os.environ["MLFLOW_TRACKING_URI"]
    init_store(uri)
    mlflow.set_tracking_uri(uri)
    return mlflow


def artifact_root() -> str:
    """Where run artifacts go for a local SQLite store: inside the project, never ./mlruns of the cwd."""
    root = os.environ.get("RUBRICFLOW_MLFLOW_ARTIFACTS") or str(STATE_DIR / "mlflow" / "artifacts")
    return root if "://" in root else Path(root).resolve().as_uri()


def _local_lock(name: str):
    """A lock shared by this project's processes on this machine (stages run at once by ``rubricflow repro``)."""
    return _file_lock(STATE_DIR / f"{name}.lock")


def ensure_experiment(mlflow, name: str):
    if mlflow.get_experiment_by_name(name) is None:
        with _local_lock("mlflow-experiment"):
            if mlflow.get_experiment_by_name(name) is None:
                uri = mlflow.get_tracking_uri()
                location = artifact_root() + f"/{name}" if uri.startswith("sqlite:") else None
                mlflow.create_experiment(name, artifact_location=location)
    return mlflow.set_experiment(name)


class StageRun:
    """Thin handle over the active child run (metric names are sanitised; NaN values are skipped)."""

    def __init__(self, mlflow, run, parent_id: str):
        self.mlflow = mlflow
        self.run = run
        self.run_id = run.info.run_id
        self.parent_id = parent_id

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        clean = {}
        for k, v in metrics.items():
            if isinstance(v, bool):
                v = float(v)
            if isinstance(v, (int, float)) and math.isfinite(float(v)):
                clean[k.replace("@", "_")] = float(v)
        if clean:
            self.mlflow.log_metrics(clean, step=step)

    def log_params(self, params: dict[str, Any]) -> None:
        flat = _flatten(params)
        for i in range(0, len(flat), 90):  # MLflow caps a batch at 100 params
            self.mlflow.log_params(dict(list(flat.items())[i : i + 90]))

    def set_tags(self, tags: dict[str, Any]) -> None:
        self.mlflow.set_tags({k: str(v) for k, v in tags.items()})

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        p = Path(path)
        if p.is_dir():
            self.mlflow.log_artifacts(str(p), artifact_path=artifact_path)
        elif p.exists():
            self.mlflow.log_artifact(str(p), artifact_path=artifact_path)

    def log_dict(self, d: dict, name: str) -> None:
        self.mlflow.log_dict(d, name)

    def log_input(self, path: str | Path, *, split: str | None = None, context: str = "training",
                  name: str | None = None):
        """Log the data set, pairs or routes at ``path`` as an input of this run (name, split, context, rows and
        the DVC content digest: ``rubricflow.tracking.inputs``); returns the ``DataInput`` logged, or None for a
        path that does not exist (the stage's reader reports it, naming the command that makes it)."""
        from rubricflow.tracking.inputs import log_data_input

        if not Path(path).exists():
            return None

        return log_data_input(self.mlflow, path, split=split, context=context, name=name)

    def event(self, name: str, payload: dict) -> None:
        """A discrete event (e.g. the curriculum transition): a tag plus a JSON artifact."""
        self.mlflow.set_tag(f"event.{name}", json.dumps(payload, default=str)[:4900])
        self.mlflow.log_dict(payload, f"events/{name}.json")


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]
    return out


def _parent_run(client, experiment_id: str, pid: str, commit: str) -> str:
    """The pipeline's parent run, created by the first stage that asks; stages starting at once on this machine
    (``rubricflow repro --jobs``) take turns, so they find one parent, not one each."""
    with _local_lock("mlflow-parent"):
        found = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{TAG_PIPELINE}` = '{pid}' and tags.`{TAG_STAGE}` = 'pipeline'",
            max_results=1,
        )
        if found:
            return found[0].info.run_id
        parent = client.create_run(experiment_id, run_name=f"pipeline {pid}",
                                   tags={TAG_PIPELINE: pid, TAG_STAGE: "pipeline", "git_commit": commit})
        return parent.info.run_id


@contextmanager
def stage_run(
    stage: str,
    experiment: str = "rubricflow",
    params: dict | None = None,
    tags: dict | None = None,
    tracking_uri: str | None = None,
    prefect_flow_run_id: str | None = None,
) -> Iterator[StageRun]:
    """Open (or reuse) the pipeline's parent run and a nested child run for ``stage``."""
    mlflow = _mlflow(tracking_uri)
    exp = ensure_experiment(mlflow, experiment)
    pid = pipeline_id()
    client = mlflow.tracking.MlflowClient()
    commit = git_commit()
    parent_id = _parent_run(client, exp.experiment_id, pid, commit)
    flow_run = prefect_flow_run_id or os.environ.get("PREFECT__FLOW_RUN_ID") or os.environ.get("RUBRICFLOW_FLOW_RUN_ID")
    child_tags = {
        TAG_PIPELINE: pid,
        TAG_STAGE: stage,
        "mlflow.parentRunId": parent_id,
        "git_commit": commit,
        # what MLflow's UI shows in its Source column (otherwise the entry script: `dvc`, Prefect's engine.py)
        "mlflow.source.name": f"rubricflow {stage}",
        **({"mlflow.source.git.commit": commit.removesuffix("-dirty")} if commit != "unknown" else {}),
        **(tags or {}),
    }
    if flow_run:
        child_tags["prefect_flow_run_id"] = flow_run
        client.set_tag(parent_id, "prefect_flow_run_id", flow_run)
    with mlflow.start_run(experiment_id=exp.experiment_id, run_name=stage, tags=child_tags) as run:
        handle = StageRun(mlflow, run, parent_id)
        if params:
            handle.log_params(params)
        yield handle


def pipeline_runs(pid: str | None = None, experiment: str = "rubricflow", tracking_uri: str | None = None):
    """(parent run, [child runs]) of a pipeline invocation (default: the current one)."""
    mlflow = _mlflow(tracking_uri)
    client = mlflow.tracking.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None, []
    pid = pid or pipeline_id()
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{TAG_PIPELINE}` = '{pid}'", max_results=500)
    parent = next((r for r in runs if r.data.tags.get(TAG_STAGE) == "pipeline"), None)
    children = sorted((r for r in runs if r.data.tags.get(TAG_STAGE) != "pipeline"), key=lambda r: r.info.start_time)
    return parent, children


def backfill_dvc_tags(pid: str | None = None, experiment: str = "rubricflow", lock_path: Path | None = None) -> int:
    """Tag each child run of the pipeline with its stage's dvc.lock hashes; returns runs tagged."""
    import mlflow

    _, children = pipeline_runs(pid, experiment)
    client = mlflow.tracking.MlflowClient()
    n = 0
    for run in children:
        tags = dvc_lock_hashes(run.data.tags.get(TAG_STAGE, ""), lock_path)
        for k, v in tags.items():
            client.set_tag(run.info.run_id, k, v)
        n += bool(tags)
    return n


def finish_parent(parent_id: str, children) -> None:
    """Close a pipeline's parent run: FAILED if any stage run failed, else FINISHED."""
    import mlflow

    failed = any(c.info.status == "FAILED" for c in children)
    mlflow.tracking.MlflowClient().set_terminated(parent_id, status="FAILED" if failed else "FINISHED")


def run_url(run_id: str, experiment_id: str | None = None, ui: str = "http://127.0.0.1:5000") -> str:
    exp = experiment_id or "0"
    return f"{ui}/#/experiments/{exp}/runs/{run_id}"
