"""Prefect flow ``rucl``: data -> validate -> base_model -> sft -> rubrics -> stratify -> rucl (GRPO) -> rucl_eval.

The tasks are the stage functions ``dvc repro`` and ``rubricflow <stage>`` run (see tasks/). Parameters are typed:
the Prefect UI renders a form with a profile dropdown, the reward-mode and curriculum-shape dropdowns, the step
counts and an ``extra`` map for any other dotted key; defaults come from params.yaml. Run it

* directly: ``python -m flows.rucl`` (a temporary Prefect server is started if none is configured),
* as the deployment ``rucl/rucl-local`` (prefect.yaml; ``make ui`` registers it and runs a worker),
* up to a stage: ``rucl(until="sft")``.
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

RuCLOverrides = overrides_model(
    "RuCLOverrides",
    {
        "reward_mode": "rucl.reward.mode",
        "curriculum_shape": "rucl.curriculum.shape",
        "alpha": "rucl.reward.alpha",
        "window": "rucl.curriculum.window",
        "threshold": "rucl.curriculum.threshold",
        "train_steps": "rucl.grpo.steps",
        "sft_steps": "sft.steps",
        "seed": "seed",
    },
    "RuCL knobs (the ablations of the paper are reward_mode and curriculum_shape).",
)
RuCLStage = Literal[tuple(PIPELINES["rucl"])]  # type: ignore[valid-type]


@flow(name="rucl", description="RuCL: stratified rubric curriculum + GRPO.", log_prints=True)
def rucl(
    profile: Profile = Field(Profile.tiny, description="Profile overlay of params.yaml (tiny: CPU; gpu: cluster)."),
    overrides: RuCLOverrides = Field(RuCLOverrides(), description="Method parameters (defaults: params.yaml)."),
    until: Optional[RuCLStage] = Field(None, description="Stop after this stage (empty: run the whole pipeline)."),
) -> dict:
    profile = Profile(profile)
    changed = overrides.changed()
    return run_pipeline("rucl", profile.value, changed, until, params_for_report={"profile": profile.value, **changed})


if __name__ == "__main__":
    import json

    print(json.dumps(rucl(), indent=1, default=str))
