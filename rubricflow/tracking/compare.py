"""Compare MLflow runs of one stage across pipeline invocations (ablations): the table behind ``rubricflow compare``.

Rows are the stage's runs in an experiment (newest first, from ``mlflow.search_runs``); columns are the run, the
parameters whose values differ between the rows (the ablation knobs, e.g. ``rucl.reward.mode``), the selected
final metrics and the curriculum transition step (the ``transition_step`` metric, else the ``step`` of the
``event.curriculum_transition`` tag, else ``-`` = never switched). No Prefect import: the CLI prints the table,
the ``compare`` flow (flows/compare.py) and the pipeline flows publish it as a table artifact.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

DEFAULT_METRICS = ["final/*", "accuracy_after*", "steps", "judge_failures_total"]


@dataclass
class Comparison:
    experiment: str
    stage: str
    columns: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    differing_params: list[str] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        if not self.rows:
            return f"No runs of stage `{self.stage}` in experiment `{self.experiment}`.\n"
        head = "| " + " | ".join(self.columns) + " |\n|" + "---|" * len(self.columns) + "\n"
        body = "".join("| " + " | ".join(_fmt(r.get(c)) for c in self.columns) + " |\n" for r in self.rows)
        return f"### {self.stage} runs in `{self.experiment}`\n\n" + head + body


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _transition(row: dict) -> Any:
    v = row.get("metrics.transition_step")
    if v is not None and not (isinstance(v, float) and math.isnan(v)):
        return int(v)
    tag = row.get("tags.event.curriculum_transition")
    if isinstance(tag, str) and tag:
        try:
            return json.loads(tag).get("step")
        except (json.JSONDecodeError, AttributeError):
            return tag[:40]
    return None


def compare_runs(
    experiment: str = "rubricflow",
    stage: str = "rucl",
    metric_patterns: list[str] | None = None,
    max_runs: int = 50,
    tracking_uri: str | None = None,
) -> Comparison:
    """Build the comparison. Raises ValueError naming the experiment/stage when there is nothing to compare."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri or os.environ["MLFLOW_TRACKING_URI"])
    if mlflow.get_experiment_by_name(experiment) is None:
        raise ValueError(f"MLflow experiment {experiment!r} does not exist ({mlflow.get_tracking_uri()})")
    df = mlflow.search_runs(
        experiment_names=[experiment],
        filter_string=f"tags.`rubricflow.stage` = '{stage}'",
        max_results=max_runs,
        order_by=["attributes.start_time DESC"],
    )
    out = Comparison(experiment, stage)
    if df.empty:
        every = mlflow.search_runs(experiment_names=[experiment], max_results=1000)
        found = sorted(set(every.get("tags.rubricflow.stage", []).dropna())) if not every.empty else []
        raise ValueError(f"no runs of stage {stage!r} in experiment {experiment!r}; stages with runs: {found}")
    params = [c for c in df.columns if c.startswith("params.")]
    out.differing_params = sorted(c[len("params."):] for c in params if df[c].astype(str).nunique(dropna=False) > 1)
    patterns = metric_patterns or DEFAULT_METRICS
    mcols = [c[len("metrics."):] for c in df.columns if c.startswith("metrics.")]
    out.metrics = [m for m in mcols if any(fnmatch.fnmatch(m, p) for p in patterns) and m != "transition_step"]
    out.metrics.sort(key=lambda m: next(i for i, p in enumerate(patterns) if fnmatch.fnmatch(m, p)))
    out.columns = ["run", "started", *out.differing_params, *out.metrics, "transition_step"]
    for rec in df.to_dict("records"):
        row: dict[str, Any] = {
            "run": f"{rec.get('tags.mlflow.runName') or stage} {rec['run_id'][:8]}",
            "run_id": rec["run_id"],
            "started": rec["start_time"].strftime("%Y-%m-%d %H:%M") if rec.get("start_time") is not None else None,
        }
        for p in out.differing_params:
            row[p] = rec.get(f"params.{p}")
        for m in out.metrics:
            row[m] = rec.get(f"metrics.{m}")
        row["transition_step"] = _transition(rec)
        out.rows.append(row)
    return out
