"""Operations timings, each against a baseline measured in the same run (a loaded machine inflates both).

* Prefect server: ``prefect server start`` until ``/api/health`` answers, vs ``python -c "import prefect"``;
* MLflow server: ``mlflow server --workers 1`` (job execution off) until ``/health``, vs ``import mlflow``;
* no-op ``dvc repro`` in a project whose pipeline is up to date, vs ``dvc version`` (DVC's own start-up).

Wall-clock and CPU seconds (user + sys of the process tree, from ``os.wait4``-style rusage of the children) are
printed: on a shared 2-core machine the CPU figure is the one that carries over to a quiet machine.

    .venv/bin/python bench/ops_timings.py [--project DIR] [--rounds 3]

``--project`` defaults to this checkout (run ``make run`` first so its pipeline is up to date). Last lines:
``<what> wall_s=<x> cpu_s=<y> ratio=<x / baseline wall>``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_timed(cmd: list[str], cwd: Path, env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, _children_cpu() - c0, proc


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_timed(cmd: list[str], url: str, env: dict, cwd: Path, timeout: float = 600) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        while time.perf_counter() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode} before {url} answered")
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except OSError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"{url} not healthy after {timeout} s")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", type=Path, default=ROOT)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ops-bench-"))
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true", "DVC_NO_ANALYTICS": "1"}
    py = str(BIN / "python")
    # `dvc repro` in a stale project would run (and first delete the outputs of) the changed stages: refuse
    # before timing anything, using the read-only `dvc status`.
    st = subprocess.run([str(BIN / "dvc"), "status", "--quiet"], cwd=args.project, env=env,
                        capture_output=True, text=True)
    if st.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        out = subprocess.run([str(BIN / "dvc"), "status"], cwd=args.project, env=env, capture_output=True, text=True)
        raise SystemExit(f"{args.project}: the DVC pipeline is not up to date, so `dvc repro` would not be a no-op; "
                         f"run `make run` there first.\n`dvc status`:\n{out.stdout[-800:]}{out.stderr[-400:]}")
    results: dict[str, list[float]] = {}
    try:
        for _ in range(args.rounds):
            results.setdefault("import prefect", []).append(run_timed([py, "-c", "import prefect"], tmp, env)[0])
            p = _port()
            results.setdefault("prefect server healthy", []).append(server_timed(
                [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(p)],
                f"http://127.0.0.1:{p}/api/health", env, tmp))
            results.setdefault("import mlflow", []).append(run_timed([py, "-c", "import mlflow"], tmp, env)[0])
            p = _port()
            results.setdefault("mlflow server healthy", []).append(server_timed(
                [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
                 "--host", "127.0.0.1", "--port", str(p), "--workers", "1"],
                f"http://127.0.0.1:{p}/health", env, tmp))
            w, c, _ = run_timed([str(BIN / "dvc"), "version"], args.project, env)
            results.setdefault("dvc version", []).append(w)
            results.setdefault("dvc version cpu", []).append(c)
            w, c, proc = run_timed([str(BIN / "dvc"), "repro"], args.project, env)
            if proc.returncode != 0 or "Running stage" in proc.stdout:
                raise SystemExit(f"`dvc repro` in {args.project} was not a no-op (rc {proc.returncode}); its time is "
                                 f"not a no-op timing:\n{(proc.stdout + proc.stderr)[-800:]}")
            results.setdefault("dvc repro (no-op)", []).append(w)
            results.setdefault("dvc repro (no-op) cpu", []).append(c)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for what, base in [("prefect server healthy", "import prefect"), ("mlflow server healthy", "import mlflow"),
                       ("dvc repro (no-op)", "dvc version")]:
        cpu = med.get(f"{what} cpu")
        cpu_s = f" cpu_s={cpu:.2f}" if cpu is not None else ""
        print(f"{what} wall_s={med[what]:.2f}{cpu_s} ratio={med[what] / med[base]:.2f} "
              f"(baseline {base} {med[base]:.2f} s)")


if __name__ == "__main__":
    main()
