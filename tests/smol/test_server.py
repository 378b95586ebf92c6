"""The vLLM server a stage starts: named errors, health wait, and it always stops (also when the block fails).

A stand-in "vLLM python" (a shell script running a tiny HTTP server with /health) replaces .venv-vllm here, so the
start/stop logic is tested in seconds; the real server is exercised by `rubricflow --profile smol smol-judge` and
tests/judge/test_vllm.py."""

from __future__ import annotations

import os
import socket
import stat
import sys
import time

import pytest

from models.errors import BackendUnavailable
from rubricflow.methods.smol.config import ServerConfig
from rubricflow.methods.smol.server import ServerFailed, VLLMServer, server_command

FAKE = """
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
print("fake vllm starting on", port, flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_python(tmp_path, body: str):
    script = tmp_path / "fake_server.py"
    script.write_text(body)
    py = tmp_path / "python"
    # drops the "-m vllm.entrypoints..." arguments, keeps the rest
    py.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {script} "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return py


def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_command_uses_the_cpu_settings():
    cmd = server_command(ServerConfig(port=9), "m")
    for flag in ("--enforce-eager", "--dtype", "float32", "--distributed-executor-backend", "uni"):
        assert flag in cmd
    assert cmd[cmd.index("--structured-outputs-config") + 1] == ('{"backend": "xgrammar", '
                                                                 '"disable_any_whitespace": true}')


def test_missing_vllm_env_is_named(tmp_path):
    cfg = ServerConfig(python=str(tmp_path / "nope" / "python"))
    with pytest.raises(BackendUnavailable, match=r"\.venv-vllm\) is missing; install it with `make install-vllm`"):
        with VLLMServer(cfg, model_dir(tmp_path), tmp_path / "log"):
            pass


def test_starts_waits_for_health_and_stops_even_when_the_block_fails(tmp_path):
    cfg = ServerConfig(python=str(fake_python(tmp_path, FAKE)), port=free_port(), start_timeout_s=60)
    server = VLLMServer(cfg, model_dir(tmp_path), tmp_path / "logs" / "server.log")
    with pytest.raises(RuntimeError, match="stage failed"):
        with server as url:
            assert url == f"http://127.0.0.1:{cfg.port}/v1" and server.startup_s is not None
            pid = server.proc.pid
            raise RuntimeError("stage failed")
    time.sleep(0.2)
    assert not alive(pid)  # stopped on the way out
    assert "fake vllm starting" in (tmp_path / "logs" / "server.log").read_text()  # the log is kept
    # the port is taken while something else listens there: named
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = cfg.model_copy(update={"port": s.getsockname()[1]})
        with pytest.raises(ServerFailed, match=f"port {busy.port} on 127.0.0.1 is already in use"):
            VLLMServer(busy, tmp_path / "model", tmp_path / "l").start()


def test_a_server_that_dies_reports_its_log(tmp_path):
    body = "import sys; print('CUDA not found: boom', flush=True); sys.exit(3)"
    cfg = ServerConfig(python=str(fake_python(tmp_path, body)), port=free_port(), start_timeout_s=60)
    with pytest.raises(ServerFailed, match=r"exited with 3 before it was healthy(.|\n)*boom"):
        with VLLMServer(cfg, model_dir(tmp_path), tmp_path / "server.log"):
            pass


STARTING_PARENT = """
import sys
sys.path.insert(0, {root!r})
from models.children import handle_signals
from rubricflow.methods.smol.config import ServerConfig
from rubricflow.methods.smol.server import VLLMServer
python, port, model, log = sys.argv[1:5]
with handle_signals():
    with VLLMServer(ServerConfig(python=python, port=int(port), start_timeout_s=600), model, log):
        pass
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_stage_signalled_while_its_server_starts_leaves_no_server_behind(tmp_path, sig):
    """Prefect's cancellation (SIGTERM) or a closed terminal (SIGHUP) during the server's start-up: the server's
    group is stopped, the stage exits 128 + signal, the port is free for the next run."""
    import signal
    import subprocess
    from pathlib import Path

    body = "import os, sys, time; print('pid', os.getpid(), flush=True); time.sleep(600)"  # never healthy
    py, port, log = fake_python(tmp_path, body), free_port(), tmp_path / "server.log"
    root = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen([sys.executable, "-c", STARTING_PARENT.format(root=str(root)), str(py), str(port),
                               str(model_dir(tmp_path)), str(log)], start_new_session=True)
    server_pid = None
    try:
        deadline = time.monotonic() + 120
        while server_pid is None:
            assert parent.poll() is None and time.monotonic() < deadline
            text = log.read_text() if log.exists() else ""
            server_pid = int(text.split()[1]) if text.startswith("pid ") and "\n" in text else None
            time.sleep(0.1)
        parent.send_signal(getattr(signal, sig))
        assert parent.wait(60) == 128 + getattr(signal, sig)
        for _ in range(50):
            if not alive(server_pid) or open(f"/proc/{server_pid}/stat").read().split(") ")[1][0] == "Z":
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the server {server_pid} outlived its stage")
    finally:
        for pid in (parent.pid, server_pid):
            if pid is not None and alive(pid):
                os.kill(pid, 9)
