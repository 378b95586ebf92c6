"""Time from the start of a judge batch to a clear non-zero exit when the judge answers the preflight and then
hangs (issue 27: "a judge bound per stage").

A loopback server (``rubricflow.testing.judge_server``) answers the preflight and lets every judge request hang
past its deadline. The judge is built by ``make_judge`` from the ``judge`` section with its defaults (openai
backend, cache off); ``--scale`` multiplies the time settings (``timeout_s``, ``request_deadline_s``, the
backoff) so that a shorter run keeps their proportions. Two judges are timed on the same batch:

* ``new``: as built (the failure budget acts while the batch runs, ``judge.stage_deadline_s`` if set);
* ``old``: the same judge with the budget checked only after the whole batch (the behaviour before).

Prints one line: ``hanging_judge n=<n> scale=<s> new=<x>s (<error>) old=<y>s ratio=<y/x>``.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/hanging_judge.py [--n 128] [--scale 1.0] [--skip-old]
"""

from __future__ import annotations

import argparse
import time

import rubricflow.util.env  # noqa: F401  (project-local caches before anything else)
from rubricflow.judge import JudgeConfig, JudgeRequest, Rubric, make_judge
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.testing.judge_server import LoopbackJudgeServer

RUBRICS = [Rubric(f"R{i:02d}", f"Criterion {i} about the reasoning.") for i in range(1, 4)]
TIME_FIELDS = ("timeout_s", "request_deadline_s", "backoff_initial_s", "backoff_max_s", "backoff_jitter_s")


def timed(judge, requests) -> tuple[float, str]:
    t0 = time.monotonic()
    try:
        out = judge.judge(requests)
        result = f"returned {sum(j.failed for j in out)} of {len(out)} failed"
    except Exception as e:
        result = f"{type(e).__name__}"
    return time.monotonic() - t0, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128, help="judge requests in the batch (stratify's calibration size)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplier of the judge's time settings")
    ap.add_argument("--skip-old", action="store_true")
    args = ap.parse_args()
    defaults = OpenAIJudgeConfig()
    with LoopbackJudgeServer(hang_s=10 * defaults.request_deadline_s * args.scale) as srv:
        section = OpenAIJudgeConfig(base_url=srv.base_url, model="loopback-judge",
                                    **{f: getattr(defaults, f) * args.scale for f in TIME_FIELDS})
        cfg = JudgeConfig(backend="openai", cache_enabled=False, openai=section)
        reqs = [JudgeRequest(f"s{i}", "q", f"r {i} [[fault:timeout]]", RUBRICS) for i in range(args.n)]
        t_new, r_new = timed(make_judge(cfg), reqs)  # the preflight passes; then every request hangs
        line = f"hanging_judge n={args.n} scale={args.scale:g} new={t_new:.1f}s ({r_new})"
        if not args.skip_old:
            old = make_judge(cfg)
            old.inner.max_failed_frac = 1.0  # the batch runs to its end; BudgetedJudge checks afterwards
            t_old, r_old = timed(old, [JudgeRequest(f"o{i}", "q", f"o {i} [[fault:timeout]]", RUBRICS)
                                       for i in range(args.n)])
            line += f" old={t_old:.1f}s ({r_old}) ratio={t_old / t_new:.1f}"
    print(line, flush=True)


if __name__ == "__main__":
    main()
