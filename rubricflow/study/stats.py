"""Study statistics: Student-t intervals over seeds, paired per-seed differences with a verdict per claim, the
preconditions that gate claims, the Holm adjustment over a study's claims, and the choice of a selection study.

The order of evaluation is the order a reader should trust: preconditions first (did the mechanism under test act?);
an effect claim gated by a failed precondition is **untestable**, not "not shown", and leaves the family; the claims
left (pre-registered, testable) form the family over which the two-sided paired-t p-values are Holm-adjusted; the
verdict is read at the adjusted level (``shown`` / ``reversed`` when the adjusted p is below ``1 - confidence``, on
the claimed / the other side of the claim's bound, else ``not shown``). Each claim also carries the smallest
effect its seeds could detect (:func:`min_detectable_effect`), so "not shown" reads as "not shown at this power".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rubricflow.study.spec import Claim, Precondition, Selection


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


def p_value(mean: float | None, sd: float | None, n: int, bound: float = 0.0) -> float | None:
    """Two-sided p of the paired t-test of ``mean == bound`` (``n`` differences with sd ``sd``): the p at which the
    t-interval of the same confidence would just touch ``bound``. sd 0 gives 0 (the bound is excluded) unless the
    mean sits on the bound (1). None with fewer than 2 differences."""
    from scipy import stats

    if mean is None or sd is None or n < 2:
        return None
    if sd == 0:
        return 1.0 if mean == bound else 0.0
    t = (mean - bound) / (sd / math.sqrt(n))
    return float(min(1.0, 2 * stats.t.sf(abs(t), n - 1)))


def holm(pvalues: Mapping[str, float | None]) -> dict[str, float | None]:
    """Holm's step-down adjustment: sort the m p-values ascending, multiply the i-th (from 0) by ``m - i``, make the
    sequence non-decreasing (running maximum) and cap at 1. None (no test) stays None and does not count in m."""
    tested = sorted(((p, k) for k, p in pvalues.items() if p is not None), key=lambda x: x[0])
    m = len(tested)
    out: dict[str, float | None] = {k: None for k in pvalues}
    running = 0.0
    for i, (p, k) in enumerate(tested):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


def min_detectable_effect(sd: float | None, n: int, alpha: float, power: float = 0.8) -> float | None:
    """The smallest true paired difference that ``n`` seeds with paired sd ``sd`` detect with probability ``power``
    in a two-sided t-test at level ``alpha``: ``(t_{1-alpha/2,n-1} + t_{power,n-1}) * sd / sqrt(n)`` (the usual
    normal-shift approximation). None with fewer than 2 seeds or no sd."""
    from scipy import stats

    if sd is None or n < 2:
        return None
    return float((stats.t.ppf(1 - alpha / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / math.sqrt(n))


def adjusted_verdict(p_adj: float | None, diff_mean: float | None, direction: str, margin: float,
                     alpha: float) -> str:
    """The verdict at the adjusted level: ``shown`` when ``p_adj < alpha`` and the mean lies on the claimed side of
    the bound, ``reversed`` when it lies on the other side, else ``not shown``."""
    if p_adj is None or diff_mean is None or p_adj >= alpha:
        return "not shown"
    bound = -margin if direction == "higher" else margin
    claimed = diff_mean > bound if direction == "higher" else diff_mean < bound
    return "shown" if claimed else "reversed"


def evaluate_precondition(pre: Precondition, by_variant: Mapping[str, Mapping[int, Mapping]]) -> dict[str, Any]:
    """Per seed the precondition's value (``variant``'s metric, minus ``minus``'s or its own ``minus_metric`` when
    given) and whether it meets the
    threshold (a seed without a value fails); it holds when the share of seeds that meet it is at least
    ``min_share``. The seeds are those of ``variant`` (and ``minus``)."""
    a = by_variant.get(pre.variant, {})
    b = by_variant.get(pre.minus or pre.variant, {}) if (pre.minus or pre.minus_metric) else None
    seeds = sorted(set(a) & set(b)) if b is not None else sorted(a)
    values: dict[int, float | None] = {}
    ok: dict[int, bool] = {}
    for s in seeds:
        x = _value(a[s], pre.metric)
        if b is not None:
            y = _value(b[s], pre.minus_metric or pre.metric)
            x = None if x is None or y is None else x - y
        values[s] = x
        ok[s] = x is not None and (x >= pre.threshold - 1e-12 if pre.direction == "higher"
                                   else x <= pre.threshold + 1e-12)
    met = sum(ok.values())
    need = math.ceil(pre.min_share * len(seeds) - 1e-9) if seeds else 1
    return {**pre.model_dump(), "values": values, "met": ok, "n_met": met, "n_seeds": len(seeds), "need": need,
            "holds": bool(seeds) and met >= need}


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None


def _value(result: Mapping, metric: str) -> float | None:
    return _finite((result.get("metrics") or {}).get(metric))


MIN_SEEDS_FOR_CLAIM = 5  # CONTRIBUTING.md: a claim about an effect needs at least 5 seeds


PairMetric = Callable[[str, Mapping, Mapping], tuple[float | None, float | None]]


def aggregate(
    results: Iterable[Mapping], claims: Iterable[Claim | Mapping], metrics: Sequence[str] | None = None,
    confidence: float = 0.95, pair_metrics: Sequence[str] = (), pair_metric: PairMetric | None = None,
    preconditions: Iterable[Precondition | Mapping] = (), exploratory: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per variant and metric the mean and t-interval over seeds; per precondition its per-seed values and whether
    it holds (:func:`evaluate_precondition`); per claim the paired per-seed difference ``a - b`` (seeds where both
    have the metric) with its t-interval, the raw verdict from the interval (``verdict_raw``, :func:`verdict`), the
    two-sided p, the Holm-adjusted p over the study's family and the verdict at the adjusted level (``verdict``).

    The family: the claims that are neither exploratory nor untestable. A claim is untestable when a precondition
    that gates it failed (``verdict`` "untestable", ``untestable_because`` names them); exploratory when the spec
    says so or ``exploratory`` (claim key -> reason, e.g. its seeds were used before with another version of the
    claim) names it: it keeps its raw verdict and is marked, outside the family.

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
    invalid = []  # a value that is there but is not a finite number (NaN, inf, a string): left out, and said so
    for v, seeds in by_variant.items():
        row: dict[str, Any] = {"seeds": sorted(seeds)}
        for m in metrics:
            for s, r in sorted(seeds.items()):
                raw = (r.get("metrics") or {}).get(m)
                if raw is not None and _value(r, m) is None:
                    invalid.append({"variant": v, "seed": s, "metric": m, "value": repr(raw)[:40]})
            vals = {s: _value(r, m) for s, r in sorted(seeds.items())}
            vals = {s: x for s, x in vals.items() if x is not None}
            row[m] = {**t_interval(list(vals.values()), confidence), "values": vals}
        variants[v] = row
    pres = [evaluate_precondition(p if isinstance(p, Precondition) else Precondition.model_validate(dict(p)),
                                  by_variant) for p in preconditions]
    failed_gates: dict[str, list[str]] = {}
    for p in pres:
        if not p["holds"]:
            for key in p["gates"]:
                failed_gates.setdefault(key, []).append(p["name"])
    exploratory = dict(exploratory or {})
    alpha = 1 - confidence
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
                xa, xb = _value(a[s], c.metric), _value(b[s], c.b_metric or c.metric)
            if xa is not None and xb is not None:
                diffs[s] = xa - xb
        ci = t_interval(list(diffs.values()), confidence)
        key = c.key
        why_exploratory = "exploratory" if c.exploratory else exploratory.get(key)
        notes = [why_exploratory if why_exploratory == "exploratory" else f"exploratory: {why_exploratory}"] \
            if why_exploratory else []
        if ci["n"] < 2:
            notes.append("fewer than 2 paired seeds: no interval")
        elif ci["n"] < MIN_SEEDS_FOR_CLAIM:
            notes.append(f"only {ci['n']} paired seeds (a claim needs {MIN_SEEDS_FOR_CLAIM})")
        bound = -c.margin if c.direction == "higher" else c.margin
        out_claims.append({
            **c.model_dump(), "key": key, "n_pairs": ci["n"], "diff_mean": ci["mean"], "ci_low": ci["ci_low"],
            "ci_high": ci["ci_high"], "half_width": ci["half_width"], "sd": ci["sd"], "diffs": diffs,
            "verdict_raw": verdict(ci["ci_low"], ci["ci_high"], c.direction, c.margin),
            "p_value": p_value(ci["mean"], ci["sd"], ci["n"], bound),
            "untestable_because": failed_gates.get(key, []), "exploratory": bool(why_exploratory),
            "note": "; ".join(notes), **({"pair_values": pair_values} if paired else {}),
        })
    family = {str(i): c["p_value"] for i, c in enumerate(out_claims)
              if not c["exploratory"] and not c["untestable_because"]}
    adjusted = holm(family)
    m = sum(p is not None for p in family.values())
    for i, c in enumerate(out_claims):
        c["family_size"] = m
        c["mde"] = min_detectable_effect(c["sd"], c["n_pairs"], alpha / max(m, 1) if str(i) in family else alpha)
        if c["untestable_because"]:
            c["p_adjusted"], c["verdict"] = None, "untestable"
        elif c["exploratory"]:
            c["p_adjusted"], c["verdict"] = None, c["verdict_raw"]
        else:
            c["p_adjusted"] = adjusted.get(str(i))
            c["verdict"] = adjusted_verdict(c["p_adjusted"], c["diff_mean"], c["direction"], c["margin"], alpha)
    return {"confidence": confidence, "metrics": list(metrics), "variants": variants, "preconditions": pres,
            "claims": out_claims, "invalid_values": invalid}


def _defined(row: Mapping[str, Any], metric: str) -> bool:
    """Whether a variant (``aggregate``'s row) has ``metric``, and on every seed it ran."""
    stats = row.get(metric, {})
    values = stats.get("values")
    return stats.get("mean") is not None and (values is None or len(values) == len(row.get("seeds", values)))


def _seed_values(row: Mapping[str, Any], metric: str) -> dict[str, float]:
    """A variant's (``aggregate``'s row) values of ``metric`` by seed, the seed as text (as in a report's JSON)."""
    values = (row.get(metric) or {}).get("values")
    return {str(seed): x for seed, x in values.items()} if isinstance(values, Mapping) else {}


def _per_seed(agg: Mapping[str, Any], members: Sequence[str], metric: str) -> dict[str, float] | None:
    """A setting's score seed by seed (the mean over its variants of their value on that seed), where every variant
    has the metric on the same seeds: how far the settings' order moves between seeds. None otherwise."""
    per = [_seed_values(agg["variants"].get(v) or {}, metric) for v in members]
    if not per[0] or any(set(p) != set(per[0]) for p in per):
        return None
    return {seed: sum(p[seed] for p in per) / len(per) for seed in per[0]}


def _missing(agg: Mapping[str, Any], members: Sequence[str], metric: str) -> dict[str, list[int] | str]:
    """Where a setting lacks the metric: per variant, the seeds it ran without a value ("no units": it never ran)."""
    out: dict[str, list[int] | str] = {}
    for v in members:
        row = agg["variants"].get(v)
        if not row:
            out[v] = "no units"
            continue
        have = _seed_values(row, metric)
        if gaps := [s for s in row.get("seeds", []) if str(s) not in have]:
            out[v] = gaps
    return out


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
        scores[setting] = {"variants": list(members), "means": means, "score": score,
                           "per_seed": _per_seed(agg, members, sel.metric)}
        if score is None:
            scores[setting]["missing"] = _missing(agg, members, sel.metric)
        if sel.cost:
            scores[setting]["cost"] = [mean_of(members, c)[1] for c in sel.cost]
    if sel.guard_metric is not None:
        floor = (agg["variants"].get(sel.guard_baseline) or {}).get(sel.guard_metric, {}).get("mean")
        for setting, v in scores.items():
            guard = mean_of(v["variants"], sel.guard_metric)[1]
            v["guard"] = guard
            v["guard_ok"] = floor is not None and guard is not None and guard >= floor - sel.guard_margin - 1e-12
    if sel.require_preconditions:
        for v in scores.values():
            failed = [p["name"] for p in agg.get("preconditions", [])
                      if p["variant"] in v["variants"] and not p["holds"]]
            v["preconditions_ok"] = not failed
            v["preconditions_failed"] = failed
    sign = 1.0 if sel.direction == "higher" else -1.0
    eligible = [k for k, v in scores.items() if v["score"] is not None and v.get("guard_ok", True)
                and v.get("preconditions_ok", True) and all(c is not None for c in v.get("cost", []))]
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
    order = list(groups)
    grid_end = (best if sel.grid and best is not None and len(order) >= 2 and best in (order[0], order[-1])
                else None)
    return {"metric": sel.metric, "direction": sel.direction, "tolerance": sel.tolerance, "cost": list(sel.cost),
            "grid": sel.grid, "grid_end": grid_end,
            "guard": None if sel.guard_metric is None else {"metric": sel.guard_metric, "baseline": sel.guard_baseline,
                                                            "margin": sel.guard_margin},
            "require_preconditions": sel.require_preconditions,
            "settings": scores, "selected": best, "fallback": fallback}


def _most_defined(agg, groups, sel, scores, sign) -> tuple[str | None, dict]:
    """``Selection.fallback == "most_defined"``: the settings (passing the guard) with the most variants whose
    metric exists on every seed compete on the mean over those variants, if those are at the same places of every
    competing setting's list; returns ``(setting or None, what was decided)``."""
    places = {}
    for k, members in groups.items():
        if not scores[k].get("guard_ok", True) or not scores[k].get("preconditions_ok", True):
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
