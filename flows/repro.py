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
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rubricflow.env import PROJECT_ROOT, STATE_DIR

TIMES_FILE = STATE_DIR / "repro-times.json"
PRIOR_TIMES_FILE = PROJECT_ROOT / "infra" / "local" / "repro-times.json"
LOG_DIR = STATE_DIR / "logs" / "repro"
UNCHANGED = "didn't change, skipping"


@dataclass
class Outcome:
    stage: str
    status: str  # "ran" | "unchanged" | "failed" | "not started"
    seconds: float = 0.0


def stage_graph(targets: list[str]) -> dict[str, set[str]]:
    """``{stage: the stages it depends on}`` for ``targets`` and everything upstream of them (DVC's graph)."""
    from dvc.repo import Repo

    with Repo() as repo:
        stages = set()
        for t in targets:
            stages.update(repo.stage.collect(t, with_deps=True))
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
              poll: float = 0.2) -> list[Outcome]:
    """Run every stage of ``deps`` through ``start`` (which returns its process), at most ``jobs`` at once, each
    after the stages it depends on; stops starting stages after the first failure. Outcomes in finishing order;
    stages never started come last as ``not started``."""
    if jobs < 1:
        raise ValueError(f"jobs: expected a positive integer, got {jobs}")
    rank = remaining_path(deps, times or {})
    done: set[str] = set()
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    outcomes: list[Outcome] = []
    failed = False
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
                report(f"{'done' if status == 'ran' else 'same'}   {s} ({secs:.0f} s{'' if status == 'ran' else ', unchanged'})")
    except BaseException:
        for proc, _ in running.values():
            proc.terminate()
        for proc, _ in running.values():
            proc.wait()
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


class _StageProcess(subprocess.Popen):
    """``dvc repro --single-item STAGE`` writing to its log file; knows whether DVC skipped the stage."""

    def __init__(self, stage: str, log: Path, env: dict[str, str]):
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            super().__init__([sys.executable, "-m", "dvc", "--wait-for-lock", "repro", "--single-item", stage],
                             stdout=out, stderr=subprocess.STDOUT, env=env)

    def unchanged(self) -> bool:
        return UNCHANGED in self.log.read_text(errors="replace")

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def repro(targets: list[str] | None = None, jobs: int = 2, threads: int | None = None,
          report: Callable[[str], None] = print) -> list[Outcome]:
    """Reproduce ``targets`` (default: dvc.yaml) with up to ``jobs`` stages at once, each with ``threads`` torch
    threads (default: the CPUs shared between the jobs)."""
    deps = stage_graph(targets or ["dvc.yaml"])
    env = dict(os.environ)
    env["RUBRICFLOW_THREADS"] = str(threads or max(1, len(os.sched_getaffinity(0)) // jobs))
    env.setdefault("RUBRICFLOW_PIPELINE_ID", f"repro-{datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}")
    own_times = _read_times(TIMES_FILE)
    times = {**_read_times(PRIOR_TIMES_FILE), **own_times}
    procs: dict[str, _StageProcess] = {}

    def start(stage: str) -> subprocess.Popen:
        procs[stage] = _StageProcess(stage, LOG_DIR / f"{stage.replace('/', '_').replace(':', '_')}.log", env)
        return procs[stage]

    report(f"{len(deps)} stages, up to {jobs} at once, {env['RUBRICFLOW_THREADS']} torch thread(s) each; "
           f"logs in {LOG_DIR}")
    outcomes = run_graph(deps, start, jobs, times, report)
    ran = {o.stage: round(o.seconds, 1) for o in outcomes if o.status == "ran"}
    if ran:
        TIMES_FILE.parent.mkdir(parents=True, exist_ok=True)
        TIMES_FILE.write_text(json.dumps({**own_times, **ran}, indent=1, sort_keys=True))
    for o in outcomes:
        if o.status == "failed":
            report(f"--- last lines of {procs[o.stage].log} ---\n{procs[o.stage].tail()}")
    return outcomes
