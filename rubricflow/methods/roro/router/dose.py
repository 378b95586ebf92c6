"""The dose-response routers' process scorers (issue 40, item 1): ``oracle-noisy`` (the oracle's process score with
noise calibrated to a target process-pair accuracy on val) and ``exact-reader`` (an exact code-level reader of the warm
Rubricor's rubrics, the ceiling of its criterion families), built for ``run_router`` from the stored routes and pairs.
"""

from __future__ import annotations

from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.env.oracles import (
    NoisyOracleScorer,
    ReaderScorer,
    calibrate_sigma,
    process_accuracy,
    warm_rubricor_rubrics,
)
from rubricflow.methods.roro.env.problems import problems as problem_sets
from rubricflow.methods.roro.env.routing import ConstantPolicy, RoutingEnv
from rubricflow.methods.roro.env.trajectories import read_trajectories
from rubricflow.methods.roro.judge.pairs import read_trajectory_pairs
from rubricflow.methods.roro.judge.prompts import reads_the_problem
from rubricflow.methods.roro.judge.rubric import criterion_rows
from rubricflow.methods.roro.judge.rubricor import problem_views
from rubricflow.methods.roro.paths import pairs_path, trajectories_path


def dose_scorers(rc: RoRoConfig, methods: set[str], env: RoutingEnv) -> tuple[dict, dict]:
    """The scorers of the dose-response methods among ``methods`` and what they were built from: ``oracle-noisy``
    with its noise scale calibrated on the stored val process pairs (``env.oracles.calibrate_sigma``, noise
    seeded by ``rc.seed``), ``exact-reader`` under the warm Rubricor's rubrics (``rubricor_judge.seed``) for the
    train, val and test problems. Returns ``(scorers, info)``; ``info`` goes into the resume key and the summary."""
    scorers, info = {}, {}
    if not methods & {"oracle-noisy", "exact-reader"}:
        return scorers, info
    trajs = read_trajectories(trajectories_path(rc))
    pairs = read_trajectory_pairs(pairs_path(rc))
    if "oracle-noisy" in methods:
        cal = calibrate_sigma(pairs["val"], trajs, rc.router.noisy_target_acc, rc.seed)
        scorers["oracle-noisy"] = NoisyOracleScorer(cal["sigma"], rc.seed)
        info["oracle-noisy"] = cal
    if "exact-reader" in methods:
        probs = problem_sets(rc)
        views = {}
        for split in ("train", "val"):
            views.update(problem_views(env.rollout(probs[split], ConstantPolicy(0))))
        train_pids = sorted({p.problem_id for p in pairs["train"]})
        rubrics = warm_rubricor_rubrics(rc, trajs, train_pids, views)
        scorers["exact-reader"] = ReaderScorer(rubrics, reads_the_problem(rc.rubricor_judge.judge_reads))
        info["exact-reader"] = {"rubricor_seed": rc.rubricor_judge.seed,
                                "rubric_failed_frac": sum(r.failed for r in rubrics.values()) / max(1, len(rubrics)),
                                "val_process_acc": process_accuracy(pairs["val"], trajs, scorers["exact-reader"].score),
                                "rubrics": {p: criterion_rows(r.value or []) for p, r in sorted(rubrics.items())}}
    return scorers, info
