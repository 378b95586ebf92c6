"""One factory for the pipeline flows: ``make_flow("rucl")`` is the Prefect flow of the registered ``rucl`` pipeline
(flows/pipelines.py makes one per registered pipeline).

Each flow takes typed parameters, so the Prefect UI renders a form: the profile (a dropdown of the ``profiles`` of
params.yaml; default: the pipeline's own profile, else the default one), the pipeline's knobs
(``Pipeline.knobs`` in ``rubricflow.registry``: typed fields copied from the config, defaults from params.yaml,
plus an ``extra`` map for any other dotted key) and ``until`` (a dropdown of the pipeline's stages). The body is
:func:`tasks.pipeline.run_pipeline`: in the project (git + DVC), one task per DVC stage, linked as DVC's graph links
them, each ``dvc repro --single-item`` (DVC decides what is stale); a form that changes a parameter runs as a DVC
experiment in a temporary worktree (tasks/dvc_stages.py). Independent stages run side by side, at most
``$RUBRICFLOW_RUN_JOBS`` (default 2, as ``make run``) at once.
"""

# No `from __future__ import annotations` here: Prefect reads the generated flow's annotations as objects to build
# its parameter schema, and they refer to models created inside make_flow.

import rubricflow.util.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

from typing import Literal, Optional

import os

from prefect import Flow, flow
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.params import Overrides, overrides_model, profile_choice
from rubricflow.config import DEFAULT_PROFILE
from rubricflow.registry import pipeline
from tasks.pipeline import run_pipeline


def overrides_name(name: str) -> str:
    """The name of pipeline ``name``'s parameter model in the UI form: ``rucl`` -> ``RuclOverrides``."""
    return "".join(part.title() for part in name.split("_")) + "Overrides"


def make_flow(name: str) -> tuple[Flow, type[Overrides]]:
    """The flow of pipeline ``name`` and its parameter model (:func:`overrides_name`; defaults: params.yaml under
    the pipeline's profile)."""
    pipe = pipeline(name)
    default_profile = pipe.profile or DEFAULT_PROFILE
    overrides_cls = overrides_model(overrides_name(name), pipe.knobs, pipe.knobs_help, profile=pipe.profile)
    stage_choice = Literal[tuple(pipe.stage_names)]  # type: ignore[valid-type]

    def run(
        profile: profile_choice() = Field(default_profile, description="Profile overlay of params.yaml "
                                          "(its `profiles`: tiny is CPU, gpu a cluster)."),
        overrides: overrides_cls = Field(overrides_cls(), description="Method parameters (defaults: params.yaml)."),
        until: Optional[stage_choice] = Field(
            None, description="Stop after this stage (empty: run the whole pipeline)."),
    ) -> dict:
        changed = overrides.changed()
        return run_pipeline(name, profile, changed, until, params_for_report={"profile": profile, **changed})

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"{pipe.description} Stages: {' -> '.join(pipe.stage_names)}."
    jobs = max(1, int(os.environ.get("RUBRICFLOW_RUN_JOBS", "2")))
    return flow(name=name, description=pipe.description, log_prints=True,
                task_runner=ThreadPoolTaskRunner(max_workers=jobs))(run), overrides_cls
