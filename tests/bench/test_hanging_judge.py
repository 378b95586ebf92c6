"""bench/hanging_judge.py runs end to end (time settings scaled down) and prints its line: both judges end with a
clear error, the new one naming the failure budget."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "hanging_judge.py"


def test_hanging_judge_bench_prints_both_times_and_errors():
    out = subprocess.run([sys.executable, str(BENCH), "--n", "64", "--scale", "0.004"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    line = out.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"hanging_judge n=64 scale=0\.004 new=(\d+\.\d)s \((\w+)\) old=(\d+\.\d)s \((\w+)\) "
                     r"ratio=(\d+\.\d)", line)
    assert m, line
    assert m.group(2) == m.group(4) == "JudgeFailureBudgetExceeded"
