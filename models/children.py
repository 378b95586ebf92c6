"""Every child process the project starts (vLLM servers, ``pip``), under one discipline: it dies with its stage.

* :func:`start` runs the command in its own process group (a new session: a terminal's Ctrl-C reaches only the
  parent, which decides) and, on Linux, with ``PR_SET_PDEATHSIG``: the kernel sends the child SIGTERM when the
  thread that started it ends, the parent's death by SIGKILL included. The child is registered until stopped.
* :func:`stop` sends SIGTERM to the child's whole group, then SIGKILL after a grace period; :func:`stop_all`
  stops every registered child (also at interpreter exit).
* :func:`run` is ``subprocess.run`` under that discipline, with a timeout that stops the group.
* :func:`handle_signals` (a context manager, effective in the main thread only) turns SIGTERM, SIGHUP and SIGINT
  into: stop every child group, print one line, exit with ``128 + signal`` (or, where a handler of the process's
  own was installed before, such as Prefect's, stop the children and hand the signal to it). The stage framework
  enters it around every stage (``rubricflow.pipeline.stage``), so ``smol-judge`` cancelled by Prefect (SIGTERM) or
  a closed terminal (SIGHUP) leaves no server holding its port, during start-up too.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence

HANDLED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
PR_SET_PDEATHSIG = 1

_live: dict[int, subprocess.Popen] = {}
_lock = threading.Lock()
_prctl = None
if sys.platform.startswith("linux"):  # resolved here: the child only calls it (no loader work after fork)
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _prctl = None


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def start(cmd: Sequence[str], **kw) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kw)`` in a process group of its own, killed with its parent (Linux), registered
    for :func:`stop_all`."""
    kw.pop("start_new_session", None)
    proc = subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=_set_pdeathsig, **kw)
    with _lock:
        _live[proc.pid] = proc
    return proc


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM to the child's group, SIGKILL after ``grace_s``; the child is reaped and unregistered."""
    with _lock:
        _live.pop(proc.pid, None)
    if proc.poll() is None:
        _killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    _killpg(proc.pid, signal.SIGKILL)  # what the leader left behind in its group


def live() -> list[subprocess.Popen]:
    with _lock:
        return list(_live.values())


def stop_all(grace_s: float = 10.0) -> int:
    """Stop every registered child; returns how many were running."""
    procs = live()
    for p in procs:
        stop(p, grace_s)
    return len(procs)


atexit.register(stop_all)


def run(cmd: Sequence[str], *, timeout_s: float, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)`` with the child in its own group:
    on the timeout (``subprocess.TimeoutExpired``) or any exception the whole group is stopped."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    proc = start(cmd, **kw)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        stop(proc, grace_s=5)
        raise
    stop(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class Interrupted(SystemExit):
    """The process got SIGTERM, SIGHUP or SIGINT: its children are stopped and it exits with ``128 + signal``."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP/SIGINT stop every child group and raise :class:`Interrupted`; the previous
    handlers come back afterwards. Outside the main thread (a Prefect task thread) it does nothing: the process's
    own handling applies, and ``PR_SET_PDEATHSIG`` still takes the children down with it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    previous: dict = {}

    def on_signal(signum, frame):
        n = stop_all()
        name = signal.Signals(signum).name
        before = previous.get(signum)
        if callable(before) and before is not signal.default_int_handler:
            # an orchestrator's own handler (Prefect reports the run as cancelled or crashed): it decides
            print(f"interrupted by {name}: stopped {n} child process group(s)", file=sys.stderr, flush=True)
            before(signum, frame)
            return
        print(f"interrupted by {name}: stopped {n} child process group(s); exiting with {128 + signum}",
              file=sys.stderr, flush=True)
        raise Interrupted(signum)

    previous.update({s: signal.signal(s, on_signal) for s in HANDLED})
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) == 0
