"""What a stage or a study unit prints (its progress lines) reaches the console at rubricflow's default logging
level, in a fresh process as the CLI starts one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    from rubricflow.util.env import setup_environment
    setup_environment()
    import tasks  # noqa: F401  (before prefect, as the flows import it: the server's start-up wait)
    from prefect import flow, task

    @task(log_prints=True)
    def unit():
        print("deltarubric sft: phase evidence, 200 steps: oracle 0.500")

    @flow(log_prints=True)
    def study():
        print("study: 1 unit")
        unit()

    study()
""")


def test_a_tasks_printed_progress_reaches_the_console_and_prefects_own_info_does_not(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stderr.splitlines()
    assert any(ln.endswith("- deltarubric sft: phase evidence, 200 steps: oracle 0.500") for ln in lines), lines
    assert any(ln.endswith("- study: 1 unit") for ln in lines), lines
    # the rest of Prefect stays at WARNING (no server or client chatter)
    assert not any("prefect.client" in ln or "prefect.server" in ln for ln in lines), lines
