"""End to end through the UIs: `make ui`'s script, a deployment run triggered over the API, headless Chromium.

In a throw-away project (tiny sizes): ``infra/local/ui.sh start`` on free ports starts the Prefect server (its own
PREFECT_HOME), the ``rubricflow-local`` pool, the prefect.yaml deployments, a process worker and the MLflow UI.
The test triggers ``rucl/rucl-local`` with ``until=sft`` (the real flow: data, validate, base_model, sft) through
the REST API, waits for Completed, then opens in Chromium (Debian's /usr/bin/chromium driven by playwright)

* the flow-run page: name, Completed state, the report and plot artifacts in the Artifacts tab;
* the report artifact page: the rendered markdown names the stages; the plot artifact page shows the PNG;
* the MLflow UI: the experiment's run list shows the pipeline's parent run.

Screenshots go to test-artifacts/browser/ (gitignored); their paths are printed. ``ui.sh stop`` must leave
none of the started processes behind. Missing chromium is a failure (``make test`` installs it), not a skip.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.ops_helpers import ROOT, free_port, make_project, project_env

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
SHOTS = ROOT / "test-artifacts" / "browser"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]


def _ui(project: Path, env: dict, action: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "infra/local/ui.sh"), action], cwd=project, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _pids(project: Path) -> dict[str, int]:
    run = project / ".rubricflow" / "run"
    return {p.stem: int(p.read_text().split()[0]) for p in run.glob("*.pid")}


def _wait_run(api: str, flow_run_id: str, timeout: float) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        fr = httpx.get(f"{api}/flow_runs/{flow_run_id}", timeout=10).json()
        if fr["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return fr
        time.sleep(2)
    raise TimeoutError(f"flow run {flow_run_id} not finished after {timeout:.0f} s (state {fr['state']['type']})")


def test_deployment_run_visible_in_prefect_and_mlflow_uis(tmp_path):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"chromium not found at {CHROMIUM}: run `make install-browser` (apt-get install -y chromium); "
                    "make test installs it")
    from playwright.sync_api import sync_playwright

    project = make_project(tmp_path / "proj")
    pport, mport = free_port(), free_port()
    env = project_env(project, RUBRICFLOW_PREFECT_PORT=str(pport), RUBRICFLOW_MLFLOW_PORT=str(mport),
                      RUBRICFLOW_UI_TIMEOUT="300", RUBRICFLOW_MLFLOW_UI=f"http://127.0.0.1:{mport}")
    api, ui, mlflow_ui = f"http://127.0.0.1:{pport}/api", f"http://127.0.0.1:{pport}", f"http://127.0.0.1:{mport}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    timings = {}
    t0 = time.monotonic()
    started = _ui(project, env, "start", timeout=900)
    timings["ui.sh start (server, pool, deployments, worker, MLflow)"] = time.monotonic() - t0
    pids = _pids(project)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"Prefect UI  http://127.0.0.1:{pport}" in started.stdout
        assert set(pids) == {"prefect-server", "prefect-worker", "mlflow"}
        server_s = next(float(line.split()[-2]) for line in started.stdout.splitlines()
                        if line.startswith("prefect-server healthy"))
        timings["prefect server healthy"] = server_s
        # the UI pages are served (the SPA needs Accept: text/html)
        assert "<html" in httpx.get(ui, headers={"Accept": "text/html"}, timeout=10, follow_redirects=True).text.lower()

        # trigger the deployment registered from prefect.yaml, through the REST API
        dep = httpx.get(f"{api}/deployments/name/rucl/rucl-local", timeout=10).json()
        assert dep["work_pool_name"] == "rubricflow-local" and dep["parameters"] == {"profile": "tiny"}
        t1 = time.monotonic()
        # make ui turns on Prefect's CSRF protection: a write needs a token the API hands to a named client
        tok = httpx.get(f"{api}/csrf-token", params={"client": "rubricflow-e2e"}, timeout=10).json()["token"]
        csrf = {"Prefect-Csrf-Token": tok, "Prefect-Csrf-Client": "rubricflow-e2e"}
        refused = httpx.post(f"{api}/deployments/{dep['id']}/create_flow_run", timeout=10,
                             json={"parameters": {"profile": "tiny", "until": "sft"}})
        assert refused.status_code == 403, refused.text  # without the token: refused
        fr = httpx.post(f"{api}/deployments/{dep['id']}/create_flow_run", headers=csrf, timeout=10,
                        json={"parameters": {"profile": "tiny", "until": "sft"}}).json()
        done = _wait_run(api, fr["id"], timeout=600)
        timings["deployment run (trigger -> Completed, until=sft)"] = time.monotonic() - t1
        logs = (project / ".rubricflow/run/prefect-worker.log").read_text()[-3000:]
        assert done["state"]["type"] == "COMPLETED", logs
        assert (project / "reports/sft.json").exists()

        arts = httpx.post(f"{api}/artifacts/filter", headers=csrf, timeout=10,
                          json={"artifacts": {"flow_run_id": {"any_": [fr["id"]]}}}).json()
        by_key = {a["key"]: a for a in arts if a["key"]}
        assert {"rucl-report", "rucl-sft-loss-plot", "rucl-sft-loss-table",
                "sft-progress"} <= set(by_key), sorted(by_key)
        assert "| sft | ran |" in by_key["rucl-report"]["data"]

        exp = httpx.get(f"{mlflow_ui}/api/2.0/mlflow/experiments/get-by-name",
                        params={"experiment_name": "rubricflow"}, timeout=30).json()["experiment"]
        runs = httpx.post(f"{mlflow_ui}/api/2.0/mlflow/runs/search", timeout=30,
                          json={"experiment_ids": [exp["experiment_id"]], "max_results": 50}).json()["runs"]
        parent = next(r for r in runs if {"key": "rubricflow.stage", "value": "pipeline"} in r["data"]["tags"])
        assert {"key": "prefect_flow_run_id", "value": fr["id"]} in parent["data"]["tags"]
        parent_name = parent["info"]["run_name"]

        shots = {}
        with sync_playwright() as p:
            # a fresh profile directory per run (playwright passes it as --user-data-dir)
            ctx = p.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS,
                viewport={"width": 1400, "height": 1000},
            )
            page = ctx.new_page()
            # the UIs poll their APIs, so "networkidle" may never come: wait for content instead
            page.set_default_timeout(90_000)

            page.goto(f"{ui}/runs/flow-run/{fr['id']}", wait_until="domcontentloaded")
            page.get_by_text(fr["name"]).first.wait_for()
            page.get_by_text("Completed").first.wait_for()
            shots["prefect flow run"] = SHOTS / "prefect-flow-run.png"
            page.screenshot(path=shots["prefect flow run"], full_page=True)
            page.get_by_text("Artifacts", exact=True).first.click()
            page.get_by_text("rucl-report").first.wait_for()
            page.get_by_text("rucl-sft-loss-plot").first.wait_for()
            shots["prefect artifacts tab"] = SHOTS / "prefect-flow-run-artifacts.png"
            page.screenshot(path=shots["prefect artifacts tab"], full_page=True)

            page.goto(f"{ui}/artifacts/artifact/{by_key['rucl-report']['id']}", wait_until="domcontentloaded")
            page.get_by_role("heading", name="rucl run report").wait_for()
            body = page.inner_text("body")
            assert (all(s in body for s in ("data", "validate", "base_model", "sft"))
                    and parent["info"]["run_id"] in body)
            shots["prefect report artifact"] = SHOTS / "prefect-report-artifact.png"
            page.screenshot(path=shots["prefect report artifact"], full_page=True)

            page.goto(f"{ui}/artifacts/artifact/{by_key['rucl-sft-loss-plot']['id']}", wait_until="domcontentloaded")
            img = page.locator("img[src^='data:image/png']").first
            img.wait_for()
            assert img.evaluate("e => e.naturalWidth") > 100  # the PNG decoded
            shots["prefect plot artifact"] = SHOTS / "prefect-plot-artifact.png"
            page.screenshot(path=shots["prefect plot artifact"], full_page=True)

            page.goto(f"{mlflow_ui}/#/experiments/{exp['experiment_id']}/runs", wait_until="domcontentloaded")
            page.get_by_text(parent_name).first.wait_for()
            assistant = page.get_by_role("button", name="Close")  # MLflow 3's assistant side panel, if shown
            if assistant.count():
                assistant.first.click()
            # expand the pipeline's parent run: its nested stage runs appear as rows under it
            page.get_by_role("row").filter(has_text=parent_name).locator("button").first.click()
            for stage in ("data", "validate", "base_model", "sft"):
                page.get_by_role("row").filter(has=page.get_by_text(stage, exact=True)).first.wait_for()
            shots["mlflow run list"] = SHOTS / "mlflow-run-list.png"
            page.screenshot(path=shots["mlflow run list"], full_page=True)
            ctx.close()
        for what, path in shots.items():
            assert path.stat().st_size > 10_000, path
            print(f"screenshot ({what}): {path}")
    finally:
        stopped = _ui(project, env, "stop", timeout=120)
        for name, pid in pids.items():
            assert not Path(f"/proc/{pid}").exists() or "zombie" in _state(pid), (
                f"{name} (pid {pid}) survived ui.sh stop")
        assert not list((project / ".rubricflow/run").glob("*.pid")), stopped.stdout + stopped.stderr
    for k, v in timings.items():
        print(f"timing: {k}: {v:.1f} s")


def _state(pid: int) -> str:
    try:
        return "zombie" if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z" else "alive"
    except OSError:
        return "gone"
