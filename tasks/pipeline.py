"""The body every pipeline flow shares: run its stages in order as tasks, then publish the report and plots.

``run_pipeline("rucl", profile, overrides)`` (called inside a ``@flow``):

1. sets ``RUBRICFLOW_PIPELINE_ID=prefect-<flow run id>`` for the run, so every stage's MLflow child run hangs
   under one parent run (tagged with the flow run id), and restores the previous value afterwards;
2. loads the config (params.yaml, profile, overrides) once: a bad parameter fails the flow before any work;
3. takes the pipeline's stage list from the registry (``rubricflow.registry``) and creates the ``judge-calls``
   concurrency limit if a stage needs it and it is missing;
4. in a git + DVC project whose dvc.yaml has the stages (the project itself, a clone), runs **DVC's stages**
   (:mod:`tasks.dvc_stages`): one task per stage of DVC's graph (``dvc repro --single-item``, as ``rubricflow
   repro``), each waiting for the stages it depends on, so DVC decides what is stale and the Prefect graph is the
   stage DAG; a run with overrides or another profile runs as a DVC experiment in a temporary worktree and never
   writes the main workspace's outputs;
5. elsewhere (a folder that is not a git + DVC project, a stage in no dvc.yaml) runs each stage in-process as
   ``tasks.stage.stage_task``, one after the other (cache hit = skipped; missing outputs force a rerun), after
   writing the effective parameters where dvc.yaml's ``params`` stage does;
6. publishes a markdown report artifact (also logged to the MLflow parent run), the plots of the stages that
   ran, and returns a summary dict. On a stage failure the report (with the failed stage) is still published,
   then the failure is raised so the flow run ends Failed.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import FlowRunContext
import yaml

from rubricflow import registry, tracking
from rubricflow.config import load_config, write_resolved
from rubricflow.pipeline.workspace import ProjectLock, opt_in_targets
from tasks.artifacts import artifact_key, mlflow_links, publish_comparison, publish_plots, report_markdown
from tasks.cache import inputs_for
from tasks.concurrency import ensure_judge_limit
from tasks.dvc_stages import (
    Workspace,
    dvc_address,
    experiment_workspace,
    is_dvc_pipeline,
    save_experiment,
    stage_dag,
    stage_env,
    submit_dag,
)
from tasks.stage import configured


def _parent_run(pipeline_id: str, experiment: str) -> str | None:
    try:

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

    dvc_file = pipe.dvc_file
    experiment = None
    if is_dvc_pipeline(Path.cwd(), dvc_file, [s.name for s in specs]):
        outcomes, failure, experiment = _run_dvc(pipe, specs, profile, overrides, flow_run_id, pipeline_id, logger)
    else:
        logger.info("%s has no DVC stages for pipeline %s (not a git + DVC project): the stages run in-process, "
                    "cached by their declared inputs", Path.cwd() / dvc_file, flow)
        outcomes, failure = _run_in_process(flow, specs, cfg, track, logger)

    parent = _parent_run(pipeline_id, cfg.tracking.experiment) if track else None
    run_ids = [o["metrics"].get("mlflow_run_id") for o in outcomes if o["status"] != "cached"]
    links = mlflow_links([r for r in [parent, *run_ids] if r])
    md = report_markdown(flow, flow_run_id, pipeline_id, outcomes, parent, links,
                         params=params_for_report)
    create_markdown_artifact(md, key=artifact_key(flow, "report"), description=f"{flow} run report")
    if parent:
        _log_report_to_mlflow(parent, md, logger, finished=failure is None)
    ran = [o["stage"] for o in outcomes if o["status"] not in ("cached", "unchanged") and o["metrics"]]
    try:  # an experiment's outputs were in its worktree, now removed: `dvc exp show` / `dvc plots diff` have them
        plots = [] if experiment else publish_plots(flow, [o["stage"] for o in outcomes if o["metrics"]])
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
        "dvc_experiment": experiment,
    }


def _params_profile(dvc_file: str, pipe_profile: str | None) -> str:
    """The profile the pipeline's DVC stages run under: the pipeline's own, else params.yaml's ``profile``."""
    if pipe_profile:
        return pipe_profile

    raw = yaml.safe_load(Path(os.environ.get("RUBRICFLOW_PARAMS", "params.yaml")).read_text()) or {}
    return str(raw.get("profile") or "tiny")


@contextlib.contextmanager
def _locked(root: Path, ws):
    """``ws`` under the project's repro lock (``rubricflow.pipeline.workspace``): a second writer of the workspace is
    refused, naming the first one's pid."""

    with ProjectLock(root / ".rubricflow" / "repro.lock"):
        yield ws


def _run_dvc(pipe, specs, profile, overrides, flow_run_id, pipeline_id, logger):
    """The pipeline's DVC stages as linked Prefect tasks (:mod:`tasks.dvc_stages`): in the main workspace when the
    run changes nothing, else as a DVC experiment in a temporary worktree. Returns (outcomes, failure, experiment)."""
    root = Path.cwd()
    changes = dict(overrides)
    if profile != _params_profile(pipe.dvc_file, pipe.profile):
        changes["profile"] = profile
    jobs = max(1, int(os.environ.get("RUBRICFLOW_RUN_JOBS", "2")))
    env = stage_env(pipeline_id, jobs, flow_run_id)

    opt_in_targets([pipe.dvc_file], logger.info, root)  # an opt-in pipeline (smol/dvc.yaml): make DVC see it
    dag = stage_dag(root, [dvc_address(pipe.dvc_file, s.name) for s in specs])
    logger.info("DVC stage graph: %s", "; ".join(f"{s} <- {', '.join(d) or '-'}" for s, d in dag.items()))
    log_dir = root / ".rubricflow" / "logs" / "flows" / flow_run_id
    judge = {s.name for s in specs if s.judge}
    retries = {s.name: s.retries for s in specs}
    if changes:
        name = f"prefect-{flow_run_id[:8]}"
        logger.info("overrides %s: the stages run as DVC experiment %s (a worktree of HEAD; the main workspace is "
                    "not touched)", changes, name)
        workspace = experiment_workspace(root, name, changes, env)
    else:  # the main workspace: one repro at a time (`rubricflow repro`, `make run` or another flow run)
        workspace = _locked(root, Workspace(root, env=env))
    with workspace as ws:
        outcomes = submit_dag(dag, ws, log_dir, judge, retries)
        failure = next((o.pop("error") for o in outcomes if "error" in o), None)
        if failure is None and ws.experiment:
            save_experiment(ws, list(dag))
            logger.info("saved DVC experiment %s (baseline %s): `dvc exp show`, `dvc exp apply %s`",
                        ws.experiment, (ws.baseline or "")[:7], ws.experiment)
    return outcomes, failure, (ws.experiment if failure is None else None)


def _run_in_process(flow, specs, cfg, track, logger) -> tuple[list[dict], BaseException | None]:
    """The stages as in-process tasks (a project without git + DVC, or stages in no dvc.yaml), one after the
    other, each waiting for the previous one's future; cached by :data:`tasks.cache.STAGE_CACHE`."""
    outcomes: list[dict] = []
    failure: BaseException | None = None
    previous = None
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
            logger.info("stage %s: outputs missing (%s): any cached result is recomputed", name,
                        ", ".join(missing_outs))
        t0 = time.perf_counter()
        fut = configured(name, flow, cfg.profile, refresh=bool(missing_outs), cache=inp.declared).submit(
            name, cfg, track=track, pipeline=flow, wait_for=[previous] if previous is not None else None
        )
        fut.wait()
        previous, state = fut, fut.state
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

    return outcomes, failure


def _log_report_to_mlflow(parent_id: str, md: str, logger, finished: bool) -> None:
    """Attach the report to the MLflow parent run and end it (the flow run is the whole pipeline invocation)."""
    try:
        import mlflow

        client = mlflow.tracking.MlflowClient(os.environ.get("MLFLOW_TRACKING_URI"))
        client.log_text(parent_id, md, "prefect_report.md")
        client.set_terminated(parent_id, "FINISHED" if finished else "FAILED")
    except Exception as e:  # noqa: BLE001
        logger.warning("could not update MLflow parent run %s: %s", parent_id, e)
