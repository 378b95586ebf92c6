"""Accuracy-vs-cost curves as numbers: the upper concave hull of a method's (LRM cost fraction, accuracy) points,
its area, the accuracy at a matched cost and over a cost range, and the val rule that picks the cost weights whose
routers span that range. Pure functions of the points (no models, no files); the reasons behind each n/a are in
:mod:`rubricflow.methods.roro.router.evaluate`'s docstring."""

from __future__ import annotations


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



def brackets(points: list[tuple[float, float]], cost: float) -> bool:
    """The method has points of its own at or below ``cost`` and at or above it (the anchors do not count)."""
    return any(c <= cost for c, _ in points) and any(c >= cost for c, _ in points)


def matched_accuracy(points: list[tuple[float, float]], anchors: list[tuple[float, float]],
                     cost: float) -> float | None:
    """The hull's accuracy at ``cost`` where the method's own points lie on each side of it, else None (n/a): a
    chord from an end of the curve to a far point is no measurement at that cost."""
    return accuracy_at_cost(points, anchors, cost) if brackets(points, cost) else None


def range_auc(points: list[tuple[float, float]], anchors: list[tuple[float, float]], low: float,
              high: float) -> float | None:
    """Mean accuracy of the hull over cost ``[low, high]`` (its area there divided by the width), or None when the
    method's own points do not reach both ends."""
    if not (low < high and brackets(points, low) and brackets(points, high)):
        return None
    h = hull(list(points) + list(anchors))
    xs = [low] + [x for x, _ in h if low < x < high] + [high]
    ys = [interpolate(h, x) for x in xs]
    return sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:])) / (high - low)


def common_range(points_by_method: dict[str, list[tuple[float, float]]], low: float,
                 high: float) -> tuple[float, float] | None:
    """The costs inside ``[low, high]`` that every method's own points span (None when they share no interval)."""
    if not points_by_method or any(not pts for pts in points_by_method.values()):
        return None
    lo = max([low] + [min(c for c, _ in pts) for pts in points_by_method.values()])
    hi = min([high] + [max(c for c, _ in pts) for pts in points_by_method.values()])
    return (lo, hi) if lo < hi else None


def pair_range_aucs(points_a: list[tuple[float, float]], anchors_a: list[tuple[float, float]],
                    points_b: list[tuple[float, float]], anchors_b: list[tuple[float, float]], low: float,
                    high: float) -> tuple[tuple[float, float] | None, float | None, float | None]:
    """Two methods compared where both have points: the costs inside ``[low, high]`` that both methods' own points
    span (:func:`common_range`) and each method's hull mean over them (:func:`range_auc`); ``(None, None, None)``
    when the two share no such interval (the comparison is untestable, never a chord)."""
    rng = common_range({"a": list(points_a), "b": list(points_b)}, low, high)
    if rng is None:
        return None, None, None
    return rng, range_auc(points_a, anchors_a, *rng), range_auc(points_b, anchors_b, *rng)


def select_cost_weights(val_costs: dict[float, float], low: float, high: float) -> list[float]:
    """The ``val_span`` rule (``roro.eval.cost_weight_rule``): the cost weights whose router's val cost lies in
    ``[low, high]``, plus the one with the highest val cost below ``low`` and the one with the lowest above
    ``high``. ``val_costs`` maps each swept weight to its router's val LRM cost fraction."""
    inside = [w for w, c in val_costs.items() if low <= c <= high]
    below = [w for w, c in val_costs.items() if c < low]
    above = [w for w, c in val_costs.items() if c > high]
    kept = set(inside)
    if below:
        kept.add(max(below, key=lambda w: (val_costs[w], -w)))
    if above:
        kept.add(min(above, key=lambda w: (val_costs[w], w)))
    return sorted(kept)


def curve_metrics(points: list[tuple[float, float]], anchors: list[tuple[float, float]],
                  cost_range: tuple[float, float] | list[float], matched_costs: list[float],
                  prefix: str = "") -> dict[str, float | None]:
    """``auc`` (the hull over all of [0, 1], descriptive: beyond the method's points it is a chord to an end),
    ``range_auc`` over ``cost_range``, ``acc_at_cost_<pct>`` at each matched cost (None = n/a) and the cost range
    of the method's own points (``cost_min`` / ``cost_max``); every name after ``prefix``."""
    out = {"auc": curve_auc(points, anchors), "range_auc": range_auc(points, anchors, *cost_range)}
    for c in matched_costs:
        out[f"acc_at_cost_{round(100 * c)}"] = matched_accuracy(points, anchors, c)
    out["cost_min"] = min(c for c, _ in points)
    out["cost_max"] = max(c for c, _ in points)
    return {prefix + k: v for k, v in out.items()}
