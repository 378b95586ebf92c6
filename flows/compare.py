"""Prefect flow ``compare``: the ``rubricflow compare`` table of MLflow runs as table + markdown artifacts."""

from __future__ import annotations

import rubricflow.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

from prefect import flow
from pydantic import Field

from tasks.artifacts import publish_comparison
from rubricflow.tracking.compare import DEFAULT_METRICS


@flow(name="compare", description="Compare MLflow runs of one stage (ablations): differing params, final metrics.")
def compare(
    experiment: str = Field("rubricflow", description="MLflow experiment."),
    stage: str = Field("rucl", description="Stage whose runs are compared (e.g. rucl, deltarubric_train, sft)."),
    metrics: list[str] = Field(list(DEFAULT_METRICS), description="Metric name patterns (fnmatch)."),
) -> dict:
    return publish_comparison(experiment, stage, metrics)


if __name__ == "__main__":
    compare()
