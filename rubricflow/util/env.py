"""Process environment for every rubricflow entry point.

All tool caches and state live inside the project folder (nothing in $HOME) and telemetry is off. This module
is imported first by the CLI, the flows and the tests, before torch, prefect or mlflow are imported, so the
variables take effect. Values the user already exported win (``setdefault``), so a cluster can point the same
variables elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

# The project root: the folder holding pyproject.toml (this file is rubricflow/util/env.py).
PROJECT_ROOT = Path(os.environ.get("RUBRICFLOW_ROOT", Path(__file__).resolve().parents[2]))
STATE_DIR = PROJECT_ROOT / ".rubricflow"


def _defaults() -> dict[str, str]:
    s = STATE_DIR
    return {
        # Prefect: home, local SQLite db and telemetry.
        "PREFECT_HOME": str(s / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        # ...but what a stage or a study unit prints (``log_prints``: its progress lines, e.g. a warm start's bars per
        # block) is logged by the run loggers at INFO: shown on the console (a Ray worker's reaches the driver's) and
        # in the Prefect UI, where at WARNING it was dropped
        "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
        "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "INFO",
        # MLflow: embedded SQLite store in the project, telemetry off.
        "MLFLOW_TRACKING_URI": f"sqlite:///{s / 'mlflow' / 'mlflow.db'}",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_ENABLE_ASYNC_LOGGING": "false",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        # DVC and Great Expectations.
        "DVC_NO_ANALYTICS": "1",
        "DVC_SITE_CACHE_DIR": str(s / "dvc-site-cache"),
        "GX_ANALYTICS_ENABLED": "false",
        # Torch / DeepSpeed compiled-op caches, HF caches (never the hub at run time).
        "TORCH_EXTENSIONS_DIR": str(s / "torch_extensions"),
        "TRITON_CACHE_DIR": str(s / "triton"),
        "HF_HOME": str(s / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_CACHE_ROOT": str(s / "vllm"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "MPLCONFIGDIR": str(s / "matplotlib"),
        "XDG_CACHE_HOME": str(s / "cache"),
        # Threads: set explicitly (see configure_threads); BLAS pools follow.
        "OMP_NUM_THREADS": os.environ.get("RUBRICFLOW_THREADS", "1"),
        "MKL_NUM_THREADS": os.environ.get("RUBRICFLOW_THREADS", "1"),
    }


def setup_environment() -> None:
    """Set project-local cache/state variables (idempotent; exported values win)."""
    for key, value in _defaults().items():
        os.environ.setdefault(key, value)
    for key in ("PREFECT_HOME", "DVC_SITE_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "HF_HOME", "MPLCONFIGDIR"):
        Path(os.environ[key]).mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "mlflow").mkdir(parents=True, exist_ok=True)


def thread_count_from_env() -> int:
    """``$RUBRICFLOW_THREADS`` as a positive integer (1 when unset); ValueError naming the variable otherwise."""
    raw = os.environ.get("RUBRICFLOW_THREADS")
    if raw is None:
        return 1
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"RUBRICFLOW_THREADS: expected a positive integer, got {raw!r}")
    return n


def configure_threads(n: int | None = None) -> int:
    """Set torch's intra-op threads explicitly (default: $RUBRICFLOW_THREADS or 1).

    On a small machine with any other load, more torch threads are much slower than one (the measurement is in
    docs/operations.md, "Measurements behind defaults"), so tests, CI and benchmarks use 1 unless told otherwise.
    Raises ValueError naming the option or the variable when the count is not a positive integer.
    """
    if n is None:
        n = thread_count_from_env()
    elif isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads: expected a positive integer, got {n!r}")
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set once in this process
        pass
    return n


setup_environment()
