"""What a flow run shows in the Prefect UI: live progress, the run report, the plots.

* :class:`ProgressMirror` is a ``rubricflow.pipeline.progress`` listener: every ``with progress(desc, total)`` block
  inside a stage (SFT steps, GRPO steps, data generation ...) gets a Prefect progress artifact that follows it.
* :func:`report_markdown` builds the run report: per stage whether it ran, was cached or is not registered yet,
  its duration and key metrics, the lines the methods add (``Method.report_lines``: RuCL's curriculum transition
  step), and links to the MLflow
  runs (``$RUBRICFLOW_MLFLOW_UI``, default http://127.0.0.1:5000, the UI ``make ui`` starts).
* :func:`publish_plots` turns the dvc.yaml plots of the stages that ran into a table artifact (down-sampled rows)
  and an image artifact (a PNG data URI, rendered by rubricflow.tracking.plots).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
import os
import re
from typing import Any

from rubricflow import registry

log = logging.getLogger("rubricflow.tasks")

MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000"


def artifact_key(*parts: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(parts).lower())).strip("-")


# ----------------------------------------------------------------------------------------------------------------
# progress


class ProgressMirror:
    """rubricflow.pipeline.progress listener -> one Prefect progress artifact per progress description.

    A failing Prefect API call must not stop training: it is logged once per description and the mirror stops
    updating that artifact.
    """

    def __init__(self, stage: str):
        self.stage = stage
        self.ids: dict[str, Any] = {}
        self.failed: set[str] = set()
        self.updates = 0

    def __call__(self, desc: str, done: int, total: int | None) -> None:
        if desc in self.failed:
            return
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        pct = 100.0 * min(1.0, done / total) if total else 0.0
        try:
            if desc not in self.ids:
                self.ids[desc] = create_progress_artifact(
                    progress=pct,
                    key=artifact_key(*dict.fromkeys((self.stage, desc)), "progress"),
                    description=f"stage {self.stage}: {desc} ({done}/{total if total else '?'})",
                )
            else:
                update_progress_artifact(
                    self.ids[desc], progress=pct, description=f"stage {self.stage}: {desc} ({done}/{total or '?'})"
                )
            self.updates += 1
        except Exception as e:  # noqa: BLE001 - reported, training goes on
            self.failed.add(desc)
            log.warning("progress artifact for %s/%s disabled after a Prefect API error: %s", self.stage, desc, e)


# ----------------------------------------------------------------------------------------------------------------
# crash injection (tests and drills): RUBRICFLOW_INJECT_CRASH="<stage>:<k>"


class InjectedCrash(RuntimeError):
    """Raised by the crash hook; a retry of the task must resume from the stage's last checkpoint."""


class CrashHook:
    """Raise :class:`InjectedCrash` the first time the stage reports progress ``done >= k`` (first attempt only).

    Progress reports reach listeners at most every ~2 s (rubricflow.pipeline.progress), so the crash happens at the
    first report at or after step ``k``; checkpoints written before it are what the retry resumes from.
    """

    def __init__(self, stage: str, at: int):
        self.stage, self.at, self.fired_at = stage, at, None

    @classmethod
    def from_env(cls, stage: str, attempt: int) -> "CrashHook | None":
        spec = os.environ.get("RUBRICFLOW_INJECT_CRASH", "")
        if not spec or attempt != 1:
            return None
        name, _, k = spec.partition(":")
        if name != stage:
            return None
        if not k.isdigit():
            raise ValueError(f"RUBRICFLOW_INJECT_CRASH={spec!r}: expected '<stage>:<step>' with an integer step")
        return cls(stage, int(k))

    def __call__(self, desc: str, done: int, total: int | None) -> None:
        if self.fired_at is None and done >= self.at:
            self.fired_at = done
            raise InjectedCrash(f"injected crash in stage {self.stage} at progress {done} ({desc}) "
                                f"(RUBRICFLOW_INJECT_CRASH)")


# ----------------------------------------------------------------------------------------------------------------
# report


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def key_metrics(metrics: dict, limit: int = 5) -> list[tuple[str, Any]]:
    """The scalar/short metrics of a stage, bookkeeping keys left out; a per-task dict shows its ``overall``."""
    skip = {"mlflow_run_id", "duration_s", "checkpoint_dir", "splits"}
    out = []
    for k, v in metrics.items():
        if k in skip or v is None:
            continue
        if isinstance(v, dict) and "overall" in v:
            v = v["overall"]
        if isinstance(v, (int, float, str, bool)) or (isinstance(v, dict) and len(v) <= 3):
            out.append((k, v))
    return out[:limit]


def mlflow_links(run_ids: list[str], ui: str | None = None) -> dict[str, str]:
    """run id -> MLflow UI URL (experiment looked up in the tracking store; empty if unreachable)."""
    ui = (ui or os.environ.get("RUBRICFLOW_MLFLOW_UI") or MLFLOW_UI_DEFAULT).rstrip("/")
    links: dict[str, str] = {}
    if not run_ids:
        return links
    try:
        import mlflow

        from rubricflow.tracking import run_url

        client = mlflow.tracking.MlflowClient(os.environ.get("MLFLOW_TRACKING_URI"))
        for rid in run_ids:
            exp = client.get_run(rid).info.experiment_id
            links[rid] = run_url(rid, exp, ui)  # in the model-training view
    except Exception as e:  # noqa: BLE001 - links are a convenience; say why they are missing
        log.warning("MLflow links unavailable: %s", e)
    return links


def report_markdown(
    flow: str,
    flow_run_id: str,
    pipeline_id: str,
    outcomes: list[dict],
    parent_run_id: str | None = None,
    links: dict[str, str] | None = None,
    params: dict | None = None,
) -> str:
    """Markdown for the run report. ``outcomes``: ``{"stage", "status", "metrics", "seconds"}`` per stage."""
    links = links or {}
    lines = [f"# {flow} run report", "", f"- flow run `{flow_run_id}`, pipeline id `{pipeline_id}`"]
    if params:
        lines.append("- parameters: " + ", ".join(f"`{k}={_fmt(v)}`" for k, v in params.items()))
    if parent_run_id:
        url = links.get(parent_run_id)
        lines.append(f"- MLflow parent run: [{parent_run_id}]({url})" if url
                     else f"- MLflow parent run: `{parent_run_id}`")
    lines += registry.report_lines(outcomes)
    lines += ["", "| stage | status | seconds | key metrics | MLflow |", "|---|---|---|---|---|"]
    for o in outcomes:
        m = o.get("metrics") or {}
        rid = m.get("mlflow_run_id")
        mlf = f"[run]({links[rid]})" if rid and rid in links else (f"`{rid[:8]}`" if rid else "")
        km = "; ".join(f"{k}: {_fmt(v)}" for k, v in key_metrics(m)) or "-"
        secs = o.get("seconds")
        lines.append(f"| {o['stage']} | {o['status']} | {secs:.1f} | {km} | {mlf} |" if secs is not None
                     else f"| {o['stage']} | {o['status']} | - | {km} | {mlf} |")
    cached = [o["stage"] for o in outcomes if o["status"] == "cached"]
    if cached:
        lines += ["", f"Cached (inputs unchanged, results reused from an earlier run): {', '.join(cached)}"]
    return "\n".join(lines) + "\n"


def plot_key(flow: str, spec) -> str:
    """Artifact key of a plot: ``<flow>-<top-level plot id>``, or the file path without reports/, plots/ and the
    data suffix (``reports/plots/sft_loss.json`` -> ``<flow>-sft-loss``; images keep theirs: ``...-curriculum-png``)."""
    if spec.stage is None:
        return artifact_key(flow, spec.id)
    p = Path(spec.id)
    parts = [x for x in p.with_suffix("").parts if x not in ("reports", "plots")]
    return artifact_key(flow, *parts, *([p.suffix[1:]] if spec.is_image else []))


def publish_plots(flow: str, stages: list[str]) -> list[str]:
    """Table + image artifacts for the dvc.yaml plots of ``stages`` that exist; returns the plot ids published."""
    from prefect.artifacts import create_image_artifact, create_table_artifact

    from rubricflow.tracking.plots import data_uri, render, specs_for_stages, table_rows

    done = []
    for spec in specs_for_stages(stages):
        if not all(os.path.exists(f) for f in spec.files):
            log.warning("plot %s of stage %s: %s not written", spec.id, spec.stage, spec.files)
            continue
        key = plot_key(flow, spec)
        if not spec.is_image:
            create_table_artifact(table_rows(spec), key=f"{key}-table",
                                  description=f"{spec.title or spec.id} (stage {spec.stage}; down-sampled rows)")
        mime = "image/svg+xml" if spec.files[0].endswith(".svg") else "image/png"
        create_image_artifact(data_uri(render(spec), mime if spec.is_image else "image/png"), key=f"{key}-plot",
                              description=f"{spec.title or spec.id} (stage {spec.stage})")
        done.append(spec.id)
    return done


def publish_comparison(experiment: str, stage: str, metrics: list[str] | None = None, key_prefix: str = "compare",
                       pipeline: str | None = None) -> dict:
    """Table + markdown artifacts of ``rubricflow.tracking.compare.compare_runs`` (``pipeline``: one pipeline run's
    runs, its id or ``latest``); returns the comparison as a dict."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    from rubricflow.tracking.compare import compare_runs

    cmp = compare_runs(experiment, stage, metrics, pipeline=pipeline)
    rows = [{c: r.get(c) for c in cmp.columns} for r in cmp.rows]
    create_table_artifact(rows, key=artifact_key(key_prefix, stage, "table"),
                          description=f"{stage} runs in MLflow experiment {experiment}: "
                                      "differing params, final metrics")
    create_markdown_artifact(cmp.markdown(), key=artifact_key(key_prefix, stage), description=f"{stage} comparison")
    return {"columns": cmp.columns, "rows": rows, "differing_params": cmp.differing_params}
