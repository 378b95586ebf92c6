"""The RoRo studies' report beyond the harness's tables: the Judge's val pairwise accuracy per alternation phase
(mean and 95% t-interval over seeds, overall and per pair category, each against chance 0.5; the kept Judge on the
evaluation split; the paired change from the warm start) and the accuracy-vs-cost curves with their 95% bands over
seeds (``<stem>-curves.png``, ``<stem>-chain-curves.png``). Reads only the units' results."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rubricflow.methods.roro.router.curves import hull, interpolate, pair_range_aucs
from rubricflow.study.spec import StudySpec
from rubricflow.study.stats import t_interval
from rubricflow.util.io import save_figure

CHANCE = 0.5
PHASE_METRICS = ("val_pairwise_acc", "val_acc_outcome", "val_acc_cost", "val_acc_process", "val_acc_process_right",
                 "val_acc_process_wrong")
TEST_JUDGE_METRICS = ("pairwise_acc", "acc_outcome", "acc_cost", "acc_process", "acc_process_right",
                      "acc_process_wrong")


def _cell(vals: Sequence[float]) -> tuple[str, str]:
    """``mean ± half-width`` and its verdict against chance (0.5)."""
    ci = t_interval(vals)
    if ci["mean"] is None:
        return "n/a", ""
    if ci["half_width"] is None:
        return f"{ci['mean']:.3f} (n=1)", ""
    v = "above" if ci["ci_low"] > CHANCE else "below" if ci["ci_high"] < CHANCE else "~"
    return f"{ci['mean']:.3f} ± {ci['half_width']:.3f}", v


def judge_tables(results: Sequence[Mapping]) -> tuple[list[str], dict]:
    """Markdown lines and data: per phase (warm start, each Judge and Rubricor phase) the val pairwise accuracy over
    the ``roro`` units' seeds, overall and per pair category, with each cell's 95% t-interval against chance; then
    the kept Judge on the evaluation split's pairs; then the paired per-seed change from the warm start to the kept
    phase."""
    units = [r for r in results if r.get("judge_rounds")]
    if not units:
        return [], {}
    n_phases = min(len(r["judge_rounds"]) for r in units)
    names = [f"{row['round']}/{row['phase']}" for row in units[0]["judge_rounds"][:n_phases]]
    head = ["overall", "outcome", "cost", "process", "process-right", "process-wrong"]
    lines = ["## Judge: val pairwise accuracy per alternation phase",
             "",
             f"Mean ± half-width of the 95% t-interval over the `roro` units' seeds ({len(units)}); val pairs; ties "
             "count 0.5, so chance is 0.5. Mark: `above` / `below` = the interval excludes 0.5 on that side, `~` = "
             "it does not. `kept` = how many seeds kept that phase (best val accuracy).",
             "",
             "| phase | kept | " + " | ".join(head) + " |",
             "|---|---|" + "---|" * len(head)]
    data: dict[str, Any] = {"phases": {}}
    for i, ph in enumerate(names):
        kept = sum(1 for r in units if r["judge_rounds"][i].get("selected"))
        cells, row_data = [], {}
        for m in PHASE_METRICS:
            vals = [r["judge_rounds"][i][m] for r in units if r["judge_rounds"][i].get(m) is not None]
            txt, v = _cell(vals)
            cells.append(f"{txt} {v}".strip())
            row_data[m] = {**t_interval(vals), "values": vals}
        data["phases"][ph] = {"kept": kept, **row_data}
        lines.append(f"| {ph} | {kept} | " + " | ".join(cells) + " |")
    failed = []
    for i, ph in enumerate(names):
        fr = [max(r["judge_rounds"][i].get("val_judge_failed_frac") or 0.0,
                  r["judge_rounds"][i].get("val_rubric_failed_frac") or 0.0) for r in units]
        if any(fr):
            failed.append(f"{ph}: " + ", ".join(f"{x:.2f}" for x in fr))
    if failed:  # a missing score counts as a misordered pair: say where they came from
        lines += ["", "Fraction of val problems or trajectories without a score (rubric or judgment failed; counted as "
                  "misordered), per seed: " + "; ".join(failed)]
    tested = [r for r in units if r.get("judge_test")]
    if tested:
        counts = tested[0].get("judge_test_pair_counts") or {}
        n = {c: counts.get(f"test_{c}", counts.get(f"val_{c}")) for c in ("outcome", "cost", "process-right",
                                                                          "process-wrong")}
        lines += ["", "## Judge kept per seed, on the evaluation split's route pairs", "",
                  "Pairs built like the training pairs from every route of the evaluation problems (counts of the "
                  f"first unit: {', '.join(f'{k} {v}' for k, v in n.items() if v is not None)}).", "",
                  "| | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
        cells = []
        data["judge_test"] = {}
        for m in TEST_JUDGE_METRICS:
            vals = [r["judge_test"][m] for r in tested if r["judge_test"].get(m) is not None]
            txt, v = _cell(vals)
            cells.append(f"{txt} {v}".strip())
            data["judge_test"][m] = {**t_interval(vals), "values": vals}
        lines.append("| kept Judge | " + " | ".join(cells) + " |")
    diffs = {}
    for m in ("val_pairwise_acc", "val_acc_process"):
        d = []
        for r in units:
            sel = next((row for row in r["judge_rounds"] if row.get("selected")), None)
            if sel is not None and sel.get(m) is not None and r["judge_rounds"][0].get(m) is not None:
                d.append(sel[m] - r["judge_rounds"][0][m])
        diffs[m] = {**t_interval(d), "values": d}
    last = []
    for r in units:
        a, b = r["judge_rounds"][n_phases - 1].get("val_pairwise_acc"), r["judge_rounds"][0].get("val_pairwise_acc")
        if a is not None and b is not None:
            last.append(a - b)
    diffs["last_minus_warm_val_pairwise_acc"] = {**t_interval(last), "values": last}
    lines += ["", "Paired per-seed change on val (a phase chosen on val is optimistic on val: the kept Judge's "
              "unbiased number is the evaluation-split row above):", ""]
    for label, key in (("kept phase - warm start, overall", "val_pairwise_acc"),
                       ("kept phase - warm start, process pairs", "val_acc_process"),
                       ("last phase - warm start, overall", "last_minus_warm_val_pairwise_acc")):
        ci = diffs[key]
        if ci["half_width"] is not None:
            lines.append(f"- {label}: {ci['mean']:+.3f} [{ci['ci_low']:+.3f}, {ci['ci_high']:+.3f}]")
    data["changes"] = diffs
    return lines, data


COST_GRID = [i / 50 for i in range(51)]


def _end_points(anchors: Mapping) -> list[tuple[float, float]]:
    """A unit's all-SLM / all-LRM accuracies (``{"all-slm": y0, "all-lrm": y1}``) as the curve's two end points."""
    return [(0.0, anchors["all-slm"]), (1.0, anchors["all-lrm"])]


def curve_bands(results: Sequence[Mapping], points: str = "points", anchors: str = "anchors") -> dict[str, dict]:
    """Per variant: each seed's hull read on ``COST_GRID``, and the mean and 95% t-interval per grid cost (outcome
    accuracy; ``points="chain_points", anchors="chain_anchors"``: chain-exact accuracy)."""
    by: dict[str, list[list[float]]] = {}
    for r in results:
        if not r.get(points) or not r.get(anchors):
            continue
        pts = [tuple(p) for p in r[points]] + _end_points(r[anchors])
        h = hull(pts)
        by.setdefault(r["variant"], []).append([interpolate(h, c) for c in COST_GRID])
    out = {}
    for v, curves in by.items():
        cols = [t_interval([c[i] for c in curves]) for i in range(len(COST_GRID))]
        out[v] = {"cost": COST_GRID, "mean": [c["mean"] for c in cols],
                  "low": [c["ci_low"] if c["ci_low"] is not None else c["mean"] for c in cols],
                  "high": [c["ci_high"] if c["ci_high"] is not None else c["mean"] for c in cols],
                  "n": len(curves)}
    return out


def plot_bands(bands: Mapping[str, Mapping], results: Sequence[Mapping], path: Path, points: str = "points",
               ylabel: str = "accuracy") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    colors = {"roro": "C0", "outcome-only": "C1", "threshold": "C2", "random": "C7"}
    for i, (v, b) in enumerate(bands.items()):
        c = colors.get(v, f"C{3 + i}")
        ax.plot(b["cost"], b["mean"], "-", color=c, label=f"{v} (n={b['n']})")
        ax.fill_between(b["cost"], b["low"], b["high"], color=c, alpha=0.2)
        xs = [p[0] for r in results if r.get("variant") == v for p in r.get(points) or []]
        ys = [p[1] for r in results if r.get("variant") == v for p in r.get(points) or []]
        ax.plot(xs, ys, ".", color=c, alpha=0.5, markersize=4)
    ax.set_xlabel("LRM cost (fraction of the all-LRM route)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} vs LRM cost: upper hull per seed, mean and 95% band")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path, dpi=110)
    return path


# Pair metrics (StudySpec.pair_metrics): each method's hull mean over the costs both units' own test points span
# inside the fixed range (roro.eval.cost_range), so two methods are compared only where both have points.
PAIR_METRICS = {"chain_pair_range_auc": "chain_", "pair_range_auc": ""}


def _pair(metric: str, ra: Mapping, rb: Mapping) -> tuple[tuple[float, float] | None, float | None, float | None]:
    if metric not in PAIR_METRICS:
        raise ValueError(f"pair metric {metric!r}: expected one of {sorted(PAIR_METRICS)}")
    prefix = PAIR_METRICS[metric]
    pa, pb = ra.get(f"{prefix}points"), rb.get(f"{prefix}points")
    if not pa or not pb:
        return None, None, None
    ranges = [r.get("cost_range") for r in (ra, rb)]
    if any(c is None for c in ranges) or ranges[0] != ranges[1]:
        raise ValueError(f"{metric}: the units of seed {ra.get('seed')} ({ra.get('variant')}, {rb.get('variant')}) "
                         f"record cost ranges {ranges}; expected one range (roro.eval.cost_range) in both")
    return pair_range_aucs([tuple(p) for p in pa], _end_points(ra[f"{prefix}anchors"]), [tuple(p) for p in pb],
                           _end_points(rb[f"{prefix}anchors"]), *ranges[0])


def pair_metric(metric: str, ra: Mapping, rb: Mapping) -> tuple[float | None, float | None]:
    """Both values of a pair metric (``PAIR_METRICS``) for two units of one seed (the harness's ``pair_metric``)."""
    _, va, vb = _pair(metric, ra, rb)
    return va, vb


def pair_range_lines(spec: StudySpec, results: Sequence[Mapping]) -> tuple[list[str], dict]:
    """Per claim on a pair metric and per seed, the common cost range its two units were compared over."""
    by = {(r.get("variant"), r.get("seed")): r for r in results}
    seeds = sorted({r.get("seed") for r in results})
    lines: list[str] = []
    data: dict[str, dict] = {}
    for c in spec.claims:
        if c.metric not in PAIR_METRICS:
            continue
        row = {}
        for s in seeds:
            ra, rb = by.get((c.a, s)), by.get((c.b, s))
            if ra is not None and rb is not None:
                row[s] = _pair(c.metric, ra, rb)[0]
        key = f"{c.a} vs {c.b} ({c.metric})"
        data[key] = {str(s): (list(r) if r else None) for s, r in row.items()}
        cells = "; ".join(f"{s}: {f'{r[0]:.2f}-{r[1]:.2f}' if r else 'none'}" for s, r in row.items())
        lines.append(f"- {key}: {cells or 'no paired seeds'}")
    if lines:
        lines = ["## The cost range each pair was compared over", "",
                 "A claim on a pair metric compares the two methods' hulls only over the costs inside the fixed range "
                 "that both methods' own test points span (`none`: they share no interval there, so that seed has no "
                 "value; never a chord to the curve's ends). Per seed:", "", *lines, ""]
    return lines, data


def report_extra(name: str, spec: StudySpec, results: Sequence[Mapping], stem_path: Path) -> dict:
    lines, judge = judge_tables(results)
    bands = curve_bands(results)
    chain = curve_bands(results, "chain_points", "chain_anchors")
    md: list[str] = []
    files: dict[str, Path] = {}
    if chain:
        png = plot_bands(chain, results, stem_path.parent / f"{stem_path.name}-chain-curves.png", "chain_points",
                         "chain-exact accuracy")
        files["chain_curves"] = png
        md += ["## Chain-exact accuracy vs LRM cost", "",
               f"`{png.name}`: as below, for chain-exact accuracy (every step right), the primary metric.", ""]
    if bands:
        png = plot_bands(bands, results, stem_path.parent / f"{stem_path.name}-curves.png")
        files["curves"] = png
        md += ["## Accuracy vs LRM cost", "",
               f"`{png.name}`: per seed, the upper concave hull of a method's points and the all-SLM / all-LRM ends "
               "(what mixing its settings achieves); the line is the mean over seeds, the band its 95% t-interval "
               "at each cost. `auc` above is the area under each seed's hull.", "",
               "| variant | points per seed | cost range of its points |", "|---|---|---|"]
        for v in bands:
            pts = [r["points"] for r in results if r.get("variant") == v and r.get("points")]
            xs = [p[0] for ps in pts for p in ps]
            md.append(f"| {v} | {min(len(p) for p in pts)}-{max(len(p) for p in pts)} | "
                      f"{min(xs):.2f}-{max(xs):.2f} |")
        md.append("")
    md += lines
    ranges, range_data = pair_range_lines(spec, results)
    md += ranges
    data = {"judge": judge, "pair_ranges": range_data,
            "bands": {v: {k: b[k] for k in ("mean", "low", "high", "n")} for v, b in bands.items()},
            "chain_bands": {v: {k: b[k] for k in ("mean", "low", "high", "n")} for v, b in chain.items()},
            "cost_grid": COST_GRID}
    return {"markdown": ["", *md], "files": files, "json": _finite(data)}


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x
