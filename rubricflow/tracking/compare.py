"""Compare MLflow runs of one stage and its variants (ablations): the table behind ``rubricflow compare``.

Rows are the runs of the stage and of its variants (``rucl`` brings ``rucl_outcome``) in an experiment, grouped by
pipeline run, the newest pipeline run first, and inside one pipeline run in the registry's order of the stages: right
after ``make run`` the first rows are ``rucl`` and ``rucl_outcome`` of that run, side by side. ``pipeline`` limits
the rows to one pipeline run (its id, or ``latest``). Columns are the run, its stage, its pipeline id, the
parameters whose values differ between the rows (the ablation knobs, e.g. ``rucl.reward.mode``), the selected final
metrics (MLflow names: ``rubricflow.tracking.names``) and the columns the stage's method adds
(``Method.compare_columns``: RuCL's curriculum transition step). No Prefect import: the CLI
prints the table, the ``compare`` flow (flows/compare.py) and the pipeline flows publish it as a table artifact.
"""

from __future__ import annotations

import fnmatch
import math
import os
from dataclasses import dataclass, field
from typing import Any

from rubricflow import registry

DEFAULT_METRICS = ["train/final/*", "val/accuracy_after/*", "train/steps", "judge/failures_total"]


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


def stage_family(stage: str) -> list[str]:
    """``stage`` and the registered stages that are variants of it (``rucl`` -> ``rucl``, ``rucl_outcome``), in
    the registry's order; ``[stage]`` for a name the registry does not know."""
    known = registry.stages()
    family = [n for n, s in known.items() if n != stage and s.base == stage]
    return [stage, *family]


def compare_runs(
    experiment: str = "rubricflow",
    stage: str = "rucl",
    metric_patterns: list[str] | None = None,
    max_runs: int = 50,
    tracking_uri: str | None = None,
    pipeline: str | None = None,
) -> Comparison:
    """Build the comparison (see the module docstring). Raises ValueError naming the experiment/stage when there is
    nothing to compare."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri or os.environ["MLFLOW_TRACKING_URI"])
    if mlflow.get_experiment_by_name(experiment) is None:
        raise ValueError(f"MLflow experiment {experiment!r} does not exist ({mlflow.get_tracking_uri()})")
    import pandas as pd

    family = stage_family(stage)
    scope = f" and tags.`rubricflow.pipeline_id` = '{pipeline}'" if pipeline and pipeline != "latest" else ""
    found = [mlflow.search_runs(experiment_names=[experiment], filter_string=f"tags.`rubricflow.stage` = '{n}'{scope}",
                                max_results=max_runs, order_by=["attributes.start_time DESC"]) for n in family]
    found = [f for f in found if not f.empty]
    df = pd.concat(found, ignore_index=True) if found else pd.DataFrame()
    if not df.empty:
        df = df.sort_values("start_time", ascending=False).head(max_runs)  # the newest max_runs of the family
    out = Comparison(experiment, stage)
    if df.empty:
        every = mlflow.search_runs(experiment_names=[experiment], max_results=1000)
        found = sorted(set(every.get("tags.rubricflow.stage", []).dropna())) if not every.empty else []
        what = f"stage {stage!r}" + (f" or its variants {family[1:]}" if len(family) > 1 else "")
        where = f" of pipeline {pipeline!r}" if scope else ""
        raise ValueError(f"no runs of {what}{where} in experiment {experiment!r}; stages with runs: {found}")
    pid_col = "tags.rubricflow.pipeline_id"
    if pid_col not in df.columns:
        df[pid_col] = None
    # pipeline runs by their newest run, newest first; inside one, the registry's order of the stages
    newest = df.groupby(df[pid_col].fillna(""))["start_time"].transform("max")
    df = df.assign(_newest=newest, _order=df["tags.rubricflow.stage"].map(family.index))
    df = df.sort_values(["_newest", pid_col, "_order", "start_time"], ascending=[False, True, True, False],
                        na_position="last").drop(columns=["_newest", "_order"])
    if pipeline == "latest":
        df = df[df[pid_col].fillna("") == (df[pid_col].fillna("").iloc[0])]
    params = [c for c in df.columns if c.startswith("params.")]
    out.differing_params = sorted(c[len("params."):] for c in params if df[c].astype(str).nunique(dropna=False) > 1)
    patterns = metric_patterns or DEFAULT_METRICS
    mcols = [c[len("metrics."):] for c in df.columns if c.startswith("metrics.")]
    out.metrics = [m for m in mcols if any(fnmatch.fnmatch(m, p) for p in patterns)]
    out.metrics.sort(key=lambda m: next(i for i, p in enumerate(patterns) if fnmatch.fnmatch(m, p)))
    extra = dict(registry.owner(stage).compare_columns) if stage in registry.stages() else {}
    out.columns = ["run", "stage", "pipeline", "started", *out.differing_params, *out.metrics, *extra]
    for rec in df.to_dict("records"):
        row: dict[str, Any] = {
            "run": f"{rec.get('tags.mlflow.runName') or stage} {rec['run_id'][:8]}",
            "run_id": rec["run_id"],
            "stage": rec.get("tags.rubricflow.stage"),
            "pipeline": rec.get(pid_col),
            "started": rec["start_time"].strftime("%Y-%m-%d %H:%M") if rec.get("start_time") is not None else None,
        }
        for p in out.differing_params:
            row[p] = rec.get(f"params.{p}")
        for m in out.metrics:
            row[m] = rec.get(f"metrics.{m}")
        for name, read in extra.items():
            row[name] = read(rec)
        out.rows.append(row)
    return out
