"""`make ui` services refuse what a page in the user's browser could send them (infra/local/ui.sh): the Prefect API,
run in process with the settings the script exports, answers a cross-origin `text/plain` POST (a request CORS does
not stop from being sent) with 403 and no `access-control-allow-origin: *`; MLflow is started with its own Host
and origin only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "infra" / "local" / "ui.sh"


def ui_settings(tmp_path, **env) -> dict[str, str]:
    out = subprocess.run(["bash", str(UI), "settings"], capture_output=True, text=True, check=True,
                         env={**os.environ, "RUBRICFLOW_ROOT": str(tmp_path), **env}).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_ui_restricts_origins_and_hosts_to_its_own(tmp_path):
    s = ui_settings(tmp_path, RUBRICFLOW_PREFECT_PORT="4300", RUBRICFLOW_MLFLOW_PORT="5300")
    assert s["PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS"] == "http://127.0.0.1:4300,http://localhost:4300"
    assert s["PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED"] == "true"
    assert s["MLFLOW_ALLOWED_HOSTS"] == "127.0.0.1:5300,localhost:5300"
    assert s["MLFLOW_CORS_ORIGINS"] == "http://127.0.0.1:5300,http://localhost:5300"
    text = UI.read_text()
    assert '--allowed-hosts "$MLFLOW_ALLOWED_HOSTS" --cors-allowed-origins "$MLFLOW_CORS_ORIGINS"' in text
    assert "*" not in s["PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS"]


PROBE = """
import json
from prefect.server.api.server import create_app
from starlette.testclient import TestClient
out = {}
with TestClient(create_app(ephemeral=True)) as c:
    evil = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
    r = c.post("/api/flows/", content='{"name": "planted"}', headers=evil)
    out["evil_post"] = [r.status_code, r.headers.get("access-control-allow-origin")]
    r = c.options("/api/flows/", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    out["evil_preflight"] = [r.status_code, r.headers.get("access-control-allow-origin")]
    r = c.get("/api/health", headers={"Origin": "http://127.0.0.1:4200"})
    out["own"] = [r.status_code, r.headers.get("access-control-allow-origin")]
    r = c.post("/api/flows/filter", json={}, headers={"Origin": "http://127.0.0.1:4200"})
    out["flows"] = [f["name"] for f in r.json()] if r.status_code == 200 else r.status_code
print("PROBE " + json.dumps(out))
"""


@pytest.mark.slow
def test_the_prefect_api_of_make_ui_refuses_a_cross_origin_write(tmp_path):
    """Before: ``access-control-allow-origin: *`` and the POST created the flow."""
    env = {**os.environ, **ui_settings(tmp_path), "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{tmp_path / 'prefect.db'}"}
    env = {k: v for k, v in env.items() if not k.startswith("MLFLOW_")}
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line, res.stderr[-2000:]
    out = json.loads(line[len("PROBE "):])
    assert out["evil_post"][0] == 403 and out["evil_post"][1] is None
    assert out["evil_preflight"][1] is None
    assert out["own"] == [200, "http://127.0.0.1:4200"]
    assert "planted" not in (out["flows"] if isinstance(out["flows"], list) else [])
