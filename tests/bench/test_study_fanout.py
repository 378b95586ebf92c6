"""bench/study_fanout.py runs as its docstring says, from a clean copy of the tree: the Ray workers load the toy unit
from the installed package (before, every worker failed with "cannot load 'bench.study_fanout:UNIT': No module named
'bench'"). A small version: 2 units of 1 s."""

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = "bench/study_fanout.py"


def documented_command() -> list[str]:
    """The command line of the bench's docstring, without its optional ``[...]`` arguments."""
    doc = ast.get_docstring(ast.parse((ROOT / BENCH).read_text()))
    line = next(ln.strip() for ln in doc.splitlines() if ln.strip().startswith("RUBRICFLOW_THREADS=1 "))
    return re.sub(r"\s*\[[^\]]*\]", "", line).split()


def clean_copy(dest: Path) -> Path:
    """The tracked files of this checkout (as they are in the working tree) in ``dest``, with the project's .venv
    linked in as `make install` would have made it: no untracked or ignored file, nothing on PYTHONPATH."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for rel in (f.decode() for f in files if f):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


def test_documented_command_is_the_one_tested():
    assert documented_command() == ["RUBRICFLOW_THREADS=1", ".venv/bin/python", BENCH]


@pytest.mark.slow
@pytest.mark.ray
def test_study_fanout_runs_from_a_clean_copy_as_documented(tmp_path):
    repo = clean_copy(tmp_path / "clone")
    assert not (repo / "bench" / "__init__.py").exists()  # `bench` is no package a Ray worker could import
    assignment, python, script = documented_command()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RUBRICFLOW_TOY_UNIT_SECONDS")}
    env.update([assignment.split("=", 1)])
    out = subprocess.run([python, script, "--units", "2", "--seconds", "1"], cwd=repo, env=env, capture_output=True,
                         text=True, timeout=540)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "No module named 'bench'" not in out.stdout + out.stderr
    line = out.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"study_fanout units=2 seconds=1 cluster_start=[\d.]+s serial=([\d.]+)s ray_cold=[\d.]+s "
                     r"ray_warm=[\d.]+s ratio_cold=[\d.]+ ratio_warm=[\d.]+ nodes=(\{.*\})", line)
    assert m, line
    assert float(m.group(1)) >= 2.0  # the serial run did its 2 x 1 s of busy work: the seconds reached the unit
    assert sum(ast.literal_eval(m.group(2)).values()) == 2  # both units of the warm run ran on a Ray node


def test_env_seconds_unit_reads_its_seconds_at_each_call(tmp_path, monkeypatch):
    from rubricflow.study.adapter import Unit
    from rubricflow.testing.study_units import FROM_ENV, SECONDS_VAR

    monkeypatch.setenv(SECONDS_VAR, "0.25")
    assert FROM_ENV.busy_seconds() == 0.25
    out = FROM_ENV(None, Unit("sft", 11), tmp_path, None, None)
    assert out["eval_samples"] == 12 and set(out["metrics"]) == {"accuracy", "correct_but_flawed"}
    for bad in ("", "soon", "-1", "nan"):
        monkeypatch.setenv(SECONDS_VAR, bad)
        with pytest.raises(ValueError, match=f"{SECONDS_VAR} must hold the busy seconds per unit"):
            FROM_ENV(None, Unit("sft", 11), tmp_path, None, None)
    monkeypatch.delenv(SECONDS_VAR)
    with pytest.raises(ValueError, match="got None"):
        FROM_ENV.busy_seconds()
