"""``rubricflow repro`` under signals (issue 37, item 5): SIGTERM or SIGINT stops the whole process tree (repro,
``dvc repro --single-item`` and the stage command), no output is written after the signal, DVC keeps no lock entry
and writes no ``dvc.lock`` entry, the exit status is ``128 + signal`` and a rerun completes the stage. A second repro
in the same project is refused instead of truncating the first one's stage logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.ops_helpers import empty_dvc_project, project_env

DELAY_S = 6  # the stage writes its output this long after it starts

STAGE = (
    "python -c \"import os, pathlib, time; pathlib.Path('started').write_text(str(os.getpid())); "
    f"time.sleep({DELAY_S}); pathlib.Path('out.txt').write_text('done')\""
)


@pytest.fixture
def project(tmp_path):
    project = empty_dvc_project(tmp_path / "proj")
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"slow": {"cmd": STAGE, "outs": ["out.txt"]}}}))
    return project


def _env(project: Path) -> dict[str, str]:
    return project_env(project, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", DVC_NO_ANALYTICS="1")


def _start(project: Path) -> subprocess.Popen:
    # a session of its own, like a terminal's job: the test's signal reaches repro only
    return subprocess.Popen([sys.executable, "-m", "flows.cli", "repro"], cwd=project, env=_env(project),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"repro ended before the stage started: {proc.stdout.read()}")
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"the stage did not start within {timeout} s")
        time.sleep(0.05)


def _tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def _rwlock_entries(project: Path) -> dict:
    f = project / ".dvc" / "tmp" / "rwlock"
    if not f.exists():
        return {}
    lock = json.loads(f.read_text() or "{}")
    return {k: v for k, v in lock.items() if v}


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_whole_tree_and_leaves_dvc_consistent(project, sig):
    proc = _start(project)
    _wait_for(project / "started", proc)
    stage_pid = int((project / "started").read_text())
    tree = _tree(proc.pid)
    assert stage_pid in {p.pid for p in tree}, "the stage command is part of repro's tree"
    t_signal = time.monotonic()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, f"left running: {[(p.pid, p.cmdline()) for p in alive]}"
    time.sleep(max(0.0, t_signal + DELAY_S + 1 - time.monotonic()))  # past the time the stage would have written
    assert not (project / "out.txt").exists(), "the stage wrote its output after the signal"
    assert not (project / "dvc.lock").exists() or "slow" not in (yaml.safe_load((project / "dvc.lock").read_text())
                                                                   or {}).get("stages", {})
    assert _rwlock_entries(project) == {}, "DVC's lock entry was left behind"
    assert proc.returncode == 128 + sig, out
    assert f"interrupted by {sig.name}" in out

    (project / "started").unlink()
    r = subprocess.run([sys.executable, "-m", "flows.cli", "repro"], cwd=project, env=_env(project),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 ran" in r.stdout and (project / "out.txt").read_text() == "done"
    assert "slow" in yaml.safe_load((project / "dvc.lock").read_text())["stages"]


@pytest.mark.slow
def test_a_second_repro_is_refused_and_leaves_the_first_ones_log(project):
    first = _start(project)
    _wait_for(project / "started", first)
    log = project / ".rubricflow" / "logs" / "repro" / "slow.log"
    before = log.read_text()
    second = subprocess.run([sys.executable, "-m", "flows.cli", "repro"], cwd=project, env=_env(project),
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 1
    assert f"another rubricflow repro is running in this project (pid {first.pid}" in second.stderr
    assert log.read_text().startswith(before)  # not truncated
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out
    assert (project / "out.txt").read_text() == "done"
