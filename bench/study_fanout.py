"""Wall time of one small study run sequentially and on a two-node local Ray cluster, in the same run (issue 28).

The study is ``rucl`` with ``--units`` units (2 variants x seeds) of the toy unit function
(``rubricflow.testing.study_units:FROM_ENV``, loaded by every Ray worker from the installed package, with the seconds
in ``RUBRICFLOW_TOY_UNIT_SECONDS``): ``--seconds`` of busy CPU each, no training, so the numbers are the harness's and
Ray's, not the model's. The studies are exploratory (a bench writes no report of record). Three timings, each on a
fresh output folder of a throw-away project:

* ``serial``: ``rubricflow.study.harness.run_study`` in this process, one unit after the other;
* ``ray_cold``: the Prefect ``study`` flow with ``ray=<cluster>`` (prefect-ray), the first run of this driver, so
  each node starts and warms a worker process;
* ``ray_warm``: the same flow again on the same connection (the workers are reused).

The cluster is ``ray.cluster_utils.Cluster`` with 1 CPU per node, every listener on 127.0.0.1; its start-up and the
temporary Prefect server's are timed apart. Prints one line:
``study_fanout units=<n> seconds=<s> cluster_start=<t>s serial=<t>s ray_cold=<t>s ray_warm=<t>s
ratio_cold=<serial/cold> ratio_warm=<serial/warm> nodes=<units per node>``.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/study_fanout.py [--units 4] [--seconds 15]

from the project root of a checkout installed with ``make install`` (``tests/bench/test_study_fanout.py`` runs it so
in a clean copy of the tracked files).
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before ray loads: every node on 127.0.0.1

import argparse
import collections
import tempfile
import time
from pathlib import Path

import yaml

import rubricflow.util.env  # noqa: F401  (project-local caches before anything else)
from rubricflow.testing.study_units import FROM_ENV, SECONDS_VAR, attempts

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ["sft", "outcome"]
# the unit the Ray workers load by name: from the installed package, never from bench/ (not importable there)
UNIT_FN = "rubricflow.testing.study_units:FROM_ENV"


def make_project(where: Path) -> Path:
    """A project with this checkout's params.yaml (no per-seed start) and placeholders for the shared inputs."""
    from rubricflow.config import load_config
    from rubricflow.study.harness import study_method

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw.setdefault("study", {}).setdefault("rucl", {})["per_seed_start"] = False
    (where / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    os.chdir(where)
    cfg = load_config()
    for path in study_method(cfg.study.rucl).shared_outputs(cfg).values():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("{}")
    return where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", type=int, default=4, help="units (2 variants x units/2 seeds)")
    ap.add_argument("--seconds", type=float, default=15.0, help="busy seconds per unit")
    args = ap.parse_args()
    if args.units < 2 or args.units % 2:
        ap.error("--units: an even number >= 2")
    # read by every unit call; the Ray nodes started below inherit it, and the job's runtime env carries it too
    os.environ[SECONDS_VAR] = str(args.seconds)
    seeds = [100 + i for i in range(args.units // 2)]

    import ray
    from prefect.testing.utilities import prefect_test_harness
    from ray.cluster_utils import Cluster

    import flows.study as study_flow
    from rubricflow.config import load_config
    from rubricflow.study.harness import run_study

    with tempfile.TemporaryDirectory(prefix="study-fanout-") as tmp:
        proj = make_project(Path(tmp))
        t0 = time.monotonic()
        serial_out = run_study(load_config(overrides={"study.rucl.out_dir": "studies/serial"}), "rucl", seeds=seeds,
                               variants=VARIANTS, unit_fn=FROM_ENV, report_name="serial",
                               exploratory=True)
        t_serial = time.monotonic() - t0

        t0 = time.monotonic()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        t_cluster = time.monotonic() - t0
        try:
            ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False,  # one job for both runs
                     runtime_env={"env_vars": {SECONDS_VAR: str(args.seconds)}})
            with prefect_test_harness(server_startup_timeout=300):
                times, outs = {}, {}
                for run in ("ray_cold", "ray_warm"):
                    t0 = time.monotonic()
                    outs[run] = study_flow.study(name="rucl", seeds=seeds, variants=VARIANTS, ray=cluster.address,
                                                 overrides={"study.rucl.out_dir": f"studies/{run}"}, track=False,
                                                 report_name=run, unit_fn=UNIT_FN, exploratory=True)
                    times[run] = time.monotonic() - t0
        finally:
            ray.shutdown()
            cluster.shutdown()
        for run, out in outs.items():
            if out["claims"] != serial_out["claims"] or out["ran"] != args.units:
                raise SystemExit(f"study_fanout: the {run} study differs from the serial one: {out}")
        per_node = collections.Counter(node[:8] for v in VARIANTS for s in seeds
                                       for node, _ in attempts(proj / "studies" / "ray_warm" / v / f"seed{s}"))
    print(f"study_fanout units={args.units} seconds={args.seconds:g} cluster_start={t_cluster:.1f}s "
          f"serial={t_serial:.1f}s ray_cold={times['ray_cold']:.1f}s ray_warm={times['ray_warm']:.1f}s "
          f"ratio_cold={t_serial / times['ray_cold']:.2f} ratio_warm={t_serial / times['ray_warm']:.2f} "
          f"nodes={dict(per_node)}", flush=True)


if __name__ == "__main__":
    main()
