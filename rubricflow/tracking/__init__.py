"""MLflow tracking: one parent run per pipeline invocation, one nested child run per stage.

A *pipeline invocation* is one ``make run`` / ``dvc repro`` / Prefect flow run. Stages run as separate processes
under DVC, so they find their parent by a pipeline id tag:

1. ``$RUBRICFLOW_PIPELINE_ID`` if set (``make run`` and the Prefect flows set it), else
2. the id of the enclosing ``dvc repro`` process (pid + start time, read from /proc), else
3. a fresh id (a stage run by hand is its own pipeline).

Child runs are tagged with the git commit, the profile and the Prefect flow-run id when running under Prefect
(``$PREFECT__FLOW_RUN_ID``, set by Prefect for its runs, or the ``prefect_flow_run_id`` argument the tasks
layer passes), and, under ``dvc exp run``, with the DVC experiment's name and baseline revision (``dvc.exp_name``,
``dvc.exp_baseline``; the parent too). DVC writes ``dvc.lock`` only after a stage succeeds, so the stage's lock hashes
are added after ``dvc repro`` by ``backfill_dvc_tags`` (``rubricflow summary``, which ``make run`` calls).

Every run ends: a stage's child run ends with the stage (FAILED when it raised), and the parent is closed after each
stage (:func:`close_parent`): FINISHED, or FAILED when a stage of the pipeline failed, unless a stage of it still
runs; the next stage of the same pipeline opens it again. So a plain ``dvc repro`` or ``dvc exp run`` leaves no run
RUNNING. The parent carries its children's end-of-stage metrics as ``<stage>/<metric>`` (:meth:`StageRun.log_summary`).

The experiment is tagged ``mlflow.experimentKind = custom_model_development`` (:data:`EXPERIMENT_KIND`), the
experiment kind MLflow 3's UI reads; MLflow 3.17's UI chooses the view by its global GenAI / Model training switch, so
the links printed here (:func:`experiment_url`, :func:`run_url`) carry ``?workflowType=machine_learning`` and open the
model-training view (runs table and charts).

Artifacts of a local SQLite store are relocatable: an experiment created here stores its artifacts under
``mlflow-artifacts:/<experiment>``, which this process resolves to the ``artifacts/`` folder next to the database
(:func:`store_artifacts_dir`) and ``mlflow server --artifacts-destination <that folder>`` serves, so a copied or moved
store folder serves its own files. ``RUBRICFLOW_MLFLOW_ARTIFACTS`` set to a folder keeps the older absolute layout.
"""

from __future__ import annotations

import json
import math
import os
import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from filelock import FileLock

from rubricflow.tracking.inputs import log_data_input
from rubricflow.tracking.names import step_names
from rubricflow.util.env import PROJECT_ROOT, STATE_DIR

TAG_PIPELINE = "rubricflow.pipeline_id"
TAG_STAGE = "rubricflow.stage"
# MLflow 3's UI reads this experiment tag to pick its view (mlflow/server/js: ExperimentKind); this value is the
# model-training view (runs table, charts), the default when the tag is missing is the GenAI view
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
ARTIFACTS_SCHEME = "mlflow-artifacts"


def git_commit(root: Path = PROJECT_ROOT) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True,
            timeout=10,
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
    register_store_artifacts()
    init_store(uri)
    mlflow.set_tracking_uri(uri)
    return mlflow


def store_artifacts_dir(tracking_uri: str) -> Path | None:
    """The artifacts folder of a local SQLite store (``artifacts/`` next to its database file); None for any other
    tracking URI."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return Path(tracking_uri[len("sqlite:///"):].split("?", 1)[0]).parent.resolve() / "artifacts"


def _store_artifact_repo(artifact_uri: str, tracking_uri: str | None = None, registry_uri: str | None = None):
    """``mlflow-artifacts:/<path>`` of a local SQLite store as the folder ``<store>/artifacts/<path>``; through the
    tracking server as MLflow does for every other tracking URI."""

    import mlflow
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository
    from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository

    local = store_artifacts_dir(tracking_uri or mlflow.get_tracking_uri())
    if local is None:
        return MlflowArtifactsRepository(artifact_uri, tracking_uri=tracking_uri, registry_uri=registry_uri)
    rel = urlparse(artifact_uri).path.lstrip("/")
    if ".." in Path(rel).parts:
        raise ValueError(f"artifact URI {artifact_uri!r} leaves the store's artifacts folder {local}")
    return LocalArtifactRepository(str(local / rel), tracking_uri=tracking_uri, registry_uri=registry_uri)


def register_store_artifacts() -> None:
    """Let this process read and write ``mlflow-artifacts:/`` URIs of a local SQLite store without a server
    (:func:`_store_artifact_repo`); other tracking URIs are unchanged."""
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry

    _artifact_repository_registry.register(ARTIFACTS_SCHEME, _store_artifact_repo)


def artifact_root() -> str:
    """The artifact root of experiments created in a local SQLite store: ``mlflow-artifacts:`` (relative to the
    store, so a copied store serves its own files), or the folder ``RUBRICFLOW_MLFLOW_ARTIFACTS`` names (absolute)."""
    root = os.environ.get("RUBRICFLOW_MLFLOW_ARTIFACTS")
    if not root:
        return f"{ARTIFACTS_SCHEME}:"
    return root if "://" in root else Path(root).resolve().as_uri()


def _local_lock(name: str):
    """A lock shared by this project's processes on this machine (stages run at once by ``rubricflow repro``)."""
    return _file_lock(STATE_DIR / f"{name}.lock")


def ensure_experiment(mlflow, name: str):
    """The experiment ``name`` (created if missing, tagged with :data:`EXPERIMENT_KIND`), made the active one."""
    exp = mlflow.get_experiment_by_name(name)
    if exp is None:
        with _local_lock("mlflow-experiment"):
            if mlflow.get_experiment_by_name(name) is None:
                uri = mlflow.get_tracking_uri()
                location = artifact_root() + f"/{name}" if uri.startswith("sqlite:") else None
                mlflow.create_experiment(name, artifact_location=location,
                                         tags={TAG_EXPERIMENT_KIND: EXPERIMENT_KIND})
    elif exp.tags.get(TAG_EXPERIMENT_KIND) is None:  # made before the tag existed
        mlflow.tracking.MlflowClient().set_experiment_tag(exp.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND)
    return mlflow.set_experiment(name)


def dvc_experiment_tags() -> dict[str, str]:
    """``dvc.exp_name`` and ``dvc.exp_baseline`` under ``dvc exp run`` (DVC sets ``DVC_EXP_NAME`` and
    ``DVC_EXP_BASELINE_REV`` for the stages it runs); empty otherwise."""
    out = {}
    for tag, var in (("dvc.exp_name", "DVC_EXP_NAME"), ("dvc.exp_baseline", "DVC_EXP_BASELINE_REV")):
        if os.environ.get(var):
            out[tag] = os.environ[var]
    return out


def _clean(metrics: dict[str, Any]) -> dict[str, float]:
    """Finite numbers (booleans as 0/1) under names MLflow accepts; NaN, None and text are left out."""
    clean = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            clean[k.replace("@", "_")] = float(v)
    return clean


class StageRun:
    """Thin handle over the active child run (metric names are sanitised; NaN values are skipped)."""

    def __init__(self, mlflow, run, parent_id: str, stage: str | None = None):
        self.mlflow = mlflow
        self.run = run
        self.run_id = run.info.run_id
        self.parent_id = parent_id
        self.stage = stage or run.info.run_name

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Log ``metrics``; with a ``step``, a training loop's, named by ``rubricflow.tracking.names.step_names``
        (``train/``, ``val/``, ``judge/``, ``curriculum/``)."""
        clean = _clean(metrics)
        if step is not None:

            clean = step_names(clean)
        if clean:
            self.mlflow.log_metrics(clean, step=step)

    def log_summary(self, metrics: dict[str, Any]) -> None:
        """The stage's end-of-run metrics: on this run, and on the pipeline's parent run as ``<stage>/<metric>``
        (the parent's row in the runs table and its charts show every stage's headline numbers)."""
        clean = _clean(metrics)
        if not clean:
            return
        self.mlflow.log_metrics(clean)
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(f"{self.stage}/{k}", v, now, 0) for k, v in clean.items()]
        client = self.mlflow.tracking.MlflowClient()
        for i in range(0, len(batch), 1000):  # MLflow caps a batch at 1000 metrics
            client.log_batch(self.parent_id, metrics=batch[i : i + 1000])

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


def _parent_run(client, experiment_id: str, pid: str, commit: str, tags: dict[str, str] | None = None) -> str:
    """The pipeline's parent run, created by the first stage that asks and opened again (RUNNING) by each later
    one; stages starting at once on this machine (``rubricflow repro --jobs``) take turns, so they find one parent,
    not one each."""
    with _local_lock("mlflow-parent"):
        found = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{TAG_PIPELINE}` = '{pid}' and tags.`{TAG_STAGE}` = 'pipeline'",
            max_results=1,
        )
        if found:
            if found[0].info.status != "RUNNING":
                client.update_run(found[0].info.run_id, status="RUNNING")
            return found[0].info.run_id
        name = f"pipeline {(tags or {}).get('dvc.exp_name') or pid}"
        parent = client.create_run(experiment_id, run_name=name,
                                   tags={TAG_PIPELINE: pid, TAG_STAGE: "pipeline", "git_commit": commit,
                                         **(tags or {})})
        return parent.info.run_id


def close_parent(client, parent_id: str, pid: str | None = None) -> str:
    """End the pipeline's parent run after one of its stages ended: FAILED when a stage of the pipeline failed,
    else FINISHED; left RUNNING while another of its stages still runs (that stage closes it). Returns its status."""
    with _local_lock("mlflow-parent"):
        parent = client.get_run(parent_id)
        pid = pid or parent.data.tags.get(TAG_PIPELINE)
        children = client.search_runs([parent.info.experiment_id],
                                      filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'", max_results=1000)
        statuses = {c.info.status for c in children}
        if "RUNNING" in statuses:
            return parent.info.status
        status = "FAILED" if statuses & {"FAILED", "KILLED"} else "FINISHED"
        client.set_terminated(parent_id, status=status)
        return status


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
    dvc_tags = dvc_experiment_tags()
    parent_id = _parent_run(client, exp.experiment_id, pid, commit, dvc_tags)
    flow_run = prefect_flow_run_id or os.environ.get("PREFECT__FLOW_RUN_ID") or os.environ.get("RUBRICFLOW_FLOW_RUN_ID")
    child_tags = {
        **dvc_tags,
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
    try:
        with mlflow.start_run(experiment_id=exp.experiment_id, run_name=stage, tags=child_tags) as run:
            handle = StageRun(mlflow, run, parent_id, stage)
            if params:
                handle.log_params(params)
            yield handle
    finally:  # the child has ended (FAILED if the stage raised): the parent ends too unless a sibling still runs
        try:
            close_parent(client, parent_id, pid)
        except Exception as e:  # noqa: BLE001 - never hides the stage's own outcome; said, not swallowed
            logging.getLogger("rubricflow.tracking").warning("could not end the MLflow parent run %s: %s",
                                                             parent_id, e)


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


# MLflow 3.17's UI picks its view from a global switch (the `workflowType` query parameter, else the browser's last
# choice, GenAI by default), not from the experiment's tag: the links rubricflow prints name the training view
TRAINING_VIEW = "workflowType=machine_learning"


def experiment_url(experiment_id: str, ui: str = "http://127.0.0.1:5000") -> str:
    """The experiment's runs table in the MLflow UI, in the model-training view."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}?{TRAINING_VIEW}"


def run_url(run_id: str, experiment_id: str | None = None, ui: str = "http://127.0.0.1:5000") -> str:
    exp = experiment_id or "0"
    return f"{ui.rstrip('/')}/#/experiments/{exp}/runs/{run_id}?{TRAINING_VIEW}"
