"""Accuracy vs LRM cost on held-out problems: trained routers and baselines, curves, the printed table.

Every method routes every held-out problem (greedy routers, seeded random baselines averaged over repeats). A row
reports accuracy, mean LRM tokens per problem, the LRM cost as a fraction of the all-LRM route, the LRM call rate
per step and the FLOPs estimates (``2 * params * tokens``: LRM only, and SLM + LRM).

Matched cost: for each RoRo router, the outcome-only, threshold and random curves are linearly interpolated at
its LRM cost (``interpolate``; each curve is anchored at all-SLM and all-LRM), and a random router with the same
per-step LRM call rate is also run directly.

Area under the accuracy-vs-cost curve (``curve_auc``): a method's points (LRM cost as a fraction of the all-LRM
cost, accuracy), anchored at all-SLM (cost 0) and all-LRM (cost 1), span their upper concave hull (``hull``): every
point on it is achievable by routing each problem with one of two of the method's settings at random, so a setting
below the hull costs the method nothing and a method is not favoured by a denser grid between two settings on a
straight line. The AUC is the area under the hull over cost [0, 1] (so in [0, 1]); ``accuracy_at_cost`` reads the
hull at a cost (accuracy at matched cost). Every method (routers, threshold, random) is summarised the same way.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rubricflow.methods.roro.routing import Trajectory

COLUMNS = ("method", "param", "accuracy", "lrm_tokens", "lrm_cost_frac", "lrm_call_rate", "lrm_flops", "total_flops", "n")


def summarize(method: str, param: float | str | None, trajs: list[Trajectory], all_lrm_tokens: dict[str, int]) -> dict:
    n = len(trajs)
    steps = sum(len(t.steps) for t in trajs)
    return {
        "method": method,
        "param": param,
        "accuracy": sum(t.outcome for t in trajs) / n,
        "lrm_tokens": sum(t.lrm_tokens for t in trajs) / n,
        "lrm_cost_frac": sum(t.lrm_tokens / max(1, all_lrm_tokens[t.problem_id]) for t in trajs) / n,
        "lrm_call_rate": sum(t.lrm_calls for t in trajs) / max(1, steps),
        "lrm_flops": sum(t.lrm_flops for t in trajs) / n,
        "total_flops": sum(t.total_flops for t in trajs) / n,
        "n": n,
    }


def interpolate(curve: list[tuple[float, float]], x: float) -> float:
    """Accuracy of a cost curve at cost ``x``: the upper envelope's piecewise-linear interpolation (clamped at the
    ends). ``curve`` = [(cost, accuracy)]; several points at one cost keep the best accuracy."""
    if not curve:
        raise ValueError("interpolate: empty curve")
    best: dict[float, float] = {}
    for c, a in curve:
        best[c] = max(a, best.get(c, float("-inf")))
    pts = sorted(best.items())
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]


def hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Upper concave hull of ``(cost, accuracy)`` points, sorted by cost (several points at one cost: the best).
    Raises ValueError on an empty list or a cost outside [0, 1]."""
    if not points:
        raise ValueError("hull: no points")
    bad = [c for c, _ in points if not 0.0 <= c <= 1.0 + 1e-9]
    if bad:
        raise ValueError(f"hull: costs must be fractions of the all-LRM cost in [0, 1], got {bad}")
    best: dict[float, float] = {}
    for c, a in points:
        best[c] = max(a, best.get(c, float("-inf")))
    out: list[tuple[float, float]] = []
    for p in sorted(best.items()):
        # drop the last vertex while it lies on or below the segment from the one before it to p
        while len(out) >= 2 and (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1]) \
                - (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0]) >= 0:
            out.pop()
        out.append(p)
    return out


def curve_auc(points: list[tuple[float, float]], anchors: list[tuple[float, float]]) -> float:
    """Area under the upper concave hull of ``points`` + ``anchors`` (all-SLM at cost 0, all-LRM at cost 1) over
    cost [0, 1]. Raises ValueError when the anchors do not reach cost 0 and cost 1."""
    costs = [c for c, _ in anchors]
    if not costs or min(costs) != 0.0 or max(costs) != 1.0:
        raise ValueError(f"curve_auc: anchors must include cost 0 (all-SLM) and cost 1 (all-LRM), got {anchors}")
    h = hull(list(points) + list(anchors))
    return sum((x1 - x0) * (y0 + y1) / 2 for (x0, y0), (x1, y1) in zip(h, h[1:]))


def accuracy_at_cost(points: list[tuple[float, float]], anchors: list[tuple[float, float]], cost: float) -> float:
    """The hull's accuracy at ``cost`` (accuracy at matched cost)."""
    return interpolate(hull(list(points) + list(anchors)), cost)


MATCHED_COSTS = (0.25, 0.5, 0.75)


def curve_metrics(points: list[tuple[float, float]], anchors: list[tuple[float, float]]) -> dict[str, float]:
    """``auc`` and ``acc_at_cost_<pct>`` at each of ``MATCHED_COSTS``."""
    out = {"auc": curve_auc(points, anchors)}
    for c in MATCHED_COSTS:
        out[f"acc_at_cost_{round(100 * c)}"] = accuracy_at_cost(points, anchors, c)
    return out


def format_table(rows: list[dict]) -> str:
    head = ["method", "param", "accuracy", "LRM tok/problem", "LRM cost", "LRM call rate", "LRM GFLOPs", "total GFLOPs"]
    body = []
    for r in rows:
        p = r.get("param")
        body.append([
            r["method"], "" if p is None else (f"{p:g}" if isinstance(p, (int, float)) else str(p)),
            f"{r['accuracy']:.3f}", f"{r['lrm_tokens']:.2f}", f"{r['lrm_cost_frac']:.3f}", f"{r['lrm_call_rate']:.3f}",
            f"{r['lrm_flops'] / 1e9:.4f}", f"{r['total_flops'] / 1e9:.4f}",
        ])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def write_curve(rows: list[dict], out_dir: Path) -> dict[str, Path]:
    """``curve.csv`` / ``curve.json`` (one point per row: method, lrm_tokens, accuracy; for ``dvc plots``) and
    ``curve.png`` (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    pts = [{"method": r["method"], "param": r.get("param"), "lrm_tokens": round(r["lrm_tokens"], 4),
            "lrm_cost_frac": round(r["lrm_cost_frac"], 4), "accuracy": round(r["accuracy"], 4)} for r in rows]
    with (out_dir / "curve.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(pts[0]))
        w.writeheader()
        w.writerows(pts)
    (out_dir / "curve.json").write_text(json.dumps(pts, indent=1))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    styles = {"roro": ("o-", "C0"), "outcome-only": ("s--", "C1"), "threshold": ("^:", "C2"), "random": ("x:", "C7")}
    for method, (style, color) in styles.items():
        xs = sorted((r["lrm_tokens"], r["accuracy"]) for r in rows if r["method"] == method)
        if xs:
            ax.plot([x for x, _ in xs], [y for _, y in xs], style, color=color, label=method)
    for method, marker in (("all-slm", "v"), ("all-lrm", "D")):
        for r in rows:
            if r["method"] == method:
                ax.plot([r["lrm_tokens"]], [r["accuracy"]], marker, color="k", label=method)
    ax.set_xlabel("LRM tokens per problem")
    ax.set_ylabel("accuracy (held-out)")
    ax.set_title("RoRo: accuracy vs LRM cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "curve.png", dpi=120)
    plt.close(fig)
    return {"csv": out_dir / "curve.csv", "json": out_dir / "curve.json", "png": out_dir / "curve.png"}
