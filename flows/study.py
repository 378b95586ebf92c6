"""Prefect flow ``study``: a multi-seed study (``rubricflow.study``) with one Prefect task per (variant, seed) unit.

The same units ``rubricflow study rucl`` runs: a unit whose ``result.json`` exists is skipped, the shared stages
(data, SFT, rubric tiers) are the main pipeline's outputs and the flow refuses to start without them. By default
the units run one after the other in the flow's process (what a CPU laptop can afford); ``fan_out=True`` submits
them all to the flow's task runner, so a task runner or work pool with more workers runs them side by side.
Every unit logs an MLflow child run under one parent run per flow run; the report (markdown, JSON, plot) is
written when all units are done. Run it directly: ``python -m flows.study``.
"""

import rubricflow.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

import os
from typing import Optional

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from pydantic import Field

from rubricflow.config import Profile, load_config
from rubricflow.study.harness import Unit, plan, report_study, require_shared, run_unit, study_spec
from tasks.secrets import load_secret


@task(name="study-unit", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10)
def unit_task(name: str, variant: str, seed: int, profile: str, overrides: dict, track: bool,
              flow_run_id: Optional[str] = None) -> dict:
    """Train and evaluate one (variant, seed) unit (skipped when its result.json exists; a retry resumes from the
    unit's latest training checkpoint)."""
    cfg = load_config(profile=profile, overrides=overrides)
    spec = study_spec(cfg, name)
    result = run_unit(cfg, name, spec, Unit(variant, seed), track=track, secret_resolver=load_secret,
                      prefect_flow_run_id=flow_run_id)
    get_run_logger().info("unit %s/seed%d: %s", variant, seed, "finished before" if result["skipped"] else "done")
    return result


@flow(name="study", log_prints=True)
def study(
    name: str = Field("rucl", description="Study: a sub-section of `study` in params.yaml."),
    profile: Profile = Field(Profile.tiny, description="Profile overlay of params.yaml (tiny: CPU; gpu: cluster)."),
    seeds: Optional[list[int]] = Field(None, description="Seeds (empty: study.<name>.seeds)."),
    variants: Optional[list[str]] = Field(None, description="Variants (empty: all of study.<name>.variants)."),
    overrides: dict = Field({}, description="Dotted config overrides applied to every unit."),
    fan_out: bool = Field(False, description="Submit every unit to the task runner at once (default: one by one)."),
    track: bool = Field(True, description="Log a parent MLflow run and one child run per unit."),
    report_name: Optional[str] = Field(None, description="Report file stem (empty: the study name)."),
) -> dict:
    profile = Profile(profile).value
    cfg = load_config(profile=profile, overrides=overrides)
    spec = study_spec(cfg, name)
    units = plan(spec, seeds or None, variants or None)  # empty lists: the section's (see the fields)
    require_shared(cfg, name, spec, units)
    ctx = FlowRunContext.get()
    flow_run_id = str(ctx.flow_run.id) if ctx and ctx.flow_run else None
    previous = os.environ.get("RUBRICFLOW_PIPELINE_ID")
    os.environ["RUBRICFLOW_PIPELINE_ID"] = f"prefect-study-{flow_run_id or os.getpid()}"
    try:
        args = dict(profile=profile, overrides=overrides, track=track, flow_run_id=flow_run_id)
        if fan_out:
            futures = {u: unit_task.submit(name, u.variant, u.seed, **args) for u in units}
            results = {u: f.result() for u, f in futures.items()}
        else:
            results = {u: unit_task(name, u.variant, u.seed, **args) for u in units}
        ran = sum(not r["skipped"] for r in results.values())
        return report_study(cfg, name, spec, units, results, n_ran=ran, track=track, report_name=report_name)
    finally:
        if previous is None:
            os.environ.pop("RUBRICFLOW_PIPELINE_ID", None)
        else:
            os.environ["RUBRICFLOW_PIPELINE_ID"] = previous


if __name__ == "__main__":
    import json

    print(json.dumps(study(), indent=1, default=str))
