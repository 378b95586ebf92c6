"""The short, human-readable summary printed at the end of ``make run``."""

from __future__ import annotations

import json
from pathlib import Path

from rubricflow.config import Config


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _fmt_acc(d: dict | None) -> str:
    if not d:
        return "n/a"
    return ", ".join(f"{k} {v:.0%}" for k, v in d.items())


def key_lines(cfg: Config) -> list[str]:
    """One line per stage report that exists, with its key numbers."""
    r = Path(cfg.reports_dir)
    lines = []
    if (m := _load(r / "data.json")):
        lines.append(f"data        {m['n_samples']} samples {m.get('splits')}")
    if (m := _load(r / "validate.json")):
        lines.append(f"validate    {m['n_rows']} rows passed {m['expectations']} expectations")
    if (m := _load(r / "base_model.json")):
        lines.append(f"base model  {m.get('arch', '')} {m['params']:,} params ({m['source']})")
    if (m := _load(r / "sft.json")):
        lines.append(f"sft         before: {_fmt_acc(m['accuracy_before'])}")
        lines.append(f"            after:  {_fmt_acc(m['accuracy_after'])}")
        if m.get("majority_baseline"):
            lines.append(f"            chance: {_fmt_acc(m['majority_baseline'])} (most frequent answer)")
    for name, fn in _EXTRA:
        if (m := _load(r / f"{name}.json")):
            lines.extend(fn(m))
    return lines


# Method packages append (report name, formatter) here via register_summary.
_EXTRA: list[tuple[str, object]] = []


def register_summary(name: str, fn) -> None:
    _EXTRA.append((name, fn))


def print_summary(cfg: Config, pipeline_id: str | None = None, elapsed_s: float | None = None) -> None:
    from rubricflow import tracking

    try:
        tracking.backfill_dvc_tags(pipeline_id, cfg.tracking.experiment)
        parent, children = tracking.pipeline_runs(pipeline_id, cfg.tracking.experiment)
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
    for line in key_lines(cfg):
        print(line)
    if parent is not None:
        print(f"mlflow      parent run {parent.info.run_id} in experiment '{cfg.tracking.experiment}'")
        if parent.info.status == "RUNNING":
            tracking.finish_parent(parent.info.run_id, children)
    print("open        make ui   (Prefect http://127.0.0.1:4200, MLflow http://127.0.0.1:5000)")
    print("            or: .venv/bin/mlflow ui --backend-store-uri " + _uri())
    print("=" * 73)


def _uri() -> str:
    import os

    return os.environ.get("MLFLOW_TRACKING_URI", "")
