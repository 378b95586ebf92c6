"""MLflow tracking: one parent run per pipeline invocation, nested child runs per stage, tags."""

import pytest

from rubricflow import tracking


@pytest.fixture
def mlflow_tmp(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", "pipe-test-1")
    return uri


def test_stages_of_one_pipeline_share_a_parent(mlflow_tmp, monkeypatch, tmp_path):
    with tracking.stage_run("data", experiment="t", params={"data": {"seed": 3}}) as r1:
        r1.log_metrics({"n": 5, "skip": float("nan"), "flag": True})
    with tracking.stage_run("sft", experiment="t", prefect_flow_run_id="fr-123") as r2:
        r2.event("curriculum_transition", {"step": 4, "window": [0.95, 0.97]})
    assert r1.parent_id == r2.parent_id
    parent, children = tracking.pipeline_runs("pipe-test-1", experiment="t")
    assert parent.info.run_id == r1.parent_id
    assert [c.data.tags["rubricflow.stage"] for c in children] == ["data", "sft"]
    data_run, sft_run = children
    assert data_run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert data_run.data.params["data.seed"] == "3"
    assert data_run.data.metrics == {"n": 5.0, "flag": 1.0}  # NaN skipped
    assert sft_run.data.tags["prefect_flow_run_id"] == "fr-123"
    assert '"step": 4' in sft_run.data.tags["event.curriculum_transition"]
    assert len(data_run.data.tags["git_commit"]) >= 7
    assert data_run.data.tags["mlflow.source.name"] == "rubricflow data"
    assert data_run.data.tags["mlflow.source.git.commit"] == data_run.data.tags["git_commit"].removesuffix("-dirty")

    monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", "pipe-test-2")
    with tracking.stage_run("data", experiment="t") as r3:
        pass
    assert r3.parent_id != r1.parent_id


def test_backfill_dvc_lock_hashes(mlflow_tmp, tmp_path):
    lock = tmp_path / "dvc.lock"
    lock.write_text(
        "schema: '2.0'\nstages:\n  data:\n    cmd: rubricflow data\n"
        "    deps:\n    - path: rubricflow/data/synthetic.py\n      md5: abc123\n"
        "    outs:\n    - path: data/synthetic\n      md5: def456.dir\n"
    )
    with tracking.stage_run("data", experiment="t2"):
        pass
    assert tracking.backfill_dvc_tags("pipe-test-1", experiment="t2", lock_path=lock) == 1
    _, (child,) = tracking.pipeline_runs("pipe-test-1", experiment="t2")
    assert child.data.tags["dvc.dep.rubricflow/data/synthetic.py"] == "abc123"
    assert child.data.tags["dvc.out.data/synthetic"] == "def456.dir"


def _first_contact(uri: str, out: str) -> None:
    """One fresh process: open the store the way a stage or a study unit does, then record what it sees."""
    import mlflow

    from rubricflow import tracking

    tracking._mlflow(uri)
    with open(out, "w") as f:
        f.write(",".join(sorted(e.name for e in mlflow.search_experiments())))


def test_processes_opening_a_new_sqlite_store_at_once_all_get_it(tmp_path):
    """Study units on a local Ray cluster open the same new SQLite store at once; MLflow's table creation is not
    safe against that (alembic: "table _alembic_tmp_params already exists"), so the first contact is serialised."""
    import multiprocessing as mp

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_first_contact, args=(uri, str(tmp_path / f"seen{i}"))) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert [(tmp_path / f"seen{i}").read_text() for i in range(4)] == ["Default"] * 4
