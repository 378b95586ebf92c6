"""Study statistics: Student-t intervals over seeds, paired per-seed differences with a verdict per claim, and the
choice of a selection study."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rubricflow.study.spec import Claim, Selection


def t_interval(values: Sequence[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean and the two-sided Student-t interval ``mean +- t_{(1+c)/2, n-1} * sd / sqrt(n)`` (sd with n-1).
    With one value the interval is undefined (None)."""
    from scipy import stats

    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "half_width": None, "ci_low": None, "ci_high": None}
    mean = sum(xs) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "half_width": None, "ci_low": None, "ci_high": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "half_width": half, "ci_low": mean - half, "ci_high": mean + half}


def verdict(ci_low: float | None, ci_high: float | None, direction: str, margin: float = 0.0) -> str:
    """'shown' when the interval excludes the claim's bound (0, or ``-margin`` / ``+margin`` for a non-inferiority
    claim) in the claimed direction, 'reversed' when it lies wholly on the other side of that bound, else
    'not shown'."""
    if ci_low is None or ci_high is None:
        return "not shown"
    if direction == "higher":
        bound = -margin
        return "shown" if ci_low > bound else "reversed" if ci_high < bound else "not shown"
    if direction == "lower":
        bound = margin
        return "shown" if ci_high < bound else "reversed" if ci_low > bound else "not shown"
    raise ValueError(f"claim direction {direction!r}: expected 'higher' or 'lower'")


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


def _value(result: Mapping, metric: str) -> float | None:
    return _finite((result.get("metrics") or {}).get(metric))


MIN_SEEDS_FOR_CLAIM = 5  # CONTRIBUTING.md: a claim about an effect needs at least 5 seeds


PairMetric = Callable[[str, Mapping, Mapping], tuple[float | None, float | None]]


def aggregate(
    results: Iterable[Mapping], claims: Iterable[Claim | Mapping], metrics: Sequence[str] | None = None,
    confidence: float = 0.95, pair_metrics: Sequence[str] = (), pair_metric: PairMetric | None = None,
) -> dict[str, Any]:
    """Per variant and metric the mean and t-interval over seeds; per claim the paired per-seed difference
    ``a - b`` (seeds where both have the metric) with its t-interval and :func:`verdict`.

    ``results``: ``{"variant", "seed", "metrics": {metric: value}}`` (a missing or None metric is left out).
    A claim on one of ``pair_metrics`` takes both values of a seed from ``pair_metric(metric, result_a, result_b)``
    (a metric defined only for the pair, e.g. over a range both units span; None: no value for that seed), and
    keeps them per seed under ``pair_values``."""
    results = list(results)
    if metrics is None:
        metrics = sorted({m for r in results for m in (r.get("metrics") or {})})
    by_variant: dict[str, dict[int, Mapping]] = {}
    for r in results:
        seeds = by_variant.setdefault(r["variant"], {})
        if r["seed"] in seeds:
            raise ValueError(f"two results for variant {r['variant']!r} seed {r['seed']}")
        seeds[r["seed"]] = r
    variants = {}
    for v, seeds in by_variant.items():
        row: dict[str, Any] = {"seeds": sorted(seeds)}
        for m in metrics:
            vals = {s: _value(r, m) for s, r in sorted(seeds.items())}
            vals = {s: x for s, x in vals.items() if x is not None}
            row[m] = {**t_interval(list(vals.values()), confidence), "values": vals}
        variants[v] = row
    out_claims = []
    for c in claims:
        c = c if isinstance(c, Claim) else Claim.model_validate(dict(c))
        a, b = by_variant.get(c.a, {}), by_variant.get(c.b, {})
        paired = c.metric in pair_metrics
        if paired and pair_metric is None:
            raise ValueError(f"claim {c.a} vs {c.b}: {c.metric!r} is a pair metric and no pair_metric was given")
        diffs, pair_values = {}, {}
        for s in sorted(set(a) & set(b)):
            if paired:
                xa, xb = (_finite(x) for x in pair_metric(c.metric, a[s], b[s]))
                pair_values[s] = [xa, xb]
            else:
                xa, xb = _value(a[s], c.metric), _value(b[s], c.metric)
            if xa is not None and xb is not None:
                diffs[s] = xa - xb
        ci = t_interval(list(diffs.values()), confidence)
        notes = ["exploratory"] if c.exploratory else []
        if ci["n"] < 2:
            notes.append("fewer than 2 paired seeds: no interval")
        elif ci["n"] < MIN_SEEDS_FOR_CLAIM:
            notes.append(f"only {ci['n']} paired seeds (a claim needs {MIN_SEEDS_FOR_CLAIM})")
        note = "; ".join(notes)
        out_claims.append({
            **c.model_dump(), "n_pairs": ci["n"], "diff_mean": ci["mean"], "ci_low": ci["ci_low"],
            "ci_high": ci["ci_high"], "half_width": ci["half_width"], "diffs": diffs,
            "verdict": verdict(ci["ci_low"], ci["ci_high"], c.direction, c.margin), "note": note,
            **({"pair_values": pair_values} if paired else {}),
        })
    return {"confidence": confidence, "metrics": list(metrics), "variants": variants, "claims": out_claims}


def _defined(row: Mapping[str, Any], metric: str) -> bool:
    """Whether a variant (``aggregate``'s row) has ``metric``, and on every seed it ran."""
    stats = row.get(metric, {})
    values = stats.get("values")
    return stats.get("mean") is not None and (values is None or len(values) == len(row.get("seeds", values)))


def select(agg: Mapping[str, Any], selection: Selection | Mapping | None) -> dict[str, Any] | None:
    """The setting a selection study chooses (``Selection``): per setting, the mean over its variants of their mean
    ``metric`` over seeds; the best score wins (ties: the first setting listed), or, with ``tolerance``, the cheapest
    setting (mean ``cost`` metrics, in order) within ``tolerance`` of the best. A setting with a variant that has no
    value, or has it on fewer of its seeds than it ran, is not eligible (it would be scored on fewer methods or seeds
    than the others: a metric that is n/a where a setting fails must not be averaged over its successes only). When
    no setting is eligible, ``fallback`` decides (:func:`_most_defined`); ``fallback`` in the result says how."""
    if selection is None:
        return None
    sel = selection if isinstance(selection, Selection) else Selection.model_validate(dict(selection))
    groups = sel.settings or {v: [v] for v in agg["variants"]}

    def mean_of(members: Sequence[str], metric: str) -> tuple[dict, float | None]:
        rows = {v: agg["variants"].get(v) or {} for v in members}
        means = {v: row.get(metric, {}).get("mean") for v, row in rows.items()}
        ok = all(_defined(row, metric) for row in rows.values())
        return means, (sum(means.values()) / len(means) if ok else None)

    scores: dict[str, Any] = {}
    for setting, members in groups.items():
        means, score = mean_of(members, sel.metric)
        scores[setting] = {"variants": list(members), "means": means, "score": score}
        if sel.cost:
            scores[setting]["cost"] = [mean_of(members, c)[1] for c in sel.cost]
    if sel.guard_metric is not None:
        floor = (agg["variants"].get(sel.guard_baseline) or {}).get(sel.guard_metric, {}).get("mean")
        for setting, v in scores.items():
            guard = mean_of(v["variants"], sel.guard_metric)[1]
            v["guard"] = guard
            v["guard_ok"] = floor is not None and guard is not None and guard >= floor - sel.guard_margin - 1e-12
    sign = 1.0 if sel.direction == "higher" else -1.0
    eligible = [k for k, v in scores.items() if v["score"] is not None and v.get("guard_ok", True)
                and all(c is not None for c in v.get("cost", []))]
    best, fallback = None, None
    if not eligible and sel.fallback == "most_defined":
        best, fallback = _most_defined(agg, groups, sel, scores, sign)
    if eligible:
        top = max(sign * scores[k]["score"] for k in eligible)
        near = [k for k in eligible if sign * scores[k]["score"] >= top - sel.tolerance - 1e-12]
        if sel.cost and sel.tolerance > 0:
            best = min(near, key=lambda k: tuple(scores[k]["cost"]))  # min keeps the first of equal costs
        else:
            best = next(k for k in eligible if sign * scores[k]["score"] == top)
    return {"metric": sel.metric, "direction": sel.direction, "tolerance": sel.tolerance, "cost": list(sel.cost),
            "guard": None if sel.guard_metric is None else {"metric": sel.guard_metric, "baseline": sel.guard_baseline,
                                                            "margin": sel.guard_margin},
            "settings": scores, "selected": best, "fallback": fallback}


def _most_defined(agg, groups, sel, scores, sign) -> tuple[str | None, dict]:
    """``Selection.fallback == "most_defined"``: the settings (passing the guard) with the most variants whose
    metric exists on every seed compete on the mean over those variants, if those are at the same places of every
    competing setting's list; returns ``(setting or None, what was decided)``."""
    places = {}
    for k, members in groups.items():
        if not scores[k].get("guard_ok", True):
            continue
        rows = [agg["variants"].get(v) or {} for v in members]
        places[k] = tuple(i for i, row in enumerate(rows) if _defined(row, sel.metric))
    most = max((len(p) for p in places.values()), default=0)
    top = {k: p for k, p in places.items() if most and len(p) == most}
    info: dict[str, Any] = {"rule": "most_defined", "defined": {k: len(p) for k, p in places.items()},
                            "competing": sorted(top), "scores": {}}
    if not top or len(set(top.values())) > 1:
        info["why_none"] = "no setting has the metric on any variant" if not top else (
            "the settings with the most defined variants have them at different places (different methods)")
        return None, info
    for k, p in top.items():
        members = groups[k]
        info["scores"][k] = sum(agg["variants"][members[i]][sel.metric]["mean"] for i in p) / len(p)
    best = max(top, key=lambda k: sign * info["scores"][k])  # max keeps the first listed of equal scores
    info["over"] = [groups[best][i] for i in top[best]]
    return best, info
