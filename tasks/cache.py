"""The stage tasks' Prefect cache policy: rerunning a flow with the same inputs skips finished stages.

``STAGE_CACHE = (INPUTS - "cfg" - "pipeline") + StageInputsPolicy()``: the task's plain inputs (stage name, tracking
flag) plus the key of :mod:`rubricflow.pipeline.inputs` (declared params, dep file contents, stage source), computed
when the task starts, i.e. after the upstream stages wrote their outputs. The whole ``Config`` is *not* hashed: changing
``rucl.reward.mode`` must not rerun ``data``.

Results (the stage's metrics dict) and cache records are persisted under ``$PREFECT_HOME/storage`` (inside
``.rubricflow/`` by ``rubricflow.util.env``), so the cache works across flow runs and across (temporary) servers.
A cache hit whose declared outputs were deleted meanwhile is not trusted: :func:`tasks.pipeline.run_pipeline`
runs such a stage with ``refresh_cache=True``, which recomputes it and overwrites the record under the same key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect.cache_policies import INPUTS, CachePolicy

from rubricflow import registry
from rubricflow.pipeline.inputs import spec_inputs


def inputs_for(stage: str, cfg):
    """Declared inputs of a manifest stage (a variant: its own dvc.yaml entry and overrides, its function's code)."""
    return spec_inputs(registry.stage(stage), cfg)


@dataclass
class StageInputsPolicy(CachePolicy):
    """Key = hash of the stage's declared inputs (see rubricflow.pipeline.inputs)."""

    def compute_key(self, task_ctx, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs) -> str | None:
        stage, cfg = inputs.get("stage"), inputs.get("cfg")
        if stage is None or cfg is None:
            return None
        inp = inputs_for(stage, cfg)  # notes (e.g. "not in dvc.yaml") are logged by the task itself
        return f"{stage}-{inp.key()}"


STAGE_CACHE = (INPUTS - "cfg" - "pipeline") + StageInputsPolicy()
