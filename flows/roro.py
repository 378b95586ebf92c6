"""Prefect flow ``roro``: routing trajectories -> rubricor/judge -> router GRPO -> accuracy-vs-cost evaluation.

Same structure as flows/rucl.py (tasks = the stage functions dvc.yaml runs; typed, params.yaml-defaulted form).
"""

from __future__ import annotations

import rubricflow.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

from typing import Literal, Optional

from prefect import flow
from pydantic import Field

from rubricflow.config import Profile
from tasks.params import overrides_model
from tasks.pipeline import run_pipeline
from tasks.registry import PIPELINES

RoRoOverrides = overrides_model(
    "RoRoOverrides",
    {
        "task_source": "roro.task.source",
        "uncertainty": "roro.steps.uncertainty",
        "cost_weight": "roro.router.cost_weight",
        "process_weight": "roro.router.process_weight",
        "router_steps": "roro.router.grpo.steps",
        "seed": "roro.seed",
    },
    "RoRo knobs (process_weight 0 = the outcome-only router ablation).",
)
RoRoStage = Literal[tuple(PIPELINES["roro"])]  # type: ignore[valid-type]


@flow(name="roro", description="RoRo: rubric-guided process reward for a stepwise router.", log_prints=True)
def roro(
    profile: Profile = Field(Profile.tiny, description="Profile overlay of params.yaml (tiny: CPU; gpu: cluster)."),
    overrides: RoRoOverrides = Field(RoRoOverrides(), description="Method parameters (defaults: params.yaml)."),
    until: Optional[RoRoStage] = Field(None, description="Stop after this stage (empty: run the whole pipeline)."),
) -> dict:
    profile = Profile(profile)
    changed = overrides.changed()
    return run_pipeline("roro", profile.value, changed, until, params_for_report={"profile": profile.value, **changed})


if __name__ == "__main__":
    import json

    print(json.dumps(roro(), indent=1, default=str))
