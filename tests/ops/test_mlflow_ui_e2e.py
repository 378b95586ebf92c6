"""The MLflow UI in headless Chromium: data sets in the runs list, rubric assessments of an evaluation.

In a throw-away project: two tracked ``rucl`` stage runs log their inputs (``rubricflow.tracking.inputs``), one on
the data set that ``dvc.lock`` records (digest: the DVC hash), one on another data set (digest: the content's
SHA-256); ``mlflow.genai.evaluate`` scores seven responses with the rubric scorer on the programmatic judge, one of
them without facts (a failed judgment). ``mlflow server`` on 127.0.0.1 serves the store; Chromium (Debian's
/usr/bin/chromium driven by playwright) opens

* the runs list with the child runs expanded: the Dataset column names ``synthetic:train (<digest>)`` and
  ``synthetic:val`` of each run, the digests differ;
* the data set drawer: its row count, digest and path;
* the evaluation run's traces and one trace's assessments: one per rubric (Pass / Fail / not_applicable) and the
  score; the trace without facts carries the JUDGE_FAILED error on its assessments.

Screenshots go to test-artifacts/browser/ (gitignored; docs/images/ holds copies for docs/mlflow.md). Missing
chromium is a failure (``make test`` installs it), not a skip.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops_helpers import ROOT, free_port, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "test-artifacts" / "browser"
EXPAND = 'button[data-component-id="shared.model-trace-explorer.toggle-assessment-expanded"]'


def _text_pool() -> Path:
    from rubricflow.methods.rucl.rubrics.pool import DEFAULT_POOL_PATH

    return DEFAULT_POOL_PATH.parent / "rubric_pool_text.json"


def _rows() -> list[dict]:
    from rubricflow.data.arith import gen_arith
    from rubricflow.data.traces import render_trace

    rows = []
    for i in range(7):
        _, q, ans, _, facts = gen_arith(random.Random(i))
        gold = render_trace(facts, ans)
        response = [gold, f"\\boxed{{{int(ans) + 1}}}", gold.replace(f"\\boxed{{{ans}}}", "\\boxed{0}")][i % 3]
        rows.append({"inputs": {"question": q, "sample_id": f"s{i}"}, "outputs": response,
                     "expectations": {"answer": ans, "facts": json.dumps(facts) if i < 6 else ""}})
    return rows


def _close_assistant(page) -> None:
    """Close MLflow's assistant side panel when it is open (it covers the right of the page)."""
    if page.get_by_text("Ask questions about your experiments").first.is_visible():
        page.get_by_role("button", name="Close").last.click()


def test_datasets_and_rubric_assessments_in_the_mlflow_ui(tmp_path, monkeypatch):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"chromium not found at {CHROMIUM}: run `make install-browser` (apt-get install -y chromium); "
                    "make test installs it")
    import mlflow
    from playwright.sync_api import sync_playwright

    from rubricflow import tracking
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.methods.rucl.integrations.mlflow import build_request, rubric_scorer
    from rubricflow.judge.programmatic import ProgrammaticJudge
    from rubricflow.judge.config import JudgeConfig
    from rubricflow.methods.rucl.rubrics.pool import load_pool
    from rubricflow.tracking import inputs

    TEXT_POOL = _text_pool()
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", db)
    monkeypatch.setattr(inputs, "PROJECT_ROOT", tmp_path)
    a, b = tmp_path / "data" / "synthetic", tmp_path / "other" / "synthetic"
    sizes = {"train": 6, "val": 3, "test": 3, "calib": 2}
    build_synthetic_dataset(a, ["counting"], sizes, 0, 56)
    build_synthetic_dataset(b, ["counting"], sizes, 1, 56)
    dvc = inputs.dvc_md5(a)
    (tmp_path / "dvc.lock").write_text(f"schema: '2.0'\nstages:\n  data:\n    cmd: rubricflow data\n    outs:\n"
                                       f"    - path: data/synthetic\n      hash: md5\n      md5: {dvc}\n")
    digests = {}
    for pid, d in (("pipe-a", a), ("pipe-b", b)):
        monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", pid)
        with tracking.stage_run("rucl", experiment="rubricflow") as run:
            digests[pid] = run.log_input(d, split="train", context="training").digest
            run.log_input(d, split="val", context="evaluation")
    assert digests["pipe-a"] == dvc and digests["pipe-b"] != dvc

    mlflow.set_tracking_uri(db)
    mlflow.set_experiment("rubric-eval")
    scorer = rubric_scorer(JudgeConfig(applicability="response", cache_enabled=False), TEXT_POOL)
    rows = _rows()
    result = mlflow.genai.evaluate(data=rows, scorers=[scorer])
    s4 = rows[4]
    (judged,) = ProgrammaticJudge(applicability="response").judge(
        [build_request(s4["inputs"], s4["outputs"], s4["expectations"], load_pool(TEXT_POOL).rubrics)])
    rationale_w01 = judged.verdicts["W01"].rationale
    eval_exp = mlflow.get_experiment_by_name("rubric-eval").experiment_id
    runs_exp = mlflow.get_experiment_by_name("rubricflow").experiment_id
    traces = {json.loads(t.data.request)["sample_id"]: t.info.trace_id
              for t in mlflow.search_traces(locations=[eval_exp], run_id=result.run_id, return_type="list")}

    port = free_port()
    log = open(tmp_path / "mlflow-server.log", "w")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri", db, "--default-artifact-root",
         str(tmp_path / "artifacts"), "--artifacts-destination", str(tmp_path / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT)
    ui = f"http://127.0.0.1:{port}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots = {k: str(SHOTS / f"mlflow-{k}.png") for k in ("runs-datasets", "dataset-drawer", "eval-traces",
                                                         "trace-assessments", "trace-judge-failed")}
    try:
        wait_http(f"{ui}/health", timeout=180, proc=server)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1800, "height": 1000})
            page.set_default_timeout(60_000)

            page.goto(f"{ui}/#/experiments/{runs_exp}/runs", wait_until="domcontentloaded")
            page.get_by_text("pipeline pipe-a").first.wait_for()
            _close_assistant(page)
            for expand in page.locator('button[data-component-id*="runnamecellrenderer"]').all():
                expand.click()
            page.get_by_text("Expand rows").first.click()
            for pid in ("pipe-a", "pipe-b"):
                page.get_by_text(f"synthetic:train ({digests[pid]})").first.wait_for()
                page.get_by_text(f"synthetic:val ({digests[pid]})").first.wait_for()
            page.screenshot(path=shots["runs-datasets"], full_page=True)

            page.get_by_text(f"synthetic:train ({dvc})").first.click()
            page.get_by_text("Data details for").first.wait_for()
            drawer = page.inner_text("body")
            assert "num rows: 6" in drawer and dvc in drawer and "data/synthetic" in drawer
            page.screenshot(path=shots["dataset-drawer"], full_page=True)

            run_name = mlflow.get_run(result.run_id).info.run_name
            page.goto(f"{ui}/#/experiments/{eval_exp}/evaluation-runs", wait_until="domcontentloaded")
            page.get_by_text(run_name).first.click()
            _close_assistant(page)
            page.get_by_text("Assessments").first.wait_for()
            page.get_by_text(traces["s4"][:9]).first.wait_for()
            page.screenshot(path=shots["eval-traces"], full_page=True)

            page.get_by_text(traces["s4"][:9]).first.click()  # a bare wrong answer: fails, passes and n/a
            page.get_by_role("button", name="Assess").first.click()
            pane = page.get_by_test_id("assessments-pane")
            pane.get_by_text("Feedback (15)").first.wait_for()
            panel = pane.inner_text()
            for rid in ("W01", "W03", "W11", "score"):
                assert rid in panel
            assert "not_applicable" in panel and "Fail" in panel and "Pass" in panel
            card = pane.locator("xpath=.//span[text()='W01']/ancestor::div[3]")
            card.locator(EXPAND).first.click()  # W01 expanded: the judge's rationale
            card.get_by_text(rationale_w01).first.wait_for()
            page.screenshot(path=shots["trace-assessments"], full_page=True)

            page.keyboard.press("Escape")
            page.goto(f"{ui}/#/experiments/{eval_exp}/evaluation-runs", wait_until="domcontentloaded")
            page.get_by_text(run_name).first.click()
            page.get_by_text(traces["s6"][:9]).first.click()  # no facts: the programmatic judge fails it
            page.get_by_role("button", name="Assess").first.click()
            pane = page.get_by_test_id("assessments-pane")
            pane.get_by_text("Feedback (15)").first.wait_for()
            panel = pane.inner_text()
            assert panel.count("Error") >= 15 and "Pass" not in panel and "Fail" not in panel  # errors, no verdicts
            # W01 expanded: the error's code and message
            pane.locator(EXPAND).first.click()
            pane.get_by_text("no ground-truth facts").first.wait_for()
            page.screenshot(path=shots["trace-judge-failed"], full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    for what, path in shots.items():
        assert Path(path).stat().st_size > 10_000, what
        print(f"screenshot ({what}): {path}")
