"""The short, human-readable summary printed at the end of ``make run``."""

from __future__ import annotations

import json
from pathlib import Path

from rubricflow.sections import TrackingConfig


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _fmt_acc(d: dict | None) -> str:
    if not d:
        return "n/a"
    return ", ".join(f"{k} {v:.0%}" for k, v in d.items())


def key_lines(reports_dir: str | Path) -> list[str]:
    """One line per stage report under ``reports_dir`` that exists, with its key numbers."""
    r = Path(reports_dir)
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
    lines.extend(_rucl_lines(r))
    lines.extend(_deltarubric_lines(r))
    lines.extend(_roro_lines(r))
    return lines


def _rucl_lines(r: Path) -> list[str]:
    out = []
    if (m := _load(r / "stratify.json")):
        tiers = _tiers(r / "rubrics" / "stratification.json")
        out.append(f"stratify    {m['n_candidates']} candidates, {m['n_low_coverage']} dropped for coverage, "
                   f"kept {m['n_kept']}: foundational {tiers.get('foundational', m['n_foundational'])} "
                   f"(pass {m['mean_pass_foundational']:.2f}), advanced {tiers.get('advanced', m['n_advanced'])} "
                   f"(pass {m['mean_pass_advanced']:.2f}); {m['n_judge_failed']} failed judgments")
    if (m := _load(r / "rucl.json")):
        t = m.get("transition_step")
        out.append(f"rucl        {m['steps']} GRPO steps, curriculum transition at step "
                   f"{t if t is not None else 'never'}, lambda_t at end {m['lambda_final']:.2f}")
    if (m := _load(r / "rucl_eval.json")):
        out.append(f"rucl eval   held-out ({m['eval_samples']}): " + ", ".join(
            f"{name} {m[name]['accuracy']:.1%} (S_F {m[name]['s_f']:.2f}, S_A {m[name]['s_a']:.2f})"
            for name in ("sft", "outcome", "rucl") if isinstance(m.get(name), dict)))
    return out


def _tiers(path: Path) -> dict[str, str]:
    rows = _load(path)
    if not isinstance(rows, list):
        return {}
    tiers: dict[str, list[str]] = {}
    for row in rows:
        if row.get("tier"):
            tiers.setdefault(row["tier"], []).append(row["id"])
    return {k: "/".join(v) for k, v in tiers.items()}


def _deltarubric_lines(r: Path) -> list[str]:
    m = _load(r / "deltarubric_eval.json")
    if not m:
        return []
    out = []
    order = ("no_rubric", "static", "deltarubric", "oracle")
    sets = sorted((k for k, v in m.items() if isinstance(v, dict)), key=lambda k: (not k.startswith("sft/"), k))
    for key in sets:
        accs = m[key]
        modes = [k for k in order if k in accs] + sorted(
            k for k in accs if k not in order and not k.endswith("_format_violation"))
        out.append(f"{'deltarubric' if not out else '':<12}{key}: " + ", ".join(
            f"{k} {accs[k]:.1%}" for k in modes) + " (pair accuracy)")
    return out


def _roro_lines(r: Path) -> list[str]:
    out = []
    if (m := _load(r / "roro_rubricor_judge.json")):
        accs = " -> ".join(f"{row['val_pairwise_acc']:.2f}" for row in m["rounds"])
        out.append(f"roro judge  val pairwise accuracy per phase: {accs} (kept {m['selected_phase']})")
    if (m := _load(r / "roro_eval.json")):
        by = {row["method"]: row for row in m["rows"] if row.get("param") is None}
        ends = ", ".join(f"{k} {by[k]['accuracy']:.1%}" for k in ("all-slm", "all-lrm") if k in by)
        if m.get("roro_accuracy") is not None and m.get("outcome_only_accuracy_at_roro_cost") is not None:
            out.append(f"roro route  {ends}; RoRo {m['roro_accuracy']:.1%} at LRM cost {m['roro_lrm_cost_frac']:.2f} "
                       f"vs outcome-only {m['outcome_only_accuracy_at_roro_cost']:.1%} at the same cost")
        if m.get("auc"):
            order = [k for k in ("roro", "outcome-only", "threshold", "random") if k in m["auc"]]
            out.append("roro route  AUC of accuracy vs cost: " + ", ".join(f"{k} {m['auc'][k]:.3f}" for k in order))
        if (jt := m.get("judge_test")):
            out.append(f"roro judge  kept Judge on test pairs: {jt['pairwise_acc']:.2f} overall, process "
                       f"{jt.get('acc_process', float('nan')):.2f}")
    return out


def print_summary(
    reports_dir: str | Path, tracking_cfg: TrackingConfig, pipeline_id: str | None = None, elapsed_s: float | None = None
) -> None:
    from rubricflow import tracking

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
        print(f"mlflow      parent run {parent.info.run_id} in experiment '{tracking_cfg.experiment}'")
        if parent.info.status == "RUNNING":
            tracking.finish_parent(parent.info.run_id, children)
    print("open        make ui   (Prefect http://127.0.0.1:4200, MLflow http://127.0.0.1:5000)")
    print("            or: .venv/bin/mlflow ui --backend-store-uri " + _uri())
    print("=" * 73)


def _uri() -> str:
    import os

    return os.environ.get("MLFLOW_TRACKING_URI", "")
