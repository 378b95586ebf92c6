"""RuCL Phase I statistics (paper section 3.2, appendix D): coverage, pass rate, selection and tiers.

Pure functions over judgments; rubricflow.methods.rucl.rubrics.build samples responses and writes the files.

Per candidate rubric, over the judged responses:

* ``n_judged``     responses with a verdict for it (failed judgments and rubrics the judge left out are
                   *missing*: counted in ``n_missing``, never in a denominator);
* ``coverage``     = n_applicable / n_judged (the applicable rate);
* ``pass_rate``    = n_satisfied / n_applicable (satisfied given applicable; None when never applicable).

Selection (``select_and_stratify``), the paper's reading by default (coverage, applicability, accuracy):

1. drop candidates with no verdict at all ("no verdicts"), ``coverage < coverage_min`` ("low coverage") or, with
   ``saturation_max``, ``p > saturation_max`` ("saturated": passed by nearly every sampled response, so it varies
   within no GRPO group and its reward term would vanish);
2. rank the rest (``rank_by``) and keep the best ``keep_k``:
   * ``coverage`` (default): higher coverage first, then higher pass rate, then id;
   * ``informativeness`` (the earlier reading, kept as an alternative): ``score = coverage * 4 * p * (1 - p)`` (the
     share of responses the rubric applies to times its normalised Bernoulli variance), ties by higher coverage,
     then id. It drops every rubric the policy mostly passes, the paper's foundational kind;
   ``score`` is reported either way;
3. tiers (pass rate high = already mastered = foundational, low = advanced):
   * ``threshold``: foundational iff ``p >= foundational_min_pass``; if that leaves a tier empty and two or more
     rubrics are kept, the lowest-pass rubric moves to advanced (or the highest-pass to foundational);
   * ``half``: sorted by pass rate (ties by id), the first ``ceil(k / 2)`` are foundational;
   * ``count``: sorted by pass rate (ties by id), the first ``n_foundational`` are foundational (the paper's six
     rubrics split 4 / 2, R01-R04 foundational: appendix G.2), at most ``k - 1`` so that an advanced tier exists.
   * ``kind`` (perception-first, the paper's intent: foundational perception R01-R04, advanced deduction R05-R06):
     only *grounded* rubrics, checked against the image or the problem's facts, are eligible; perception rubrics
     (values read off the image) form the foundational tier, deduction rubrics (intermediate values and the
     conclusion, against the facts) the advanced one. Consistency rubrics (checked against the response itself:
     no contradiction, answer from the last value) and format rubrics are dropped ("not grounded"): a template of
     zeros satisfies them whatever the image shows.
   Ties in pass rate are broken by id so the split is deterministic.

Kinds (:func:`rubric_kind`): from the rubric's programmatic check (:data:`KIND_BY_CHECK`), else from its category
(visual_faithfulness -> perception, mathematical_accuracy -> deduction, logical_coherence -> consistency,
constraint_satisfaction -> format). :func:`pass_order` says whether the *start* passes perception more often than
deduction (the paper's premise for putting perception first), whatever the tier rule: the precondition of a
perception-first study.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rubricflow.judge.protocol import Judgment, Rubric

KINDS = ("perception", "deduction", "consistency", "format")
GROUNDED = ("perception", "deduction")
KIND_BY_CHECK = {
    # values read off the image (or, for text problems, the given values restated)
    "perception_correct": "perception", "counts_match_image": "perception", "bar_heights_match_image": "perception",
    "points_match_image": "perception", "no_hallucinated_entities": "perception",
    # values derived from the facts, checked against the facts
    "intermediate_correct": "deduction", "tallest_bar_named": "deduction", "fractional_area_exact": "deduction",
    # checked against the response itself
    "perception_complete": "consistency", "answer_from_last_value": "consistency", "no_contradiction": "consistency",
    "perception_before_reasoning": "consistency", "intermediate_steps_shown": "consistency",
    "arithmetic_consistent": "consistency", "diff_from_extremes": "consistency", "question_target_addressed":
    "consistency",
    # the output's form
    "boxed_present": "format", "single_boxed": "format", "answer_format": "format", "concise": "format",
}
KIND_BY_CATEGORY = {"visual_faithfulness": "perception", "mathematical_accuracy": "deduction",
                    "logical_coherence": "consistency", "constraint_satisfaction": "format"}


def rubric_kind(check: str | None, category: str | None) -> str | None:
    """perception / deduction / consistency / format (None when neither the check nor the category says)."""
    return KIND_BY_CHECK.get(check or "") or KIND_BY_CATEGORY.get(category or "")


TABLE_COLUMNS = (
    "id",
    "category",
    "kind",
    "check",
    "n_samples",
    "n_judged",
    "n_missing",
    "n_applicable",
    "n_satisfied",
    "coverage",
    "pass_rate",
    "score",
    "rank",
    "kept",
    "tier",
    "drop_reason",
    "text",
)


def coverage_and_pass_rates(judgments: Iterable[Judgment], rubrics: list[Rubric]) -> list[dict]:
    """One row per rubric (in ``rubrics`` order) with counts, coverage and pass rate (see module docstring)."""
    judgments = list(judgments)
    rows = []
    for r in rubrics:
        judged = applicable = satisfied = 0
        for j in judgments:
            v = None if j.status == "failed" else j.verdicts.get(r.id)
            if v is None:
                continue
            judged += 1
            if v.applicable and v.satisfied is not None:
                applicable += 1
                satisfied += bool(v.satisfied)
        rows.append(
            {
                "id": r.id,
                "category": r.category,
                "kind": rubric_kind(r.check, r.category),
                "check": r.check,
                "text": r.text,
                "n_samples": len(judgments),
                "n_judged": judged,
                "n_missing": len(judgments) - judged,
                "n_applicable": applicable,
                "n_satisfied": satisfied,
                "coverage": applicable / judged if judged else None,
                "pass_rate": satisfied / applicable if applicable else None,
            }
        )
    return rows


def informativeness(coverage: float | None, pass_rate: float | None) -> float:
    """``coverage * 4 p (1 - p)``; 0 when undefined."""
    if coverage is None or pass_rate is None:
        return 0.0
    return coverage * 4.0 * pass_rate * (1.0 - pass_rate)


def select_and_stratify(
    table: list[dict],
    keep_k: int = 6,
    coverage_min: float = 0.25,
    tier_rule: str = "threshold",
    foundational_min_pass: float = 0.5,
    n_foundational: int = 4,
    rank_by: str = "informativeness",
    saturation_max: float | None = None,
) -> list[dict]:
    """Copy of ``table`` with ``score``, ``rank`` (1 = best, None if dropped by coverage), ``kept``, ``tier``
    (foundational / advanced / None) and ``drop_reason``; same row order as the input."""
    if tier_rule not in ("threshold", "half", "count", "kind"):
        raise ValueError(f"tier_rule: expected 'threshold', 'half', 'count' or 'kind', got {tier_rule!r}")
    if rank_by not in ("coverage", "informativeness"):
        raise ValueError(f"rank_by: expected 'coverage' or 'informativeness', got {rank_by!r}")
    rows = [dict(r) for r in table]
    eligible = []
    for r in rows:
        r.update(score=round(informativeness(r["coverage"], r["pass_rate"]), 6), rank=None, kept=False, tier=None)
        if not r["n_judged"]:
            r["drop_reason"] = "no verdicts"
        elif r["coverage"] < coverage_min:
            r["drop_reason"] = f"low coverage ({r['coverage']:.3f} < {coverage_min:g})"
        elif r["pass_rate"] is None:
            r["drop_reason"] = "never applicable"
        elif saturation_max is not None and r["pass_rate"] > saturation_max:
            r["drop_reason"] = f"saturated (pass {r['pass_rate']:.3f} > {saturation_max:g})"
        elif tier_rule == "kind" and r.get("kind") not in GROUNDED:
            r["drop_reason"] = f"not grounded (kind {r.get('kind')})"
        else:
            r["drop_reason"] = None
            eligible.append(r)
    if rank_by == "coverage":
        eligible.sort(key=lambda r: (-r["coverage"], -r["pass_rate"], r["id"]))
    else:
        eligible.sort(key=lambda r: (-r["score"], -r["coverage"], r["id"]))
    for i, r in enumerate(eligible, 1):
        r["rank"] = i
        if i <= keep_k:
            r["kept"] = True
        else:
            r["drop_reason"] = f"not in top {keep_k}"
    kept = sorted((r for r in eligible if r["kept"]), key=lambda r: (-r["pass_rate"], r["id"]))
    if tier_rule == "kind":
        for r in kept:
            r["tier"] = "foundational" if r.get("kind") == "perception" else "advanced"
    elif tier_rule in ("half", "count"):
        if tier_rule == "half":
            n_f = math.ceil(len(kept) / 2)
        else:
            n_f = min(n_foundational, len(kept) - 1) if len(kept) >= 2 else len(kept)
        for i, r in enumerate(kept):
            r["tier"] = "foundational" if i < n_f else "advanced"
    else:
        for r in kept:
            r["tier"] = "foundational" if r["pass_rate"] >= foundational_min_pass else "advanced"
        if len(kept) >= 2:
            if all(r["tier"] == "foundational" for r in kept):
                kept[-1]["tier"] = "advanced"
            elif all(r["tier"] == "advanced" for r in kept):
                kept[0]["tier"] = "foundational"
    return rows


def pass_order(rows: list[dict]) -> dict:
    """Whether the start passes perception before deduction, over the rubrics any rule could tier (applicable
    enough and not saturated: no drop reason, or dropped only by rank or groundedness): ``mean_pass_perception``,
    ``mean_pass_deduction``, ``perception_first`` (1.0 when perception passes more often, 0.0 when not, None without
    both kinds) and ``tiers_perception_first`` (whether the table's tiers put every kept perception rubric in the
    foundational tier and every kept deduction rubric in the advanced one, with at least one foundational
    perception rubric: true by construction under ``kind``, measured under the pass-rate rules)."""
    def usable(r):
        why = r.get("drop_reason") or ""
        return r.get("pass_rate") is not None and (not why or why.startswith(("not in top", "not grounded")))

    means = {}
    for kind in GROUNDED:
        v = [r["pass_rate"] for r in rows if r.get("kind") == kind and usable(r)]
        means[kind] = round(sum(v) / len(v), 6) if v else None
    kept = [r for r in rows if r.get("kept")]
    def has(kind, tier):
        return any(r.get("kind") == kind and r.get("tier") == tier for r in kept)

    tiers_first = has("perception", "foundational") and not has("perception", "advanced") and not has(
        "deduction", "foundational")
    p, d = means["perception"], means["deduction"]
    return {"mean_pass_perception": p, "mean_pass_deduction": d,
            "perception_first": None if p is None or d is None else float(p > d),
            "tiers_perception_first": float(tiers_first)}


def summarize(rows: list[dict], judgments: list[Judgment] | None = None) -> dict:
    """Flat summary metrics of a stratification table (DVC metric / MLflow friendly)."""

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return round(sum(xs) / len(xs), 6) if xs else None

    f = [r for r in rows if r["tier"] == "foundational"]
    a = [r for r in rows if r["tier"] == "advanced"]
    out = {
        "n_candidates": len(rows),
        "n_low_coverage": sum(1 for r in rows if (r["drop_reason"] or "").startswith("low coverage")),
        "n_saturated": sum(1 for r in rows if (r["drop_reason"] or "").startswith("saturated")),
        "n_kept": sum(1 for r in rows if r["kept"]),
        "n_foundational": len(f),
        "n_advanced": len(a),
        "mean_pass_foundational": mean(r["pass_rate"] for r in f),
        "mean_pass_advanced": mean(r["pass_rate"] for r in a),
        "mean_coverage_kept": mean(r["coverage"] for r in rows if r["kept"]),
        **pass_order(rows),
    }
    if judgments is not None:
        out["n_judgments"] = len(judgments)
        for s in ("ok", "repaired", "failed"):
            out[f"n_judge_{s}"] = sum(1 for j in judgments if j.status == s)
    return out
