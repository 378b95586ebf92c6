"""The trajectories (``roro_trajectories``): every route of each train / val problem (or the routes the collection
policies take), merged to distinct solutions and stored with their steps, writers, checks, router states and cost;
the step cache is saved beside them for the later stages."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rubricflow.util.io import write_parquet
from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.paths import cache_path, trajectories_path
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.env.routing import ConstantPolicy, RandomPolicy, RoutingEnv, ThresholdPolicy, Trajectory
from rubricflow.methods.roro.env.step_models import make_env
from rubricflow.methods.roro.env.task import Problem


def collection_policies(rc: RoRoConfig) -> list:
    """All-SLM, all-LRM, the random routers (seeded from ``trajectories.seed``) and the threshold routers."""
    tc = rc.trajectories
    pols: list = [ConstantPolicy(0), ConstantPolicy(1)]
    pols += [RandomPolicy(r, seed=tc.seed + i) for i, r in enumerate(tc.random_rates)]
    pols += [ThresholdPolicy(t) for t in tc.thresholds]
    return pols


def policy_routes(rc: RoRoConfig, env: RoutingEnv, pool: list[Problem]) -> list[Trajectory]:
    """The routes of every collection policy on ``pool`` (each random router ``random_repeats`` times)."""
    trajs: list[Trajectory] = []
    for pol in collection_policies(rc):
        reps = rc.trajectories.random_repeats if pol.name.startswith("random") else 1
        trajs += env.rollout(pool, pol, repeats=reps)
    return trajs


def collect_routes(rc: RoRoConfig, env: RoutingEnv, pool: list[Problem]) -> list[Trajectory]:
    """Every route of each problem of ``pool`` (``trajectories.enumerate_routes``), or the collection policies' routes
    where chains are too long to enumerate."""
    return env.enumerate_routes(pool) if rc.trajectories.enumerate_routes else policy_routes(rc, env, pool)


def dedupe(trajectories: list[Trajectory]) -> list[Trajectory]:
    """First trajectory of each distinct solution (policies that routed identically are merged)."""
    seen: dict[tuple, int] = {}
    out = []
    for t in trajectories:
        k = t.key()
        if k not in seen:
            seen[k] = len(out)
            out.append(t)
    return out


def write_trajectories(path: Path, trajs: list[Trajectory]) -> Path:
    return write_parquet(path, pa.Table.from_pylist([t.to_row() for t in trajs]))


def read_trajectories(path: Path) -> list[Trajectory]:
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no trajectories; run `rubricflow roro-trajectories` first")
    return [Trajectory.from_row(r) for r in pq.read_table(path).to_pylist()]


def policy_summary(trajs: list[Trajectory]) -> dict[str, dict[str, float]]:
    """Per policy: accuracy, mean LRM tokens per problem, LRM call rate per step and the number of routes."""
    by: dict[str, list] = {}
    for t in trajs:
        by.setdefault(t.policy, []).append(t)
    return {
        name: {
            "accuracy": sum(t.outcome for t in ts) / len(ts),
            "lrm_tokens": sum(t.lrm_tokens for t in ts) / len(ts),
            "lrm_call_rate": sum(t.lrm_calls for t in ts) / max(1, sum(len(t.steps) for t in ts)),
            "n": float(len(ts)),
        }
        for name, ts in sorted(by.items())
    }


def run_trajectories(rc: RoRoConfig, log: Callable[[str, dict], None] | None = None) -> dict:
    """Collect, merge and store the trajectories of the train and val problems; save the step cache (with the
    entries of a saved one it started from). Returns the
    counts, the SLM's step error rate, how well its uncertainty separates its errors (``uncertainty_auc``) and the
    collection policies' accuracy and cost."""
    t0 = time.perf_counter()
    probs = problems(rc)
    # a step cache saved by an earlier run is reused (its entries are keyed by the models' weights, so a retrained
    # model never reads a stale step): the parity reading's routes are then lookups of the value reading's steps
    env = make_env(rc, cache_path(rc))
    pool = probs["train"] + probs["val"]
    trajs = collect_routes(rc, env, pool)
    unique = dedupe(trajs)
    write_trajectories(trajectories_path(rc), unique)
    steps = [s for t in unique for s in t.steps]
    slm_err = [s for s in steps if s.slm_correct is False]
    if rc.trajectories.enumerate_routes:  # the policies' accuracy and cost, read off the routes they would take
        trajs = policy_routes(rc, env, pool)
    env.cache.save(cache_path(rc))
    summ = policy_summary(trajs)
    out = {
        "n_rollouts": len(trajs), "n_unique": len(unique), "n_problems": len(pool),
        "collection": "every route" if rc.trajectories.enumerate_routes else "policies",
        "step_cache_entries": len(env.cache.entries),
        "slm_step_error_rate": len(slm_err) / max(1, len(steps)),
        "uncertainty_auc": _auc([s.slm_uncertainty for s in slm_err],
                                [s.slm_uncertainty for s in steps if s.slm_correct is True]),
        "policies": summ, "duration_s": time.perf_counter() - t0,
    }
    return out


def _auc(pos: list[float], neg: list[float]) -> float | None:
    """P(a random error step has higher SLM uncertainty than a random correct one) (ties 0.5)."""
    if not pos or not neg:
        return None
    neg_s = sorted(neg)
    tot = 0.0
    for x in pos:
        lo, hi = bisect.bisect_left(neg_s, x), bisect.bisect_right(neg_s, x)
        tot += lo + 0.5 * (hi - lo)
    return tot / (len(pos) * len(neg))
