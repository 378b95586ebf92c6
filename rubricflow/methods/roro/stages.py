"""RoRo pipeline stages (``rubricflow roro-models`` ... ``rubricflow roro-eval``, dvc.yaml, Prefect tasks).

Each stage takes the ``roro`` section and calls one function of the module of its concept (torch's threads are the
process's one setting, ``--threads`` / ``$RUBRICFLOW_THREADS``, default 1):

    roro_models          env.step_models.run_models            train the SLM and the LRM
    roro_trajectories    env.trajectories.run_trajectories     every route of each train / val problem; the step cache
    roro_pairs           judge.pairs.run_pairs                 preference pairs (outcome, then cost, then process)
    roro_rubricor_judge  judge.alternation.run_rubricor_judge  warm start + alternating rejection-sampling fine-tuning
    roro_router          router.train.run_router               GRPO routers over the cost-weight sweep
    roro_eval            router.evaluate.run_eval              accuracy vs LRM cost; the kept Judge on test pairs

Outputs are at ``paths``. Tracking (an MLflow child run, ``reports/<stage>.json``) comes from the ``@stage``
framework (``rubricflow.pipeline.stage``); per-step training curves (Judge/Rubricor phases, router GRPO steps) are
logged to the run as they happen. The logic modules import torch, so each stage imports its module when it runs.
"""

from __future__ import annotations

from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.paths import eval_dir, pairs_path, trajectories_path
from rubricflow.pipeline.stage import StageContext, stage


def log_judge_inputs(run, rc: RoRoConfig) -> None:
    """Log what the Rubricor / Judge training reads to ``run`` as MLflow inputs: the routes (trajectories) and the
    train and val pairs."""
    run.log_input(trajectories_path(rc), context="training", name="routes")
    run.log_input(pairs_path(rc), split="train", context="training")
    run.log_input(pairs_path(rc), split="val", context="evaluation")


def _logger(run):
    counters: dict[str, int] = {}

    def log(name: str, row: dict) -> None:
        step = counters.get(name, 0)
        counters[name] = step + 1
        run.log_metrics({f"{name}/{k}": v for k, v in row.items() if isinstance(v, (int, float))
                         and not isinstance(v, bool)}, step=int(row.get("step", step)))

    return log


@stage("roro_models", retries=1, metric_ns="train")
def models_stage(roro: RoRoConfig, ctx: StageContext) -> dict:
    """Train the small (SLM) and large (LRM) step models on step-by-step arithmetic solutions."""
    from rubricflow.methods.roro.env.step_models import run_models

    return run_models(roro, log=_logger(ctx.run))


@stage("roro_trajectories")
def trajectories_stage(roro: RoRoConfig, ctx: StageContext) -> dict:
    """Every route of each train/val problem (or the routes of all-SLM, all-LRM, random and threshold policies)."""
    from rubricflow.methods.roro.env.trajectories import run_trajectories

    return run_trajectories(roro, log=_logger(ctx.run))


@stage("roro_pairs")
def pairs_stage(roro: RoRoConfig, ctx: StageContext) -> dict:
    """Preference pairs by outcome, then LRM cost, then process quality; counts per pair category."""
    from rubricflow.methods.roro.judge.pairs import run_pairs

    ctx.run.log_input(trajectories_path(roro), context="training", name="routes")
    return run_pairs(roro, log=_logger(ctx.run))


@stage("roro_rubricor_judge", retries=1, metric_ns="train")
def rubricor_judge_stage(roro: RoRoConfig, ctx: StageContext) -> dict:
    """Warm start + alternating rejection-sampling fine-tuning of the Judge and the Rubricor; the phase with the best
    val pairwise accuracy is kept."""
    from rubricflow.methods.roro.judge.alternation import run_rubricor_judge

    log_judge_inputs(ctx.run, roro)
    return run_rubricor_judge(roro, log=_logger(ctx.run))


@stage("roro_router", retries=3, resumable=True, outputs=("roro.out_dir",), metric_ns="train")
def router_stage(roro: RoRoConfig, ctx: StageContext) -> dict:
    """GRPO routers (RoRo: outcome + process - cost; outcome-only) over the cost-weight sweep."""
    from rubricflow.methods.roro.router.train import run_router

    return run_router(roro, log=_logger(ctx.run))


@stage("roro_eval", aliases=("route-eval",), reads_test=True, metric_ns="test")
def eval_stage(roro: RoRoConfig, ctx: StageContext) -> dict:
    """Accuracy vs LRM cost on test problems: routers and baselines, curve PNG + data, the table, AUC per method;
    the kept Judge's pairwise accuracy on test pairs."""
    from rubricflow.methods.roro.router.evaluate import run_eval

    out = run_eval(roro, log=_logger(ctx.run))
    ctx.run.log_artifact(eval_dir(roro))
    return out
