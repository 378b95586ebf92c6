"""``rubricflow repro``: DVC's stages run at once where the graph allows, in a throw-away DVC project."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flows.repro import _read_times, remaining_path, run_graph
from tests.ops_helpers import empty_dvc_project, project_env


class FakeProc:
    """A stage process that finishes after ``polls`` polls with ``rc``; records when it ran."""

    live: set[str] = set()
    peak = 0

    def __init__(self, stage: str, polls: int, rc: int = 0):
        self.stage, self.left, self.rc = stage, polls, rc
        FakeProc.live.add(stage)
        FakeProc.peak = max(FakeProc.peak, len(FakeProc.live))

    def poll(self):
        self.left -= 1
        if self.left > 0:
            return None
        FakeProc.live.discard(self.stage)
        return self.rc

    def terminate(self):
        pass

    def wait(self):
        return self.rc


def _run(deps, polls, jobs, times=None, fail=()):
    FakeProc.live, FakeProc.peak = set(), 0
    started = []

    def start(s):
        started.append(s)
        return FakeProc(s, polls.get(s, 1), 1 if s in fail else 0)

    outcomes = run_graph(deps, start, jobs, times, report=lambda m: None, poll=0)
    return started, outcomes


DIAMOND = {"params": set(), "short": {"params"}, "long1": {"params"}, "long2": {"long1"}, "join": {"short", "long2"}}


def test_a_stage_starts_after_its_dependencies_and_at_most_jobs_run_at_once():
    started, outcomes = _run(DIAMOND, {"long1": 3, "long2": 3}, jobs=2)
    pos = {s: i for i, s in enumerate(started)}
    for s, ds in DIAMOND.items():
        assert all(pos[d] < pos[s] for d in ds)
    assert FakeProc.peak == 2
    assert [o.status for o in outcomes] == ["ran"] * 5
    _run(DIAMOND, {"long1": 3, "long2": 3}, jobs=1)
    assert FakeProc.peak == 1


def test_the_longest_remaining_chain_goes_first():
    times = {"params": 1, "short": 5, "long1": 10, "long2": 10, "join": 1}
    assert remaining_path(DIAMOND, times) == {"params": 22, "short": 6, "long1": 21, "long2": 11, "join": 1}
    started, _ = _run(DIAMOND, {}, jobs=1, times=times)
    assert started[:2] == ["params", "long1"]
    started, _ = _run(DIAMOND, {}, jobs=1, times={**times, "short": 30})
    assert started[:2] == ["params", "short"]


def test_a_failure_stops_new_starts_and_lets_the_running_stage_finish():
    started, outcomes = _run(DIAMOND, {"short": 1, "long1": 4}, jobs=2, fail={"short"})
    by = {o.stage: o.status for o in outcomes}
    assert by == {"params": "ran", "short": "failed", "long1": "ran", "long2": "not started", "join": "not started"}
    assert "long2" not in started


def test_stage_durations_are_read_and_a_broken_file_is_named(tmp_path):
    f = tmp_path / "times.json"
    assert _read_times(f) == {}
    f.write_text('{"sft": 72, "rucl": 120.5}')
    assert _read_times(f) == {"sft": 72.0, "rucl": 120.5}
    for bad in ('["sft"]', '{"sft": "long"}', "{not json"):
        f.write_text(bad)
        with pytest.raises(ValueError, match="times.json"):
            _read_times(f)


def _toy(project: Path, fail_b: bool = False) -> None:
    def stage(name, deps, cmd):
        return {"cmd": f"sh -c '{cmd}'", "deps": deps, "outs": [f"{name}.txt"]}

    tick = "python -c \"import time; print(time.time())\""
    stages = {
        "a": stage("a", ["src.txt"], f"{tick} > a.start; sleep 2; {tick} > a.end; cat src.txt > a.txt"),
        "b": stage("b", ["src.txt"], f"{tick} > b.start; sleep 2; {tick} > b.end; "
                                     + ("exit 3" if fail_b else "cat src.txt > b.txt")),
        "c": stage("c", ["a.txt", "b.txt"], f"{tick} > c.start; cat a.txt b.txt > c.txt"),
    }
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))


def _repro(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = project_env(project, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", DVC_NO_ANALYTICS="1")
    return subprocess.run([sys.executable, "-m", "flows.cli", "repro", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_independent_stages_run_at_once_and_a_failed_run_resumes(tmp_path):
    project = empty_dvc_project(tmp_path / "proj")
    (project / "src.txt").write_text("x\n")

    _toy(project, fail_b=True)
    r = _repro(project, "-j", "2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED b" in r.stdout and "1 ran, 0 unchanged, 1 failed, 1 not started" in r.stdout
    assert (project / "a.txt").read_text() == "x\n" and not (project / "c.start").exists()
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert set(lock) == {"a"}  # the finished stage is recorded, the failed one is not

    _toy(project)
    r = _repro(project, "-j", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 ran, 1 unchanged, 0 failed" in r.stdout  # a was kept, b and c ran
    assert (project / "c.txt").read_text() == "x\nx\n"
    assert set(yaml.safe_load((project / "dvc.lock").read_text())["stages"]) == {"a", "b", "c"}

    (project / "src.txt").write_text("y\n")  # a and b both change: they run side by side, then c
    r = _repro(project, "-j", "2")
    assert r.returncode == 0 and "3 ran" in r.stdout, r.stdout + r.stderr
    t = {f: float((project / f).read_text()) for f in ("a.start", "a.end", "b.start", "b.end", "c.start")}
    assert t["a.start"] < t["b.end"] and t["b.start"] < t["a.end"]  # overlapping
    assert t["c.start"] >= max(t["a.end"], t["b.end"])
    assert "0 ran, 3 unchanged" in _repro(project).stdout


def test_running_stages_get_a_progress_line_from_their_log(tmp_path):
    """Long stages are not silent: every `progress_every` seconds each running stage gets a line with its elapsed
    time and the last progress line of its log (a progress bar redraws with carriage returns)."""
    from flows.repro import last_progress_line

    log = tmp_path / "rucl.log"
    log.write_bytes(b"Running stage 'rucl':\n> rubricflow rucl\nrucl train:  10%|#   | 6/60 [00:05]\r"
                    b"rucl train:  40%|####  | 24/60 [00:20]\r")
    assert last_progress_line(log) == "rucl train: 40%|#### | 24/60 [00:20]"
    assert last_progress_line(tmp_path / "missing.log") == ""
    assert len(last_progress_line(log, width=12)) == 12

    class Slow(FakeProc):
        def progress(self):
            return last_progress_line(log)

    lines: list[str] = []
    run_graph({"rucl": set()}, lambda s: Slow(s, 40), 1, report=lines.append, poll=0.005, progress_every=0.02)
    live = [m for m in lines if m.startswith("...    rucl (")]
    assert live and all(m.endswith("s): rucl train: 40%|#### | 24/60 [00:20]") for m in live)
    assert lines[0] == "start  rucl" and lines[-1].startswith("done   rucl")
