"""``rubricflow judge-agreement``: make a labelled set, judge it, report agreement and kappa, log to MLflow."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cli import app
from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.judge import agreement as ag
from rubricflow.judge.protocol import Judgment, Verdict
from rubricflow.methods.rucl.rubrics.pool import DEFAULT_POOL_PATH, load_pool

TEXT_POOL = DEFAULT_POOL_PATH.parent / "rubric_pool_text.json"


@pytest.fixture
def mlflow_tmp(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", "pipe-agreement")
    return mlflow.tracking.MlflowClient(uri)


def test_write_labels_then_the_programmatic_judge_agrees_with_itself(tmp_path, mlflow_tmp):
    data = tmp_path / "data"
    build_synthetic_dataset(data, ["arith"], {"train": 0, "val": 0, "test": 0, "calib": 3}, 0, 56)
    labels, report = tmp_path / "labels.jsonl", tmp_path / "agreement.json"
    res = CliRunner().invoke(app, ["judge-agreement", "--write-labels", str(labels), "--data", str(data),
                                   "--rubrics", str(TEXT_POOL), "--n", "3"])
    assert res.exit_code == 0, res.output
    assert len(labels.read_text().splitlines()) == 3 * len(ag.KINDS)
    res = CliRunner().invoke(app, ["--set", "judge.cache_enabled=false", "--set", "tracking.experiment=agree",
                                   "judge-agreement", "--labels", str(labels), "--rubrics", str(TEXT_POOL),
                                   "--out", str(report)])
    assert res.exit_code == 0, res.output
    rep = json.loads(report.read_text())
    assert rep["overall"]["kappa"] == 1.0 and rep["overall"]["agree"] == 1.0
    run = mlflow_tmp.get_run(json.loads(res.output.strip().splitlines()[-1])["mlflow_run_id"])
    assert run.data.metrics["kappa"] == 1.0 and run.data.metrics["agree"] == 1.0 and run.data.metrics["failed"] == 0
    assert run.data.params["judge.backend"] == "programmatic"
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.name == "labels" and json.loads(inp.dataset.profile) == {"num_rows": 3 * len(ag.KINDS)}
    assert {t.key: t.value for t in inp.tags}["mlflow.data.context"] == "evaluation"


def test_an_always_pass_judge_logs_kappa_0(tmp_path, mlflow_tmp):
    from rubricflow import tracking
    from rubricflow.data.schema import read_dataset
    from rubricflow.judge.programmatic import ProgrammaticJudge

    class AlwaysPass:
        name, model_id = "always-pass", "const"

        def judge(self, requests):
            return [Judgment("ok", {r.id: Verdict(True, True) for r in q.rubrics}) for q in requests]

    data = tmp_path / "data"
    build_synthetic_dataset(data, ["arith"], {"train": 0, "val": 0, "test": 0, "calib": 3}, 0, 56)
    reqs = ag.probe_requests(read_dataset(data, split="calib"), list(ag.KINDS), load_pool(TEXT_POOL).rubrics)
    labels = tmp_path / "labels.jsonl"
    ag.write_labelled(labels, reqs, ProgrammaticJudge().judge(reqs))
    requests, reference = ag.read_labelled(labels, {r.id: r for r in load_pool(TEXT_POOL).rubrics})
    report = ag.evaluate_agreement(AlwaysPass(), requests, reference)
    with tracking.stage_run("judge_agreement", experiment="agree-const") as run:
        ag.log_agreement(run, report, labels)
    got = mlflow_tmp.get_run(run.run_id)
    assert got.data.metrics["kappa"] == pytest.approx(0.0)
    assert 0 < got.data.metrics["agree"] < 1  # it agrees on the passes only: chance level
    (tmp_path / "downloaded").mkdir()  # artifacts/ is the store's own folder, next to its database
    path = mlflow_tmp.download_artifacts(run.run_id, "judge_agreement.json", str(tmp_path / "downloaded"))
    logged = json.loads(open(path).read())
    assert logged["overall"] == report["overall"] and "judgments" not in logged


def test_one_of_labels_or_write_labels(tmp_path):
    res = CliRunner().invoke(app, ["judge-agreement"])
    assert res.exit_code == 2 and "exactly one of --labels" in res.output
    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"sample_id": "a", "question": "q", "response": "r", "labels": {"W01": "maybe"}}\n')
    res = CliRunner().invoke(app, ["--no-track", "judge-agreement", "--labels", str(bad), "--rubrics", str(TEXT_POOL)])
    assert res.exit_code == 1 and "labels.jsonl:1: field `labels.W01`: expected one of" in res.output


def test_a_small_set_whose_judgments_all_fail_exits_1_with_one_line(tmp_path):
    """The attack (issue 37, item 6): a labelled set of fewer than 8 lines judged by a server failing every call:
    judge-agreement wrote a report and exited 0."""
    from rubricflow.testing.judge_server import LoopbackJudgeServer

    labels, report = tmp_path / "labels.jsonl", tmp_path / "agreement.json"
    labels.write_text("".join(json.dumps({"sample_id": f"s{i}", "question": "2+2?", "response": f"\\boxed{{{i}}}",
                                          "labels": {"W01": "pass"}}) + "\n" for i in range(3)))
    with LoopbackJudgeServer(fault_all="http500") as srv:
        args = ["--no-track", "--set", "judge.backend=openai", "--set", "judge.cache_enabled=false",
                "--set", "judge.preflight=false", "--set", f"judge.openai.base_url={srv.base_url}",
                "--set", "judge.openai.model=loopback-judge", "--set", "judge.openai.max_retries=0",
                "judge-agreement", "--labels", str(labels), "--rubrics", str(TEXT_POOL), "--out", str(report)]
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]  # beside the judge's log warnings
    assert len(errors) == 1 and "3 of 3 judgments failed" in errors[0] and "Traceback" not in res.output
    assert not report.exists()
