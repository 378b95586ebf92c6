"""Child processes die with their parent (models.children): real signals to a real parent process whose child
(a sleeping server holding a port) has a child of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from models import children

ROOT = Path(__file__).resolve().parents[2]

# a "server": binds a port, starts a grandchild, records both pids, sleeps
SERVER = """
import socket, subprocess, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", port)); s.listen()
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(out + ".tmp", "w").write(f"{g.pid}")
import os; os.rename(out + ".tmp", out)
time.sleep(600)
"""

PARENT = """
import sys, time
sys.path.insert(0, {root!r})
from models import children
port, out, handle = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def body():
    p = children.start([sys.executable, "-c", {server!r}, port, out])
    open(out + ".child", "w").write(str(p.pid))
    time.sleep(600)
if handle:
    with children.handle_signals():
        body()
else:
    body()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return not alive(pid)


def start_parent(tmp_path, handle: bool):
    port, out = free_port(), tmp_path / "pids"
    script = PARENT.format(root=str(ROOT), server=SERVER)
    parent = subprocess.Popen([sys.executable, "-c", script, str(port), str(out), "1" if handle else "0"],
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (out.exists() and Path(str(out) + ".child").exists()):
        assert parent.poll() is None, parent.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return parent, int(Path(str(out) + ".child").read_text()), int(out.read_text()), port


def _kill_leftovers(*pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signalled_parent_stops_its_child_group_and_exits_128_plus_the_signal(tmp_path, sig):
    parent, child, grandchild, port = start_parent(tmp_path, handle=True)
    try:
        parent.send_signal(sig)
        assert parent.wait(30) == 128 + sig
        assert f"interrupted by {signal.Signals(sig).name}: stopped 1 child process group(s)" in parent.stderr.read()
        assert gone_within(child, 5) and gone_within(grandchild, 5)
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # nothing holds the port any more
    finally:
        _kill_leftovers(parent.pid, child, grandchild)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_child_dies_with_a_parent_killed_by_sigkill(tmp_path):
    parent, child, grandchild, _ = start_parent(tmp_path, handle=False)
    try:
        parent.kill()
        parent.wait(10)
        assert gone_within(child, 10)
    finally:
        _kill_leftovers(parent.pid, child, grandchild)


def test_run_stops_the_whole_group_at_its_timeout(tmp_path):
    pidfile = tmp_path / "g"
    cmd = ["sh", "-c", f"sleep 600 & echo $! > {pidfile}; wait"]
    with pytest.raises(subprocess.TimeoutExpired):
        children.run(cmd, timeout_s=1)
    assert gone_within(int(pidfile.read_text()), 5)
    assert children.live() == []
    done = children.run([sys.executable, "-c", "print('ok')"], timeout_s=30)
    assert (done.returncode, done.stdout) == (0, "ok\n")


def test_an_earlier_handler_gets_the_signal_after_the_children_are_stopped():
    """An orchestrator's handler (Prefect's, in a flow-run process) keeps deciding what the signal means."""
    seen = []

    def orchestrator(signum, frame):
        seen.append((signum, [p.pid for p in children.live()]))
        raise KeyError("orchestrator says stop")

    before = signal.signal(signal.SIGTERM, orchestrator)
    try:
        with children.handle_signals():
            p = children.start([sys.executable, "-c", "import time; time.sleep(600)"])
            with pytest.raises(KeyError, match="orchestrator says stop"):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler runs at the next bytecode
        assert seen == [(signal.SIGTERM, [])]  # the children were stopped before it ran
        assert p.poll() is not None
    finally:
        signal.signal(signal.SIGTERM, before)


def test_handle_signals_restores_the_previous_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with children.handle_signals():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


STAGE = """
import sys, time, types
sys.path.insert(0, {root!r})
from models import children
from rubricflow.pipeline.stage import stage

@stage("sleeper")
def sleeper(ctx):
    p = children.start([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(p.pid))
    time.sleep(600)
    return {{}}

cfg = types.SimpleNamespace(seed=0, profile="tiny", reports_dir=sys.argv[2], artifacts_dir=sys.argv[2])
sleeper(cfg, track=False)
"""


def test_every_stage_stops_its_children_on_sigterm(tmp_path):
    pidfile = tmp_path / "child"
    proc = subprocess.Popen([sys.executable, "-c", STAGE.format(root=str(ROOT)), str(pidfile), str(tmp_path)],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() or not pidfile.read_text():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        child = int(pidfile.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
        assert gone_within(child, 5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
