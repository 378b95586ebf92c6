"""The short, human-readable summary printed at the end of ``make run``: the run, then each registered method's
lines (``Method.summary``), then where to look in MLflow. The same lines, from the committed stage reports, are the
README's "What make run shows" block (:func:`write_readme_block`), so its numbers come from a command, not a hand."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rubricflow import registry, tracking
from rubricflow.sections import TrackingConfig
from rubricflow.util.io import atomic_write_text


def load_report(path: Path) -> dict | list | None:
    """A stage report (JSON), or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def fmt_acc(d: dict | None) -> str:
    if not d:
        return "n/a"
    return ", ".join(f"{k} {v:.0%}" for k, v in d.items())


def key_lines(reports_dir: str | Path) -> list[str]:
    """Every registered method's summary lines for the stage reports under ``reports_dir`` that exist."""
    r = Path(reports_dir)
    return [line for m in registry.methods().values() if m.summary for line in m.summary(r)]


def print_summary(
    reports_dir: str | Path, tracking_cfg: TrackingConfig, pipeline_id: str | None = None,
    elapsed_s: float | None = None,
) -> None:
    try:
        tracking.backfill_dvc_tags(pipeline_id, tracking_cfg.experiment)
        parent, children = tracking.pipeline_runs(pipeline_id, tracking_cfg.experiment)
    except Exception as e:  # noqa: BLE001 - the summary must still print the local reports
        parent, children = None, []
        print(f"(MLflow runs unavailable: {e})")
    print("\n=== rubricflow summary " + "=" * 50)
    if elapsed_s is not None:
        print(f"elapsed     {elapsed_s:.0f} s")
    if children:
        print("ran         " + ", ".join(c.data.tags.get("rubricflow.stage", "?") for c in children))
    else:
        print("ran         nothing new (all stages up to date); numbers below are from the last runs")
    for line in key_lines(reports_dir):
        print(line)
    if parent is not None:
        print(f"mlflow      parent run {parent.info.run_id} in experiment '{tracking_cfg.experiment}': "
              f"{tracking.experiment_url(parent.info.experiment_id)}")
        if parent.info.status == "RUNNING":
            tracking.finish_parent(parent.info.run_id, children)
    print("open        make ui   (Prefect http://127.0.0.1:4200, MLflow http://127.0.0.1:5000)")
    uri = _uri()
    local = tracking.store_artifacts_dir(uri)
    print("            or: .venv/bin/mlflow ui --backend-store-uri " + uri
          + (f" --artifacts-destination {local}" if local is not None else ""))
    print("=" * 73)


def _uri() -> str:

    return os.environ.get("MLFLOW_TRACKING_URI", "")


README_BEGIN = "<!-- make-run-summary:begin (rubricflow summary --readme README.md writes this block) -->"
README_END = "<!-- make-run-summary:end -->"


def readme_block(reports_dir: str | Path) -> str:
    """The README block: the methods' summary lines for the stage reports under ``reports_dir``, as a text block."""
    return "\n".join([README_BEGIN, "```text", *key_lines(reports_dir), "```", README_END])


def write_readme_block(readme: str | Path, reports_dir: str | Path) -> bool:
    """Replace the block between the markers in ``readme`` with :func:`readme_block`; returns whether it changed.
    A README without exactly one pair of markers is refused, naming the markers."""

    path = Path(readme)
    text = path.read_text()
    begin, end = text.count(README_BEGIN), text.count(README_END)
    if begin != 1 or end != 1 or text.index(README_BEGIN) > text.index(README_END):
        raise ValueError(f"{path}: expected one block from {README_BEGIN!r} to {README_END!r} "
                         f"(found {begin} begin and {end} end markers)")
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    new = head + readme_block(reports_dir) + tail
    if new != text:
        atomic_write_text(path, new)
    return new != text
