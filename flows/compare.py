"""Prefect flow ``compare``: the ``rubricflow compare`` table of MLflow runs as table + markdown artifacts.

The form is typed: ``stage`` is a dropdown of the registered stages (its variants are compared with it, e.g. ``rucl``
beside ``rucl_outcome``), ``pipeline`` keeps one pipeline run's runs (its id, or ``latest``: the newest; empty: every
run of the stage), ``metrics`` are fnmatch patterns. Deployed as ``compare/compare-local`` (prefect.yaml).
"""

# No `from __future__ import annotations`: Prefect reads the annotations as objects to build the form's schema.

import rubricflow.util.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

from typing import Literal, Optional

from prefect import flow
from pydantic import Field

from rubricflow import registry
from rubricflow.tracking.compare import DEFAULT_METRICS
from tasks.artifacts import publish_comparison

StageName = Literal[tuple(sorted(registry.stages()))]  # type: ignore[valid-type]


@flow(name="compare", description="Compare MLflow runs of one stage and its variants: differing params, final metrics.")
def compare(
    experiment: str = Field("rubricflow", description="MLflow experiment."),
    stage: StageName = Field("rucl", description="Stage whose runs are compared, with its variants (rucl: rucl and "
                             "rucl_outcome side by side)."),
    pipeline: Optional[str] = Field("latest", description="One pipeline run's runs: its id (MLflow tag "
                                    "rubricflow.pipeline_id) or `latest`; empty: every run of the stage."),
    metrics: list[str] = Field(list(DEFAULT_METRICS), description="Metric name patterns (fnmatch)."),
) -> dict:
    return publish_comparison(experiment, stage, metrics, pipeline=pipeline or None)


if __name__ == "__main__":
    compare()
