"""The body every pipeline flow shares: run its stages in order as tasks, then publish the report and plots.

``run_pipeline("rucl", profile, overrides)`` (called inside a ``@flow``):

1. sets ``RUBRICFLOW_PIPELINE_ID=prefect-<flow run id>`` for the run, so every stage's MLflow child run hangs
   under one parent run (tagged with the flow run id), and restores the previous value afterwards;
2. loads the config (params.yaml, profile, overrides) once: a bad parameter fails the flow before any work;
3. resolves the pipeline's stage list (tasks.registry), logging stages that are not registered yet by name, and
   writes the effective parameters where dvc.yaml's ``rubricflow resolve-params`` stage does (stages depend on them);
4. creates the ``judge-calls`` concurrency limit if a stage needs it and it is missing;
5. runs each stage as ``tasks.stage.stage_task`` (cache hit = skipped; missing outputs force a rerun);
6. publishes a markdown report artifact (also logged to the MLflow parent run), the plots of the stages that
   ran, and returns a summary dict. On a stage failure the report (with the failed stage) is still published,
   then the failure is raised so the flow run ends Failed.
"""

from __future__ import annotations

import os
import time
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import FlowRunContext

from rubricflow.config import load_config, write_resolved
from tasks.artifacts import artifact_key, mlflow_links, publish_comparison, publish_plots, report_markdown
from tasks.cache import inputs_for
from tasks.concurrency import ensure_judge_limit
from tasks.inputs import cmd_overrides, load_dvc_yaml, resolve_params_stage
from tasks.registry import VARIANTS, resolve
from tasks.stage import configured, options_for

# The stage whose runs each flow compares across invocations (ablations) in a `<flow>-compare` table artifact.
COMPARE_STAGE = {"rucl": "rucl", "deltarubric": "deltarubric_train", "roro": "roro_router"}


def _parent_run(pipeline_id: str, experiment: str) -> str | None:
    try:
        from rubricflow import tracking

        parent, _ = tracking.pipeline_runs(pipeline_id, experiment)
        return parent.info.run_id if parent is not None else None
    except Exception as e:  # noqa: BLE001 - the report still lists the stages
        get_run_logger().warning("MLflow parent run lookup failed: %s", e)
        return None


def run_pipeline(
    flow: str,
    profile: str,
    overrides: dict[str, Any] | None = None,
    until: str | None = None,
    track: bool = True,
    params_for_report: dict | None = None,
) -> dict:
    logger = get_run_logger()
    ctx = FlowRunContext.get()
    flow_run_id = str(ctx.flow_run.id) if ctx and ctx.flow_run else "local"
    pipeline_id = f"prefect-{flow_run_id}"
    previous = os.environ.get("RUBRICFLOW_PIPELINE_ID")
    os.environ["RUBRICFLOW_PIPELINE_ID"] = pipeline_id
    try:
        return _run(flow, flow_run_id, pipeline_id, profile, overrides or {}, until, track, params_for_report, logger)
    finally:
        if previous is None:
            os.environ.pop("RUBRICFLOW_PIPELINE_ID", None)
        else:
            os.environ["RUBRICFLOW_PIPELINE_ID"] = previous


def _run(flow, flow_run_id, pipeline_id, profile, overrides, until, track, params_for_report, logger) -> dict:
    cfg = load_config(profile=profile, overrides=overrides)
    resolved = resolve(flow, until)
    logger.info(resolved.message())
    if resolved.missing:
        logger.warning("stages not registered yet, skipped: %s", ", ".join(resolved.missing))
    if any(options_for(s).judge for s in resolved.available):
        limit, created = ensure_judge_limit()
        logger.info("judge-calls concurrency limit: %d slots%s", limit, " (created)" if created else "")
    logger.info("pipeline id %s (MLflow experiment %r)", pipeline_id, cfg.tracking.experiment)

    outcomes: list[dict] = []
    failure: BaseException | None = None
    dvc_stages = load_dvc_yaml()
    resolver = resolve_params_stage(dvc_stages)
    if resolver is not None:
        # dvc.yaml's `params` stage: the effective config (profile + this run's overrides), one JSON per section;
        # the stages depend on those files, so they also key the Prefect cache exactly as they key DVC's.
        written = write_resolved(cfg, resolver[1])
        logger.info("stage %s: resolved parameters into %s (%s)", resolver[0], resolver[1], ", ".join(sorted(written)))
    for name in resolved.available:
        stage_cfg = cfg
        if name in VARIANTS:  # e.g. rucl_outcome = the rucl stage with the dvc.yaml cmd's --set overrides
            if name not in dvc_stages:
                raise ValueError(f"pipeline {flow}: variant {name!r} of stage {VARIANTS[name]!r} is defined by its "
                                 f"dvc.yaml entry (cmd --set overrides), but dvc.yaml has no stage {name!r}")
            extra = cmd_overrides(dvc_stages[name], name)
            logger.info("stage %s = %s with %s", name, VARIANTS[name], extra)
            stage_cfg = load_config(profile=profile, overrides={**overrides, **extra})
        inp = inputs_for(name, stage_cfg)
        missing_outs = inp.missing_outputs()
        if missing_outs:
            logger.info("stage %s: outputs missing (%s): any cached result is recomputed", name, ", ".join(missing_outs))
        t0 = time.perf_counter()
        state = configured(name, flow, cfg.profile, refresh=bool(missing_outs), cache=inp.declared)(
            name, stage_cfg, track=track, pipeline=flow, return_state=True
        )
        secs = time.perf_counter() - t0
        if state.is_completed():
            res = state.result()
            status = "cached" if state.name == "Cached" else "ran"
            if status == "ran" and res.get("attempt", 1) > 1:
                status = f"ran (attempt {res['attempt']})"
            outcomes.append({"stage": name, "status": status, "seconds": secs, "metrics": res["metrics"],
                             "from_flow_run": res.get("flow_run_id")})
            continue
        outcomes.append({"stage": name, "status": state.name.lower(), "seconds": secs, "metrics": {}})
        try:
            state.result()
        except BaseException as e:  # noqa: BLE001 - re-raised after the report
            failure = e
        break

    parent = _parent_run(pipeline_id, cfg.tracking.experiment) if track else None
    run_ids = [o["metrics"].get("mlflow_run_id") for o in outcomes if o["status"] != "cached"]
    links = mlflow_links([r for r in [parent, *run_ids] if r])
    md = report_markdown(flow, flow_run_id, pipeline_id, outcomes, resolved.missing, parent, links,
                         params=params_for_report)
    create_markdown_artifact(md, key=artifact_key(flow, "report"), description=f"{flow} run report")
    if parent:
        _log_report_to_mlflow(parent, md, logger, finished=failure is None)
    ran = [o["stage"] for o in outcomes if o["status"] != "cached" and o["metrics"]]
    try:
        plots = publish_plots(flow, [o["stage"] for o in outcomes if o["metrics"]])
    except Exception as e:  # noqa: BLE001 - a plot must not turn a finished training into a failed run
        logger.warning("plot artifacts failed: %s", e)
        plots = []
    compare_stage = COMPARE_STAGE.get(flow)
    if track and compare_stage in ran:
        try:
            publish_comparison(cfg.tracking.experiment, compare_stage, key_prefix=flow + "-compare")
        except Exception as e:  # noqa: BLE001 - same reasoning as the plots
            logger.warning("comparison artifact failed: %s", e)
    if failure is not None:
        raise failure
    return {
        "flow": flow,
        "flow_run_id": flow_run_id,
        "pipeline_id": pipeline_id,
        "stages": {o["stage"]: o["status"] for o in outcomes},
        "ran": ran,
        "missing": resolved.missing,
        "mlflow_parent_run_id": parent,
        "plots": plots,
        "metrics": {o["stage"]: o["metrics"] for o in outcomes},
    }


def _log_report_to_mlflow(parent_id: str, md: str, logger, finished: bool) -> None:
    """Attach the report to the MLflow parent run and end it (the flow run is the whole pipeline invocation)."""
    try:
        import mlflow

        client = mlflow.tracking.MlflowClient(os.environ.get("MLFLOW_TRACKING_URI"))
        client.log_text(parent_id, md, "prefect_report.md")
        client.set_terminated(parent_id, "FINISHED" if finished else "FAILED")
    except Exception as e:  # noqa: BLE001
        logger.warning("could not update MLflow parent run %s: %s", parent_id, e)
