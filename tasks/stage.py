"""The Prefect task that runs one manifest stage: the same ``StageSpec`` ``rubricflow <stage>`` and ``dvc repro`` run.

``stage_task(stage, cfg)`` looks the stage up in the registry (``rubricflow.registry``) and calls
``spec(cfg, track=..., prefect_flow_run_id=..., secret_resolver=...)`` (the stage opens its MLflow child run under
the pipeline's parent, keyed by ``$RUBRICFLOW_PIPELINE_ID`` which the flow sets; a variant applies its own
overrides). Around the call it

* mirrors ``rubricflow.pipeline.progress`` into Prefect progress artifacts (:class:`tasks.artifacts.ProgressMirror`);
* holds a ``judge-calls`` global concurrency slot when the stage calls judges (:mod:`tasks.concurrency`);
* installs the crash hook ``RUBRICFLOW_INJECT_CRASH=<stage>:<k>`` (first attempt only; tests and drills);
* is cached by :data:`tasks.cache.STAGE_CACHE` (declared params + dep file contents + stage source).

Retries, the judge slot and the resumable tag come from the spec (``@stage(retries=..., judge=..., resumable=...)``):
stages that call judges or run long enough to be interrupted are retried with exponential backoff and jitter (GRPO
training resumes from its latest checkpoint on a retry, so a retry costs at most ``checkpoint_every`` steps).
Errors that a retry cannot fix (bad config, failed data gate, missing file or section: ``ValueError``/``KeyError``/
``AttributeError``/``ImportError``/``FileNotFoundError``/``TypeError``) are not retried.
"""

from __future__ import annotations

import contextlib
import os

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext
from prefect.tasks import exponential_backoff

from rubricflow import registry
from rubricflow.config import Config
from rubricflow.pipeline import progress as rf_progress
from tasks.artifacts import CrashHook, ProgressMirror
from tasks.cache import STAGE_CACHE, inputs_for
from tasks.concurrency import JUDGE_LIMIT
from tasks.secrets import load_secret


NOT_RETRIED = (ValueError, KeyError, AttributeError, ImportError, FileNotFoundError, TypeError)


def retry_delay_base() -> float:
    """First retry delay in seconds (doubles per retry, +-50% jitter); ``$RUBRICFLOW_RETRY_DELAY_S``, default 10."""
    return float(os.environ.get("RUBRICFLOW_RETRY_DELAY_S", "10"))


def _retryable(task, task_run, state) -> bool:
    try:
        state.result()
    except NOT_RETRIED:
        return False
    except BaseException:  # noqa: BLE001 - anything else (crash, judge outage, OOM-kill of a child) is retried
        return True
    return True


@task(
    name="stage",
    cache_policy=STAGE_CACHE,
    persist_result=True,
    result_serializer="json",
    retry_condition_fn=_retryable,
)
def stage_task(stage: str, cfg: Config, track: bool = True, pipeline: str = "") -> dict:
    """Run a manifest stage on the pipeline's config (a variant applies its own overrides); returns
    ``{"stage", "metrics", "attempt", "flow_run_id", "inputs_key"}``."""
    logger = get_run_logger()
    ctx = TaskRunContext.get()
    attempt = ctx.task_run.run_count if ctx else 1
    flow_run_id = str(ctx.task_run.flow_run_id) if ctx and ctx.task_run.flow_run_id else None
    inp = inputs_for(stage, cfg)
    for note in inp.notes:
        logger.warning(note)
    spec = registry.stage(stage)
    mirror = ProgressMirror(stage)
    hooks = [mirror]
    crash = CrashHook.from_env(stage, attempt)
    if crash is not None:
        logger.warning("crash hook armed: stage %s fails at progress >= %d on this attempt", stage, crash.at)
        hooks.append(crash)
    for h in hooks:
        rf_progress.add_listener(h)
    if attempt > 1:  # warnings: retries must be visible at rubricflow's default PREFECT_LOGGING_LEVEL (WARNING)
        logger.warning("stage %s: attempt %d (a resumable stage continues from its latest checkpoint)", stage, attempt)
    slot = contextlib.nullcontext()
    if spec.judge:
        from prefect.concurrency.sync import concurrency

        slot = concurrency(JUDGE_LIMIT, occupy=1, strict=True)
    try:
        with slot:
            metrics = spec(cfg, track=track, prefect_flow_run_id=flow_run_id, secret_resolver=load_secret)
    finally:
        for h in hooks:
            rf_progress.remove_listener(h)
    if metrics.get("resumed_from") is not None:
        logger.warning("stage %s resumed from checkpoint step %s", stage, metrics["resumed_from"])
    return {
        "stage": stage,
        "metrics": metrics,
        "attempt": attempt,
        "flow_run_id": flow_run_id,
        "inputs_key": inp.key(),
    }


def configured(stage: str, pipeline: str, profile: str, refresh: bool = False, cache: bool = True):
    """``stage_task`` with the stage's name, tags, retries, backoff, and its caching: ``refresh`` recomputes and
    overwrites the cached result (outputs missing); ``cache=False`` runs uncached (stage not in dvc.yaml)."""
    spec = registry.stage(stage)
    tags = {"rubricflow", f"pipeline:{pipeline}", f"stage:{stage}", f"profile:{profile}"}
    if spec.judge:
        tags.add(JUDGE_LIMIT)
    if spec.resumable:
        tags.add("resumable")
    return stage_task.with_options(
        name=stage,
        task_run_name=stage,
        tags=sorted(tags),
        retries=spec.retries,
        retry_delay_seconds=exponential_backoff(backoff_factor=retry_delay_base()) if spec.retries else 0,
        retry_jitter_factor=0.5 if spec.retries else None,
        timeout_seconds=spec.timeout_s,
        refresh_cache=refresh,
        **({} if cache else {"cache_policy": NO_CACHE}),
    )
