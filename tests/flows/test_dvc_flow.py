"""A pipeline flow in a git + DVC project runs DVC's stages (tasks/dvc_stages.py), in a throw-away project in tmp.

The project: the real params.yaml, and a dvc.yaml of four cheap stages in a diamond (a -> b, a -> c, b + c -> d)
that read ``data.seed``; a registered toy pipeline names them. Checked:
* the flow runs every stage through DVC, and the Prefect task runs carry DVC's edges (``wait_for`` = the DAG);
* a second run: DVC says every stage is unchanged (Prefect and DVC share one notion of up to date);
* a run with an override is a DVC experiment: the main workspace's tracked outputs, ``dvc.lock``, ``params.yaml``
  and ``dvc status`` stay as they were, and ``dvc exp show`` lists the experiment with the changed key.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops_helpers import ROOT

pytestmark = pytest.mark.slow

STAGES = ("toy_a", "toy_b", "toy_c", "toy_d")
EDGES = {("toy_a", "toy_b"), ("toy_a", "toy_c"), ("toy_b", "toy_d"), ("toy_c", "toy_d")}
PY = "python -c"
DVC_YAML = f"""
stages:
  toy_a:
    cmd: {PY} "import yaml; s = yaml.safe_load(open('params.yaml'))['data']['seed']; open('a.txt', 'w').write(str(s))"
    params: [data.seed]
    outs: [a.txt]
  toy_b:
    cmd: {PY} "open('b.txt', 'w').write(open('a.txt').read() + 'b')"
    deps: [a.txt]
    outs: [b.txt]
  toy_c:
    cmd: {PY} "open('c.txt', 'w').write(open('a.txt').read() + 'c')"
    deps: [a.txt]
    outs: [c.txt]
  toy_d:
    cmd: {PY} "open('d.txt', 'w').write(open('b.txt').read() + open('c.txt').read())"
    deps: [b.txt, c.txt]
    outs: [d.txt]
"""


def _git(proj: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=proj, check=True, capture_output=True, text=True).stdout


def _dvc(proj: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=proj, capture_output=True, text=True)
    assert proc.returncode == 0, f"dvc {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture
def dvc_project(tmp_path, monkeypatch, register_method):
    from rubricflow import registry
    from rubricflow.pipeline.stage import stage

    def noop(ctx) -> dict:
        """A stage DVC runs (its command is in the project's dvc.yaml)."""
        return {}

    register_method(registry.Method(
        "dagtoy", "dagtoy", stages=tuple(stage(s)(noop) for s in STAGES),
        pipelines=(registry.Pipeline("dagtoy", "four DVC stages in a diamond", STAGES, compare="toy_d"),)))
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(ROOT / "params.yaml", proj / "params.yaml")
    (proj / "dvc.yaml").write_text(DVC_YAML)
    (proj / ".gitignore").write_text(".rubricflow/\n")  # as in the project: run logs and state stay untracked
    _git(proj, "init", "-q")
    _git(proj, "config", "user.email", "test@example.invalid")
    _git(proj, "config", "user.name", "test")
    _dvc(proj, "init", "-q")
    _git(proj, "add", "-A")
    _git(proj, "commit", "-qm", "toy project")
    monkeypatch.chdir(proj)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RUBRICFLOW_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))
    monkeypatch.delenv("RUBRICFLOW_PIPELINE_ID", raising=False)
    return proj


def _toy_flow():
    from prefect import flow
    from prefect.task_runners import ThreadPoolTaskRunner

    from tasks.pipeline import run_pipeline

    @flow(name="dagtoy", task_runner=ThreadPoolTaskRunner(max_workers=2))
    def dagtoy(overrides: dict | None = None, until: str | None = None) -> dict:
        return run_pipeline("dagtoy", "tiny", overrides or {}, until, track=False)

    return dagtoy


def _task_edges(flow_run_id: str) -> set[tuple[str, str]]:
    """(upstream, downstream) task-run names of a flow run, from the task runs' recorded inputs (Prefect's graph)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as c:
        runs = c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    names = {r.id: r.name for r in runs}
    edges = set()
    for r in runs:
        for inp in r.task_inputs.get("wait_for", []):
            edges.add((names[inp.id], r.name))
    return edges


def test_flow_runs_dvc_stages_as_a_linked_graph_then_dvc_says_unchanged(prefect_api, dvc_project):
    dagtoy = _toy_flow()
    first = dagtoy()
    assert first["stages"] == {s: "ran" for s in STAGES}, first["stages"]
    assert first["dvc_experiment"] is None
    assert (dvc_project / "d.txt").read_text() == "1234b1234c"
    # DVC wrote the lock entries: the workspace is up to date in DVC's eyes
    assert "up to date" in _dvc(dvc_project, "status")
    # the Prefect graph has exactly the stage DAG's edges
    edges = _task_edges(first["flow_run_id"])
    print("\nPrefect task graph edges:", sorted(edges))
    assert edges == EDGES

    second = dagtoy()
    assert second["stages"] == {s: "unchanged" for s in STAGES}, second["stages"]


def test_flow_with_an_override_is_a_dvc_experiment_and_leaves_the_workspace_alone(prefect_api, dvc_project):
    dagtoy = _toy_flow()
    dagtoy()  # the main workspace, up to date
    _git(dvc_project, "add", "-A")
    _git(dvc_project, "commit", "-qm", "pipeline run")
    before = {p: (dvc_project / p).read_text() for p in ("a.txt", "d.txt", "dvc.lock", "params.yaml")}

    out = dagtoy(overrides={"data.seed": 7})
    assert out["stages"] == {s: "ran" for s in STAGES}, out["stages"]
    name = out["dvc_experiment"]
    assert name and name.startswith("prefect-")
    # the main workspace: same outputs, lock and params; DVC and git both say nothing changed
    assert {p: (dvc_project / p).read_text() for p in before} == before
    assert "up to date" in _dvc(dvc_project, "status")
    assert _git(dvc_project, "status", "--porcelain").strip() == ""
    assert _git(dvc_project, "worktree", "list").count("\n") == 1  # the experiment's worktree is gone
    # the experiment: listed by DVC with the changed key, its outputs in the cache (`dvc exp apply` restores them)
    shown = json.loads(_dvc(dvc_project, "exp", "show", "--json"))
    exps = [e for rev in shown for e in (rev.get("experiments") or [])]
    mine = [e for e in exps if e.get("name") == name]
    assert mine, shown
    params = mine[0]["revs"][0]["data"]["params"]["params.yaml"]["data"]
    assert params["data"]["seed"] == 7
    _dvc(dvc_project, "exp", "apply", name)
    assert (dvc_project / "d.txt").read_text() == "7b7c"


def test_an_override_run_until_a_stage_saves_the_stages_it_ran(prefect_api, dvc_project):
    """A fresh project, a run with an override up to toy_b: the later stages' outputs never existed; the experiment
    holds what ran, and the main workspace still has no outputs at all."""
    out = _toy_flow()(overrides={"data.seed": 5}, until="toy_b")
    assert out["stages"] == {"toy_a": "ran", "toy_b": "ran"}, out["stages"]
    assert out["dvc_experiment"]
    assert not [p for p in ("a.txt", "b.txt", "dvc.lock") if (dvc_project / p).exists()]
    assert out["dvc_experiment"] in _dvc(dvc_project, "exp", "list")


def test_a_failed_stage_fails_the_flow_and_its_dependents_do_not_start(prefect_api, dvc_project):
    (dvc_project / "dvc.yaml").write_text(DVC_YAML.replace("open('b.txt', 'w')", "1/0; open('b.txt', 'w')"))
    _git(dvc_project, "commit", "-qam", "b fails")
    dagtoy = _toy_flow()
    from tasks.dvc_stages import DvcStageFailed

    with pytest.raises(DvcStageFailed, match="toy_b"):
        dagtoy()
    assert not (dvc_project / "d.txt").exists()
    assert os.environ.get("RUBRICFLOW_PIPELINE_ID") is None


def test_a_flow_run_is_refused_while_a_repro_holds_the_workspace(prefect_api, dvc_project):
    from rubricflow.pipeline.workspace import ProjectLock, ReproBusy

    with ProjectLock(dvc_project / ".rubricflow" / "repro.lock"):
        with pytest.raises(ReproBusy, match="another rubricflow repro"):
            _toy_flow()()
    assert not (dvc_project / "a.txt").exists()
