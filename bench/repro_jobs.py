"""``rubricflow repro --jobs N`` (the methods' chains side by side) vs ``dvc repro`` (every stage in turn, with all
CPUs as torch threads: what ``make run`` did before), on the same stages of two fresh clones of this commit.

    .venv/bin/python bench/repro_jobs.py [--jobs 2] [--targets rucl_eval deltarubric_eval ...] [--keep]

Each side runs in its own ``git clone`` of HEAD (the checkout's ``.venv`` linked in), one after the other, on an
otherwise idle machine; the candidate runs second, so a machine that gets busier during the run favours the
baseline. Prints each side's wall seconds and ``ratio=<baseline / candidate>`` (above 1: the candidate is faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"


def clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    (dest / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    return dest


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {rc}); see {log}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--targets", nargs="*", default=[], help="stages (default: the whole dvc.yaml)")
    ap.add_argument("--keep", action="store_true", help="keep the two clones (their paths are printed)")
    args = ap.parse_args()
    cpus = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="repro-jobs-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUBRICFLOW_", "MLFLOW_", "PREFECT_"))}
    env["PATH"] = f"{BIN}:{env['PATH']}"
    try:
        base = clone(work / "baseline")
        t_base = timed(["dvc", "repro", *args.targets], base,
                       {**env, "RUBRICFLOW_ROOT": str(base), "RUBRICFLOW_THREADS": str(cpus)}, work / "baseline.log")
        print(f"baseline dvc repro ({cpus} threads) wall_s={t_base:.0f}", flush=True)
        cand = clone(work / "candidate")
        t_cand = timed(["rubricflow", "repro", "--jobs", str(args.jobs), *args.targets], cand,
                       {**env, "RUBRICFLOW_ROOT": str(cand)}, work / "candidate.log")
        print(f"rubricflow repro --jobs {args.jobs} ({max(1, cpus // args.jobs)} thread(s) per stage) "
              f"wall_s={t_cand:.0f}")
        print(f"ratio={t_base / t_cand:.2f} (stages: {' '.join(args.targets) or 'dvc.yaml'}; {cpus} CPUs)")
    finally:
        if args.keep:
            print(f"clones and logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
