"""A toy study unit function for drills and benchmarks of the study harness (``run_study(unit_fn=...)``, the
``study`` flow's ``unit_fn``): no training, metrics that depend only on (variant, seed), an optional busy wait, and a
record of every attempt and where it ran.

Each call appends one line ``<node> <pid>`` to ``<unit dir>/attempts.log`` before it works: ``<node>`` is the Ray
node id when the call runs in a Ray worker, else ``local``. :func:`attempts` reads them back, so a test can tell
which node ran a unit and whether a unit ran twice.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ATTEMPTS_FILE = "attempts.log"


def node_id() -> str:
    """The Ray node this process runs on, or ``local`` outside a Ray worker."""
    ray = sys.modules.get("ray")  # only a process that runs Ray tasks has imported it
    if ray is None or not ray.is_initialized():
        return "local"
    return ray.get_runtime_context().get_node_id()


def metric_value(variant: str, seed: int, metric: str) -> float:
    """A number in [0, 1) fixed by (variant, seed, metric): the same on every machine and every run."""
    digest = hashlib.sha256(f"{variant}/{seed}/{metric}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


def attempts(udir: str | Path) -> list[tuple[str, int]]:
    """The (node, pid) of every attempt recorded in ``udir``, in order."""
    p = Path(udir) / ATTEMPTS_FILE
    if not p.exists():
        return []
    return [(node, int(pid)) for node, pid in (line.split() for line in p.read_text().splitlines() if line.strip())]


class ToyUnit:
    """A unit function with the harness's signature ``(ucfg, unit, udir, run, secret_resolver)``.

    ``seconds`` of busy CPU work per call (a stand-in for training that occupies one core), then ``metrics`` from
    :func:`metric_value` and ``eval_samples``.

    ``seconds_env``: read the seconds from this environment variable at each call instead (a process that loads the
    unit by name, a Ray worker, gets the driver's value through its environment); unset or not a number >= 0 is an
    error naming the variable.
    """

    def __init__(self, metrics: Sequence[str] = ("accuracy", "correct_but_flawed"), seconds: float = 0.0,
                 eval_samples: int = 12, seconds_env: str | None = None):
        self.metrics, self.seconds, self.eval_samples = tuple(metrics), float(seconds), eval_samples
        self.seconds_env = seconds_env

    def busy_seconds(self) -> float:
        """The seconds of busy work of one call: ``seconds``, or the value of ``seconds_env`` when that is set."""
        if self.seconds_env is None:
            return self.seconds
        raw = os.environ.get(self.seconds_env)
        try:
            value = float(raw) if raw is not None else None
        except ValueError:
            value = None
        if value is None or not value >= 0:
            raise ValueError(f"ToyUnit: environment variable {self.seconds_env} must hold the busy seconds per unit "
                             f"(a number >= 0), got {raw!r}")
        return value

    def __call__(self, ucfg: Any, unit: Any, udir: Path, run: Any, secret_resolver: Any) -> dict:
        seconds = self.busy_seconds()
        udir = Path(udir)
        udir.mkdir(parents=True, exist_ok=True)
        with open(udir / ATTEMPTS_FILE, "a") as fh:
            fh.write(f"{node_id()} {os.getpid()}\n")
        end = time.perf_counter() + seconds
        x = 0
        while time.perf_counter() < end:
            x = (x * 31 + 7) % 1_000_003  # busy: the unit holds its core like training would
        return {"metrics": {m: metric_value(unit.variant, unit.seed, m) for m in self.metrics},
                "eval_samples": self.eval_samples}


# Named instances for runs whose workers import the unit by "module:attribute" (Ray workers see the installed
# package, not the test tree or bench/): ``rubricflow.testing.study_units:ONE_SECOND``, ``...:EIGHT_SECONDS`` and
# ``...:FROM_ENV`` (the seconds in SECONDS_VAR, set by the driver before its Ray nodes start: bench/study_fanout.py).
SECONDS_VAR = "RUBRICFLOW_TOY_UNIT_SECONDS"
ONE_SECOND = ToyUnit(seconds=1.0)
EIGHT_SECONDS = ToyUnit(seconds=8.0)  # long enough to lose its node while it runs
FROM_ENV = ToyUnit(seconds_env=SECONDS_VAR)
