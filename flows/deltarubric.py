"""Prefect flow ``deltarubric``: preference pairs -> warm-start SFT -> multi-role GRPO -> judge accuracy tables.

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

DeltaRubricOverrides = overrides_model(
    "DeltaRubricOverrides",
    {
        "planner_reward": "deltarubric.train.planner_reward",
        "algorithm": "deltarubric.train.algorithm",
        "guidance_lambda": "deltarubric.train.guidance_lambda",
        "n_checklists": "deltarubric.train.n_checklists",
        "m_verdicts": "deltarubric.train.m_verdicts",
        "train_steps": "deltarubric.train.grpo.steps",
        "sft_steps": "deltarubric.sft.steps",
        "seed": "seed",
    },
    "DeltaRubric knobs (planner reward and verifier guidance are the paper's ablations).",
)
DeltaRubricStage = Literal[tuple(PIPELINES["deltarubric"])]  # type: ignore[valid-type]


@flow(name="deltarubric", description="DeltaRubric: planner + checklist verifier, multi-role GRPO.", log_prints=True)
def deltarubric(
    profile: Profile = Field(Profile.tiny, description="Profile overlay of params.yaml (tiny: CPU; gpu: cluster)."),
    overrides: DeltaRubricOverrides = Field(DeltaRubricOverrides(), description="Method parameters (defaults: params.yaml)."),
    until: Optional[DeltaRubricStage] = Field(None, description="Stop after this stage (empty: run the whole pipeline)."),
) -> dict:
    profile = Profile(profile)
    changed = overrides.changed()
    return run_pipeline("deltarubric", profile.value, changed, until,
                        params_for_report={"profile": profile.value, **changed})


if __name__ == "__main__":
    import json

    print(json.dumps(deltarubric(), indent=1, default=str))
