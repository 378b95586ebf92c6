"""The body every pipeline flow shares: run its stages in order as tasks, then publish the report and plots.

``run_pipeline("rucl", profile, overrides)`` (called inside a ``@flow``):

1. sets ``RUBRICFLOW_PIPELINE_ID=prefect-<flow run id>`` for the run, so every stage's MLflow child run hangs
   under one parent run (tagged with the flow run id), and restores the previous value afterwards;
2. loads the config (params.yaml, profile, overrides) once: a bad parameter fails the flow before any work;
3. takes the pipeline's stage list from the registry (``rubricflow.registry``) and writes the effective parameters
   where dvc.yaml's ``params`` stage does (``rubricflow resolve-params``; the stages depend on those files);
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

from rubricflow import registry
from rubricflow.config import load_config, write_resolved
from tasks.artifacts import artifact_key, mlflow_links, publish_comparison, publish_plots, report_markdown
from tasks.cache import inputs_for
from tasks.concurrency import ensure_judge_limit
from tasks.stage import configured


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
    pipe = registry.pipeline(flow)
    specs = pipe.until(until)
    logger.info("pipeline %s: stages %s", flow, ", ".join(s.name for s in specs))
    if any(s.judge for s in specs):
        limit, created = ensure_judge_limit()
        logger.info("judge-calls concurrency limit: %d slots%s", limit, " (created)" if created else "")
    logger.info("pipeline id %s (MLflow experiment %r)", pipeline_id, cfg.tracking.experiment)

    outcomes: list[dict] = []
    failure: BaseException | None = None
    # dvc.yaml's `params` stage: the effective config (profile + this run's overrides), one JSON per section; the
    # stages depend on those files, so they also key the Prefect cache exactly as they key DVC's.
    written = write_resolved(cfg, registry.PARAMS_DIR)
    logger.info("stage %s: resolved parameters into %s (%s)", registry.PARAMS_STAGE, registry.PARAMS_DIR,
                ", ".join(sorted(written)))
    for spec in specs:
        name = spec.name
        if spec.overrides:  # e.g. rucl_outcome = the rucl stage with rucl.reward.mode=outcome ...
            logger.info("stage %s = %s with %s", name, spec.base, dict(spec.overrides))
        inp = inputs_for(name, cfg)
        missing_outs = inp.missing_outputs()
        if missing_outs:
            logger.info("stage %s: outputs missing (%s): any cached result is recomputed", name, ", ".join(missing_outs))
        t0 = time.perf_counter()
        state = configured(name, flow, cfg.profile, refresh=bool(missing_outs), cache=inp.declared)(
            name, cfg, track=track, pipeline=flow, return_state=True
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
    md = report_markdown(flow, flow_run_id, pipeline_id, outcomes, parent, links,
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
    compare_stage = pipe.compare
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
