"""RoRo pipeline stages (``rubricflow roro-models`` ... ``rubricflow route-eval``, dvc.yaml, Prefect tasks).

Each stage takes the full ``Config``, uses its ``roro`` section and calls the matching ``rubricflow.roro.pipeline``
function; tracking (an MLflow child run, ``reports/<stage>.json``) comes from the ``@stage`` wrapper. Per-step
training curves (Judge/Rubricor phases, router GRPO steps) are logged to the run as they happen.
"""

from __future__ import annotations

from rubricflow.stages import NullRun, stage


def _roro(cfg):
    sec = getattr(cfg, "roro", None)
    if sec is None:
        raise AttributeError(
            "Config has no `roro` section: compose rubricflow.roro.config.RoRoConfig into rubricflow.config.Config "
            "(the `roro` entry of _method_sections)"
        )
    return sec


def _logger(run):
    counters: dict[str, int] = {}

    def log(name: str, row: dict) -> None:
        step = counters.get(name, 0)
        counters[name] = step + 1
        run.log_metrics({f"{name}/{k}": v for k, v in row.items() if isinstance(v, (int, float))
                         and not isinstance(v, bool)}, step=int(row.get("step", step)))

    return log


@stage("roro_models", sections=("roro",))
def models_stage(cfg, run=NullRun()) -> dict:
    """Train the small (SLM) and large (LRM) step models on step-by-step arithmetic solutions."""
    from rubricflow.roro.pipeline import run_models

    return run_models(_roro(cfg), log=_logger(run))


@stage("roro_trajectories", sections=("roro",))
def trajectories_stage(cfg, run=NullRun()) -> dict:
    """Route train/val problems with all-SLM, all-LRM, random and threshold policies; store the trajectories."""
    from rubricflow.roro.pipeline import run_trajectories

    return run_trajectories(_roro(cfg), log=_logger(run))


@stage("roro_pairs", sections=("roro",))
def pairs_stage(cfg, run=NullRun()) -> dict:
    """Preference pairs by outcome, then LRM cost, then process quality."""
    from rubricflow.roro.pipeline import run_pairs

    return run_pairs(_roro(cfg), log=_logger(run))


@stage("roro_rubricor_judge", sections=("roro",))
def rubricor_judge_stage(cfg, run=NullRun()) -> dict:
    """Warm start + alternating rejection-sampling fine-tuning of the Judge and the Rubricor."""
    from rubricflow.roro.pipeline import run_rubricor_judge

    return run_rubricor_judge(_roro(cfg), log=_logger(run))


@stage("roro_router", sections=("roro",))
def router_stage(cfg, run=NullRun()) -> dict:
    """GRPO routers (RoRo: outcome + process - cost; outcome-only) over the cost-weight sweep."""
    from rubricflow.roro.pipeline import run_router

    return run_router(_roro(cfg), log=_logger(run))


@stage("roro_eval", sections=("roro",))
def eval_stage(cfg, run=NullRun()) -> dict:
    """Accuracy vs LRM cost on held-out problems: routers and baselines, curve PNG + data, the table."""
    from rubricflow.roro.pipeline import eval_dir, run_eval

    out = run_eval(_roro(cfg), log=_logger(run))
    run.log_artifact(eval_dir(_roro(cfg)))
    return out
