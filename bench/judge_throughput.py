"""Judge throughput of the openai backend against a loopback server with a fixed per-request latency.

Baseline (measured in the same run): a sequential loop, one judge request in flight at a time. For each
concurrency level c the bench labels a batch and prints

    throughput  = judged requests / wall time
    efficiency  = throughput / (c / latency)      (1.0 = every slot busy with server latency only)
    speedup     = throughput / sequential throughput

``cpu_ms/req`` is the client's CPU time per judged request and ``cpu_ceiling`` the req/s a fully available core
could drive at that cost: when ``c / latency`` approaches the ceiling (or the machine is shared), the client, not
the concurrency, is the limit. The server runs in its own process (``python -m rubricflow.testing.judge_server``)
so its CPU time does not compete with the client's event loop. Last line, for concurrency 16 (target: efficiency
>= 0.9 at 100 ms latency): ``judge efficiency=<x> speedup_vs_sequential=<y>``.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/judge_throughput.py [--latency-ms 100] [--levels 1,4,16,32]

``--client-cpus`` / ``--server-cpus`` pin the two processes (Linux CPU affinity), e.g. ``--client-cpus 0,1
--server-cpus 0,1`` reproduces the 2-core CI box on a bigger machine and ``--client-cpus 0 --server-cpus 1``
gives each side a core of its own.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import rubricflow.util.env  # noqa: F401  (project-local caches before anything else)
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.openai_backend import OpenAIJudge
from rubricflow.judge.protocol import JudgeRequest, Rubric, status_counts

RUBRICS = [Rubric(f"R{i:02d}", f"Criterion {i} about the reasoning.") for i in range(1, 7)]


def requests(n: int, tag: str) -> list[JudgeRequest]:
    return [
        JudgeRequest(
            f"{tag}-{i}",
            "How many red shapes are there?",
            f"red = {i}, green = 1. so red = {i}. \\boxed{{{i}}}",
            RUBRICS,
        )
        for i in range(n)
    ]


def parse_cpus(spec: str | None) -> set[int] | None:
    """'0,1' or '0-3' -> {0, 1} / {0, 1, 2, 3}; None or '' -> None (no pinning)."""
    if not spec:
        return None
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    available = os.sched_getaffinity(0)
    if not cpus <= available:
        raise SystemExit(f"--client-cpus/--server-cpus {spec!r}: CPUs {sorted(cpus - available)} "
                         "are not available here")
    return cpus


def start_server(latency_ms: float, cpus: set[int] | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rubricflow.testing.judge_server", "--latency-ms", str(latency_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    if cpus:
        os.sched_setaffinity(proc.pid, cpus)
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"loopback server did not start (got {line!r})")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def run_level(url: str, concurrency: int, n: int, tag: str) -> tuple[float, float, dict]:
    """(wall seconds, client CPU seconds, status counts) for judging ``n`` requests at ``concurrency``."""
    section = OpenAIJudgeConfig(
        base_url=url, model="loopback-judge", concurrency=concurrency, timeout_s=30, max_retries=0
    )
    judge = OpenAIJudge(section)
    reqs = requests(n, tag)
    c0, t0 = time.process_time(), time.perf_counter()
    out = judge.judge(reqs)
    return time.perf_counter() - t0, time.process_time() - c0, status_counts(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--levels", default="1,4,16,32", help="concurrency levels (16 is the headline)")
    ap.add_argument("--per-slot", type=int, default=12, help="requests per concurrency slot at each level")
    ap.add_argument("--sequential", type=int, default=24, help="requests in the sequential baseline")
    ap.add_argument("--client-cpus", help="pin the client (this process) to these CPUs, e.g. 0 or 0,1")
    ap.add_argument("--server-cpus", help="pin the loopback server to these CPUs")
    args = ap.parse_args()
    client_cpus, server_cpus = parse_cpus(args.client_cpus), parse_cpus(args.server_cpus)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    latency = args.latency_ms / 1000
    levels = [int(x) for x in args.levels.split(",")]
    if 16 not in levels:
        levels.append(16)
    proc, url = start_server(args.latency_ms, server_cpus)
    try:
        run_level(url, 4, 8, "warmup")  # imports, first connections
        wall, _, st = run_level(url, 1, args.sequential, "seq")
        seq_tp = args.sequential / wall
        print(
            f"loopback latency {args.latency_ms:g} ms, {len(RUBRICS)} rubrics per request, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.2f}, python {sys.version.split()[0]}, "
            f"client CPUs {sorted(os.sched_getaffinity(0))}, server CPUs {sorted(os.sched_getaffinity(proc.pid))}"
        )
        print(f"sequential baseline: {args.sequential} requests in {wall:.2f} s = {seq_tp:.2f} req/s", end=" ")
        print(f"(ideal {1 / latency:.2f})")
        print(
            f"{'conc':>5} {'requests':>8} {'wall_s':>7} {'req/s':>8} {'ideal':>8} {'effic':>6} {'speedup':>8} "
            f"{'cpu_ms/req':>10} {'cpu_ceiling':>11}  statuses"
        )
        results = {}
        for c in levels:
            n = c * args.per_slot
            wall, cpu, st = run_level(url, c, n, f"c{c}")
            tp = n / wall
            eff = tp / (c / latency)
            results[c] = (eff, tp / seq_tp)
            # cpu_ceiling: the req/s one fully available core could drive at this client CPU cost per request
            print(
                f"{c:>5} {n:>8} {wall:>7.2f} {tp:>8.1f} {c / latency:>8.1f} {eff:>6.3f} {tp / seq_tp:>8.2f} "
                f"{cpu / n * 1000:>10.2f} {n / cpu:>11.0f}  {st}"
            )
            if st["ok"] != n:
                raise SystemExit(f"concurrency {c}: not every judgment was ok: {st}")
    finally:
        proc.terminate()
        proc.wait(10)
    eff, speed = results[16]
    print(f"judge efficiency={eff:.3f} speedup_vs_sequential={speed:.2f}")


if __name__ == "__main__":
    main()
