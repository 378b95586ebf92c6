"""MLflow tracking: one parent run per pipeline invocation, nested child runs per stage, tags."""

import json
from pathlib import Path

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


# ----------------------------------------------------------------------------------------------------------------
# issue 41: what a training user expects of the MLflow store


def test_the_experiment_opens_in_the_model_training_view(mlflow_tmp):
    import mlflow

    with tracking.stage_run("data", experiment="kind"):
        pass
    exp = mlflow.get_experiment_by_name("kind")
    # MLflow 3's UI reads this tag (mlflow/server/js ExperimentKind); without it the experiment opens in the GenAI view
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    old = mlflow.create_experiment("made-before")  # an experiment made without the tag gets it on first use
    with tracking.stage_run("data", experiment="made-before"):
        pass
    assert mlflow.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_parent_run_ends_after_each_stage_as_under_plain_dvc_repro(mlflow_tmp):
    """No `make run` / summary / flow to close it: the parent is FINISHED after every stage, RUNNING while a stage of
    it runs, and FAILED once a stage failed."""
    import mlflow

    client = mlflow.tracking.MlflowClient(mlflow_tmp)
    with tracking.stage_run("data", experiment="ends") as r1:
        assert client.get_run(r1.parent_id).info.status == "RUNNING"
    assert client.get_run(r1.parent_id).info.status == "FINISHED"
    assert client.get_run(r1.run_id).info.status == "FINISHED"
    with tracking.stage_run("sft", experiment="ends") as r2:
        assert r2.parent_id == r1.parent_id
        assert client.get_run(r1.parent_id).info.status == "RUNNING"  # opened again by the next stage
    assert client.get_run(r1.parent_id).info.status == "FINISHED"
    with pytest.raises(RuntimeError, match="boom"):
        with tracking.stage_run("rucl", experiment="ends") as r3:
            raise RuntimeError("boom")
    assert client.get_run(r3.run_id).info.status == "FAILED"
    parent = client.get_run(r1.parent_id)
    assert parent.info.status == "FAILED" and parent.info.end_time is not None
    statuses = {r.info.status for r in client.search_runs([parent.info.experiment_id])}
    assert "RUNNING" not in statuses


def test_a_parent_stays_running_while_another_stage_of_it_runs(mlflow_tmp):
    """`rubricflow repro --jobs 2`: the stage that ends first leaves the parent RUNNING for the one still running,
    which closes it."""
    import mlflow

    client = mlflow.tracking.MlflowClient(mlflow_tmp)
    with tracking.stage_run("rucl", experiment="jobs") as first:
        exp = client.get_run(first.run_id).info.experiment_id
        other = client.create_run(exp, run_name="rucl_outcome", tags={
            "mlflow.parentRunId": first.parent_id, tracking.TAG_STAGE: "rucl_outcome",
            tracking.TAG_PIPELINE: "pipe-test-1"})  # a second process's stage, still running
    assert client.get_run(first.parent_id).info.status == "RUNNING"
    client.set_terminated(other.info.run_id, status="FINISHED")
    assert tracking.close_parent(client, first.parent_id) == "FINISHED"
    assert client.get_run(first.parent_id).info.status == "FINISHED"


def test_parent_run_carries_the_headline_metrics_of_its_children(mlflow_tmp, tmp_path):
    import mlflow

    from rubricflow.pipeline.stage import stage

    @stage("toy_train", metric_ns="train", metric_names={"accuracy_after/": "val/accuracy_after/",
                                                         "judge_failures_total": "judge/failures_total"})
    def toy(ctx) -> dict:
        return {"final/reward": 0.75, "accuracy_after": {"overall": 0.5, "count": 0.25}, "judge_failures_total": 2,
                "transition_step": None, "note": "text"}

    class Cfg:
        seed, profile, reports_dir, artifacts_dir = 1, "tiny", str(tmp_path / "reports"), str(tmp_path / "art")

        class tracking:
            experiment, tracking_uri = "heads", None

    out = toy(Cfg())
    client = mlflow.tracking.MlflowClient(mlflow_tmp)
    child = client.get_run(out["mlflow_run_id"])
    metrics = child.data.metrics
    assert metrics.pop("stage/duration_s") >= 0
    assert metrics == {"train/final/reward": 0.75, "val/accuracy_after/overall": 0.5, "val/accuracy_after/count": 0.25,
                       "judge/failures_total": 2.0}
    parent = client.get_run(child.data.tags["mlflow.parentRunId"]).data.metrics
    assert parent.pop("toy_train/stage/duration_s") >= 0
    assert parent == {f"toy_train/{k}": v for k, v in metrics.items()}


def test_dvc_experiment_name_and_baseline_are_tagged(mlflow_tmp, monkeypatch):
    import mlflow

    monkeypatch.setenv("DVC_EXP_NAME", "gusty-mink")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "5ff945b56dca0000000000000000000000000000")
    with tracking.stage_run("sft", experiment="exp") as r:
        pass
    client = mlflow.tracking.MlflowClient(mlflow_tmp)
    for run in (client.get_run(r.run_id), client.get_run(r.parent_id)):
        assert run.data.tags["dvc.exp_name"] == "gusty-mink"
        assert run.data.tags["dvc.exp_baseline"] == "5ff945b56dca0000000000000000000000000000"
    assert client.get_run(r.parent_id).info.run_name == "pipeline gusty-mink"
    monkeypatch.delenv("DVC_EXP_NAME")
    monkeypatch.delenv("DVC_EXP_BASELINE_REV")
    monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", "plain")
    with tracking.stage_run("sft", experiment="exp") as plain:
        pass
    assert not any(k.startswith("dvc.exp") for k in client.get_run(plain.run_id).data.tags)


def _store_with_an_artifact(store):
    import mlflow

    uri = f"sqlite:///{store / 'mlflow.db'}"
    with tracking.stage_run("sft", experiment="reloc", tracking_uri=uri) as r:
        r.log_dict({"hello": "store"}, "notes/hello.json")
    return r.run_id, mlflow.tracking.MlflowClient(uri).get_run(r.run_id).info.artifact_uri


def _mark_the_copy(store, run_id):
    """Change the copied store's artifact, so what is read back says which store's file it is."""
    for f in store.rglob("hello.json"):
        assert run_id in f.as_posix()
        f.write_text(json.dumps({"hello": "copy"}))
        return
    raise AssertionError(f"no artifact under the copied store {store}: the artifacts live elsewhere")


def test_a_copied_store_serves_its_own_artifacts(mlflow_tmp, tmp_path):
    import shutil

    import mlflow

    run_id, artifact_uri = _store_with_an_artifact(tmp_path / "a")
    assert artifact_uri.startswith("mlflow-artifacts:/reloc/")  # relative to the store, no absolute path
    assert (tmp_path / "a" / "artifacts" / "reloc" / run_id / "artifacts" / "notes" / "hello.json").is_file()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")  # the original is gone: the copy must not read it
    _mark_the_copy(tmp_path / "b", run_id)
    copy = f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}"
    tracking.register_store_artifacts()
    got = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="notes/hello.json", tracking_uri=copy,
                                              dst_path=str(tmp_path / "dl"))
    assert json.loads(Path(got).read_text()) == {"hello": "copy"}  # the copy's own file
    assert Path(got).resolve().is_relative_to((tmp_path / "dl").resolve())


@pytest.mark.slow
def test_mlflow_server_on_a_copied_store_serves_its_files(mlflow_tmp, tmp_path):
    """`mlflow server --artifacts-destination <copy>/artifacts` (what `make ui` runs) serves the copy's files."""
    import shutil
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    run_id, _ = _store_with_an_artifact(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    _mark_the_copy(tmp_path / "b", run_id)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(mlflow_bin), "server",
                             "--backend-store-uri", f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}",
                             "--artifacts-destination", str(tmp_path / "b" / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("mlflow server did not start") from None
                time.sleep(0.5)
        body = urllib.request.urlopen(f"{base}/get-artifact?path=notes/hello.json&run_uuid={run_id}", timeout=10).read()
        assert json.loads(body) == {"hello": "copy"}
    finally:
        import os
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_tests_use_a_temporary_store_never_the_projects(tmp_path):
    """tests/conftest.py points every test at a temporary store: a run logged with no store set up by the test
    writes its artifacts next to that store, never under the project's .rubricflow/mlflow."""
    import os

    from rubricflow.util.env import STATE_DIR

    uri = os.environ["MLFLOW_TRACKING_URI"]
    assert uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).resolve().is_relative_to(STATE_DIR)
    with tracking.stage_run("data", experiment="leak-check") as r:
        r.log_dict({"a": 1}, "a.json")
    local = tracking.store_artifacts_dir(uri)
    assert list(local.glob(f"leak-check/{r.run_id}/artifacts/a.json"))
    assert not (STATE_DIR / "mlflow" / "artifacts" / "leak-check").exists()


def test_step_and_stage_metric_names_follow_one_convention():
    from rubricflow.tracking.names import stage_names, step_names

    step = {"reward/total": 0.5, "reward/outcome": 0.25, "outcome_accuracy": 0.25, "reward/n_missing": 1.0,
            "n_missing": 1.0, "n_missing/policy": 1.0, "n_episodes/policy": 8.0, "judge/failures": 1.0,
            "curriculum/lambda_t": 0.1, "eval/overall": 0.6, "loss": 0.3}
    assert step_names(step) == {"train/reward/total": 0.5, "train/reward/outcome": 0.25,
                                "judge/missing_rewards": 1.0, "train/n_episodes/policy": 8.0,
                                "judge/failures": 1.0, "curriculum/lambda_t": 0.1, "val/overall": 0.6,
                                "train/loss": 0.3}
    two_roles = {"n_missing": 3.0, "n_missing/planner": 1.0, "n_missing/judge": 2.0, "n_episodes/planner": 4.0,
                 "n_episodes/judge": 4.0}
    assert {k: v for k, v in step_names(two_roles).items() if k.startswith("judge/")} == {
        "judge/missing_rewards": 3.0, "judge/missing_rewards/planner": 1.0, "judge/missing_rewards/judge": 2.0}
    assert stage_names({"accuracy_before/overall": 0.4, "judge_failures_total": 0.0, "duration_s": 3.0, "steps": 40},
                       "train", {"accuracy_before/": "val/accuracy_before/",
                                 "judge_failures_total": "judge/failures_total"}) == {
        "val/accuracy_before/overall": 0.4, "judge/failures_total": 0.0, "stage/duration_s": 3.0, "train/steps": 40}
    with pytest.raises(ValueError, match="in none of train, val, test"):
        stage_names({"x": 1.0}, "train", {"x": "elsewhere/x"})


def test_printed_links_open_the_model_training_view():
    """MLflow 3.17's UI picks GenAI or Model training by its `workflowType` switch (GenAI by default)."""
    assert tracking.experiment_url("3") == "http://127.0.0.1:5000/#/experiments/3?workflowType=machine_learning"
    assert tracking.run_url("abc", "3", ui="http://h:5000/") == \
        "http://h:5000/#/experiments/3/runs/abc?workflowType=machine_learning"
