"""``rubricflow repro``: ``dvc repro`` with independent stages run at once.

``dvc repro`` runs a pipeline's stages one after another, although the methods' chains share only their first
stages. Here DVC's own stage graph gives the order, and each stage is ``dvc --wait-for-lock repro --single-item
STAGE``: DVC still decides whether the stage changed, runs it and writes its dvc.lock entry under its repository
lock (which it releases while the stage's command runs). At most ``jobs`` stages run at once; a stage starts once
every stage it depends on has finished. Among the ready stages, the one with the longest expected path to the end
goes first (each stage's duration in this checkout's last run, kept in ``.rubricflow/repro-times.json``; before
the first run, the durations of a 2-core ``make run`` in ``infra/local/repro-times.json``; 1 s for a stage in
neither).

A failed stage stops new starts; the running stages finish and keep their outputs, and a rerun resumes where it
stopped (DVC skips the stages that did not change). Each stage's output goes to ``.rubricflow/logs/repro/<stage>.log``;
the failed stage's last lines are printed. All stages share one pipeline id, so MLflow shows them under one parent run.

Signals stop the whole tree and leave DVC consistent. Each ``dvc repro --single-item`` runs in a process group of its
own (with the stage command DVC starts in it). SIGTERM, SIGINT or SIGHUP to ``repro`` sends SIGINT to every running
group: DVC ignores SIGINT while the stage command runs, the command stops (a rubricflow stage stops its own children
and exits 130), then DVC fails the stage, writes no ``dvc.lock`` entry for it and releases its locks; before the
command started, DVC unwinds on the interrupt. A group still running after ``STOP_GRACE_S`` gets SIGTERM, then
SIGKILL. ``repro`` then exits with ``128 + signal``; a rerun resumes (DVC reruns the interrupted stages).

Opt-in pipelines (``rubricflow.pipeline.workspace.OPT_IN``: studies/dvc.yaml, smol/dvc.yaml) are hidden from DVC by the
root .dvcignore, so that ``dvc status``, ``dvc checkout`` and ``dvc exp show`` cover the main pipeline;
``rubricflow.pipeline.workspace.opt_in`` writes the untracked ``<dir>/.dvcignore`` that re-includes one, and a target in
one opts in by itself. ``exp_show_drop`` is the column
filter of ``rubricflow exps`` (the readable ``dvc exp show``).

One ``repro`` at a time per project: a second one started while the first runs is refused with the first one's pid
(``rubricflow.pipeline.workspace.ReproBusy``) before it opens a log, so it can't clobber the first run's stage logs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rubricflow.pipeline.workspace import ProjectLock, opt_in_targets
from rubricflow.util.env import PROJECT_ROOT, STATE_DIR

TIMES_FILE = STATE_DIR / "repro-times.json"
PRIOR_TIMES_FILE = PROJECT_ROOT / "infra" / "local" / "repro-times.json"
LOG_DIR = STATE_DIR / "logs" / "repro"
LOCK_FILE = STATE_DIR / "repro.lock"
UNCHANGED = "didn't change, skipping"
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE_S = 30.0  # how long an interrupted stage may take to stop before it gets SIGTERM, then SIGKILL


def _flat_keys(node, prefix: str = "") -> set[str]:
    if isinstance(node, dict) and node:
        return set().union(*(_flat_keys(v, f"{prefix}{k}.") for k, v in node.items()))
    return {prefix[:-1]} if prefix else set()


def exp_show_drop(root: Path | None = None) -> str:
    """The ``dvc exp show --drop`` regex of the readable view: the resolved copies of the params (the keys of the
    params files other than params.yaml, e.g. ``reports/params/<section>.json``, shown bare or as ``file:key``;
    params.yaml's keys stay, under the names ``-S`` takes) and the stages' file dependencies (hashes)."""

    import yaml
    from dvc.repo import Repo

    root = Path(root or Path.cwd())
    files, keys, deps = set(), set(), set()
    with Repo(str(root)) as repo:
        for d in repo.index.deps:
            if getattr(d, "PARAM_PARAMS", None) is not None and hasattr(d, "params"):
                if d.def_path != "params.yaml":
                    files.add(d.def_path)
            else:
                deps.add(d.def_path)
    for f in sorted(files):
        try:
            text = (root / f).read_text()
            keys |= _flat_keys(json.loads(text) if f.endswith(".json") else yaml.safe_load(text))
        except (OSError, ValueError, yaml.YAMLError):
            continue
    names = "|".join(re.escape(k) for k in sorted(keys))
    parts = [f"^({'|'.join(re.escape(f) for f in sorted(files))}):"] if files else []
    if names:
        parts.append(f"^({names})$")
    parts += [f"^{re.escape(d)}$" for d in sorted(deps)]
    return "|".join(parts) or "^$"


class Interrupted(SystemExit):
    """``repro`` got a signal: the running stages were stopped; the process exits with ``128 + signal``."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum


@dataclass
class Outcome:
    stage: str
    status: str  # "ran" | "unchanged" | "failed" | "not started"
    seconds: float = 0.0


def stage_graph(targets: list[str]) -> dict[str, set[str]]:
    """``{stage: the stages it depends on}`` for ``targets`` and everything upstream of them (DVC's graph)."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    with Repo() as repo:
        stages = set()
        for t in targets:
            try:
                stages.update(repo.stage.collect(t, with_deps=True))
            except DvcException as e:  # an unknown stage or file: one line naming the stages there are
                known = sorted(s.addressing for s in repo.index.stages)
                raise ValueError(f"{t!r}: {e} (stages: {', '.join(known)})") from None
        graph = repo.index.graph
        return {s.addressing: {d.addressing for d in graph.successors(s) if d in stages} for s in stages}


def remaining_path(deps: Mapping[str, set[str]], times: Mapping[str, float]) -> dict[str, float]:
    """Each stage's expected time from its start to the end of the longest chain that waits for it."""
    users: dict[str, list[str]] = {s: [] for s in deps}
    for s, ds in deps.items():
        for d in ds:
            users[d].append(s)
    memo: dict[str, float] = {}

    def walk(s: str) -> float:
        if s not in memo:
            memo[s] = times.get(s, 1.0) + max((walk(u) for u in users[s]), default=0.0)
        return memo[s]

    for s in deps:
        walk(s)
    return memo


def run_graph(deps: Mapping[str, set[str]], start: Callable[[str], subprocess.Popen], jobs: int,
              times: Mapping[str, float] | None = None, report: Callable[[str], None] = print,
              poll: float = 0.2, progress_every: float = 60.0) -> list[Outcome]:
    """Run every stage of ``deps`` through ``start`` (which returns its process), at most ``jobs`` at once, each
    after the stages it depends on; stops starting stages after the first failure. Every ``progress_every`` seconds
    each running stage gets a line: its elapsed time and the last progress line of its log (a process's
    ``progress()``, e.g. ``rucl train: 40% 24/60``). Outcomes in finishing order; stages never started come last as
    ``not started``."""
    if jobs < 1:
        raise ValueError(f"jobs: expected a positive integer, got {jobs}")
    rank = remaining_path(deps, times or {})
    done: set[str] = set()
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    outcomes: list[Outcome] = []
    failed = False
    last_progress = time.monotonic()
    try:
        while True:
            if not failed:
                ready = sorted((s for s in deps if s not in done and s not in running and deps[s] <= done),
                               key=lambda s: (-rank[s], s))
                for s in ready[: jobs - len(running)]:
                    report(f"start  {s}")
                    running[s] = (start(s), time.monotonic())
            if not running:
                break
            time.sleep(poll)
            if time.monotonic() - last_progress >= progress_every:
                last_progress = time.monotonic()
                for s, (proc, t0) in running.items():
                    now = getattr(proc, "progress", lambda: "")()
                    report(f"...    {s} ({time.monotonic() - t0:.0f} s){': ' + now if now else ''}")
            for s, (proc, t0) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                del running[s]
                secs = time.monotonic() - t0
                if rc != 0:
                    failed = True
                    outcomes.append(Outcome(s, "failed", secs))
                    report(f"FAILED {s} after {secs:.0f} s (exit {rc})")
                    continue
                done.add(s)
                status = "unchanged" if getattr(proc, "unchanged", lambda: False)() else "ran"
                outcomes.append(Outcome(s, status, secs))
                report(f"{'done' if status == 'ran' else 'same'}   {s} "
                       f"({secs:.0f} s{'' if status == 'ran' else ', unchanged'})")
    except BaseException:
        # every group is told at once, then each is waited for (a process with ``interrupt``/``finish`` stops its
        # whole group; any other is terminated)
        for proc, _ in running.values():
            getattr(proc, "interrupt", proc.terminate)()
        for proc, _ in running.values():
            getattr(proc, "finish", proc.wait)()
        raise
    finished = {o.stage for o in outcomes}
    outcomes += [Outcome(s, "not started") for s in sorted(deps) if s not in finished]
    return outcomes


def _read_times(path: Path) -> dict[str, float]:
    """``{stage: seconds}`` from ``path``; empty when it is missing. A file that is not such a mapping is an error
    naming it (delete it, or fix it, to go on)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
            raise ValueError("expected an object of stage name -> seconds")
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return {str(k): float(v) for k, v in data.items()}


def _unblock_signals() -> None:  # in the child before exec: the parent blocks them while it starts a stage
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _StageProcess(subprocess.Popen):
    """``dvc repro --single-item STAGE`` in a process group of its own, writing to its log file; knows whether DVC
    skipped the stage; ``interrupt`` + ``finish`` stop the whole group (see the module docstring)."""

    def __init__(self, stage: str, log: Path, env: dict[str, str]):
        self.log = log
        self.interrupted_at: float | None = None
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            super().__init__([sys.executable, "-m", "dvc", "--wait-for-lock", "repro", "--single-item", stage],
                             stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                             preexec_fn=_unblock_signals)

    def interrupt(self) -> None:
        """SIGINT to the group (DVC, the stage command and what it started in the group)."""
        if self.interrupted_at is None:
            self.interrupted_at = time.monotonic()
        _killpg(self.pid, signal.SIGINT)

    def finish(self, grace_s: float | None = None) -> int:
        """Wait for the group's leader after ``interrupt`` (SIGTERM to the group after ``grace_s``, SIGKILL 10 s
        later), then SIGKILL whatever is left in the group."""
        grace = STOP_GRACE_S if grace_s is None else grace_s
        t0 = self.interrupted_at if self.interrupted_at is not None else time.monotonic()
        try:
            self.wait(max(0.0, t0 + grace - time.monotonic()))
        except subprocess.TimeoutExpired:
            _killpg(self.pid, signal.SIGTERM)
            try:
                self.wait(10)
            except subprocess.TimeoutExpired:
                _killpg(self.pid, signal.SIGKILL)
                self.wait()
        _killpg(self.pid, signal.SIGKILL)  # what the leader left behind in its group
        return self.returncode

    def unchanged(self) -> bool:
        return UNCHANGED in self.log.read_text(errors="replace")

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def progress(self, width: int = 100) -> str:
        """The stage's last progress line (a progress bar redraws with carriage returns), shortened: what a live
        status line shows."""
        return last_progress_line(self.log, width)


def last_progress_line(log: Path, width: int = 100) -> str:
    """The last non-empty line or carriage-return segment in the last 4 KiB of ``log``, squeezed to ``width``."""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    pieces = [" ".join(p.split()) for p in text.replace("\r", "\n").split("\n")]
    last = next((p for p in reversed(pieces) if p), "")
    return last if len(last) <= width else last[: width - 3] + "..."


class _Signals:
    """In the main thread: the first SIGTERM/SIGINT/SIGHUP raises ``Interrupted`` (later ones are ignored while the
    stages stop); the previous handlers come back on exit."""

    def __init__(self, report: Callable[[str], None]):
        self.report, self.previous, self.got = report, {}, None

    def _on_signal(self, signum, frame):
        if self.got is not None:
            return
        self.got = signum
        self.report(f"interrupted by {signal.Signals(signum).name}: stopping the running stages "
                    f"(up to {STOP_GRACE_S:.0f} s each), then exiting with {128 + signum}")
        raise Interrupted(signum)

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._on_signal) for s in HANDLED}
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self.previous.items():
            signal.signal(s, h)


def repro(targets: list[str] | None = None, jobs: int = 2, threads: int | None = None,
          report: Callable[[str], None] = print) -> list[Outcome]:
    """Reproduce ``targets`` (default: dvc.yaml) with up to ``jobs`` stages at once, each with ``threads`` torch
    threads (default: the CPUs shared between the jobs). One at a time per project (``ReproBusy``); a signal stops
    every running stage's process group and raises ``Interrupted`` (exit status ``128 + signal``)."""
    with ProjectLock(LOCK_FILE), _Signals(report):
        return _repro(targets, jobs, threads, report)


def _repro(targets: list[str] | None, jobs: int, threads: int | None,
           report: Callable[[str], None]) -> list[Outcome]:
    opt_in_targets(targets or [], report)
    deps = stage_graph(targets or ["dvc.yaml"])
    env = dict(os.environ)
    env["RUBRICFLOW_THREADS"] = str(threads or max(1, len(os.sched_getaffinity(0)) // jobs))
    env.setdefault("RUBRICFLOW_PIPELINE_ID", f"repro-{datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}")
    own_times = _read_times(TIMES_FILE)
    times = {**_read_times(PRIOR_TIMES_FILE), **own_times}
    procs: dict[str, _StageProcess] = {}

    def start(stage: str) -> subprocess.Popen:
        # no signal between the start and the bookkeeping: every started group is known and stopped
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        try:
            procs[stage] = _StageProcess(stage, LOG_DIR / f"{stage.replace('/', '_').replace(':', '_')}.log", env)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)
        return procs[stage]

    report(f"{len(deps)} stages, up to {jobs} at once, {env['RUBRICFLOW_THREADS']} torch thread(s) each; "
           f"logs in {LOG_DIR}")
    try:
        outcomes = run_graph(deps, start, jobs, times, report)
    except BaseException:
        for p in procs.values():  # run_graph stopped the ones it was waiting for; this catches any other
            if p.poll() is None:
                p.interrupt()
        for p in procs.values():
            p.finish()
        raise
    ran = {o.stage: round(o.seconds, 1) for o in outcomes if o.status == "ran"}
    if ran:
        TIMES_FILE.parent.mkdir(parents=True, exist_ok=True)
        TIMES_FILE.write_text(json.dumps({**own_times, **ran}, indent=1, sort_keys=True))
    for o in outcomes:
        if o.status == "failed":
            report(f"--- last lines of {procs[o.stage].log} ---\n{procs[o.stage].tail()}")
    return outcomes
