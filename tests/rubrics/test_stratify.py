"""Coverage / pass rate / selection / tiers: pure functions against hand-computed tables."""

import pytest

from rubricflow.judge import Judgment, Rubric, Verdict
from rubricflow.methods.rucl.rubrics import coverage_and_pass_rates, informativeness, select_and_stratify, summarize

A, B, C = Rubric("A", "a"), Rubric("B", "b"), Rubric("C", "c")
T, F = True, False


def j(status, **v):
    return Judgment(status, {k: Verdict(a, s) for k, (a, s) in v.items()})


def test_coverage_and_pass_rates_hand_computed():
    judgments = [
        j("ok", A=(T, T), B=(T, F), C=(F, None)),
        j("ok", A=(T, F), B=(T, F)),  # C missing: not in any denominator
        Judgment("failed", {"A": Verdict(T, T)}, reason="x"),  # a failed judgment counts nothing, even stray verdicts
        j("repaired", A=(T, T), B=(T, T), C=(F, None)),
    ]
    rows = {r["id"]: r for r in coverage_and_pass_rates(judgments, [A, B, C])}
    assert (rows["A"]["n_judged"], rows["A"]["n_missing"], rows["A"]["n_applicable"], rows["A"]["n_satisfied"]) == (
        3,
        1,
        3,
        2,
    )
    assert rows["A"]["coverage"] == 1.0 and rows["A"]["pass_rate"] == pytest.approx(2 / 3)
    assert rows["B"]["pass_rate"] == pytest.approx(1 / 3)
    assert (rows["C"]["n_judged"], rows["C"]["n_missing"], rows["C"]["coverage"], rows["C"]["pass_rate"]) == (
        2,
        2,
        0.0,
        None,
    )
    assert all(r["n_samples"] == 4 for r in rows.values())


def row(id, cov, p, n=10):
    return {"id": id, "coverage": cov, "pass_rate": p, "n_judged": n}


TABLE = [
    row("a", 1.0, 0.5),  # score 1.0
    row("b", 0.9, 0.9),  # 0.9 * 4 * 0.09 = 0.324
    row("c", 0.2, 0.5),  # dropped: coverage
    row("d", 0.6, 0.25),  # 0.6 * 4 * 0.1875 = 0.45
    row("e", 1.0, 1.0),  # 0: never fails
    row("f", 0.5, 0.8),  # 0.5 * 4 * 0.16 = 0.32
    {"id": "g", "coverage": None, "pass_rate": None, "n_judged": 0},
]


def by_id(rows):
    return {r["id"]: r for r in rows}


def test_informativeness():
    assert informativeness(1.0, 0.5) == 1.0
    assert informativeness(0.6, 0.25) == pytest.approx(0.45)
    assert informativeness(1.0, 0.0) == informativeness(1.0, 1.0) == 0.0
    assert informativeness(None, None) == 0.0


def test_select_ranks_filters_and_tiers():
    out = by_id(select_and_stratify(TABLE, keep_k=3, coverage_min=0.25))
    assert [out[k]["rank"] for k in "abcdefg"] == [1, 3, None, 2, 5, 4, None]
    assert [k for k in "abcdefg" if out[k]["kept"]] == ["a", "b", "d"]
    assert out["c"]["drop_reason"] == "low coverage (0.200 < 0.25)"
    assert out["g"]["drop_reason"] == "no verdicts"
    assert out["f"]["drop_reason"] == "not in top 3" and out["e"]["drop_reason"] == "not in top 3"
    assert (out["a"]["tier"], out["b"]["tier"], out["d"]["tier"]) == ("foundational", "foundational", "advanced")
    assert out["d"]["score"] == pytest.approx(0.45) and out["b"]["score"] == pytest.approx(0.324)
    assert [r["id"] for r in select_and_stratify(TABLE)] == list("abcdefg")  # input order kept


def test_threshold_rule_is_clamped_so_both_tiers_exist():
    all_low = by_id(select_and_stratify(TABLE, keep_k=3, foundational_min_pass=0.95))
    assert {k: all_low[k]["tier"] for k in "abd"} == {"a": "advanced", "b": "foundational", "d": "advanced"}
    all_high = by_id(select_and_stratify(TABLE, keep_k=3, foundational_min_pass=0.1))
    assert {k: all_high[k]["tier"] for k in "abd"} == {"a": "foundational", "b": "foundational", "d": "advanced"}
    one = by_id(select_and_stratify(TABLE, keep_k=1))
    assert one["a"]["tier"] == "foundational" and sum(r["kept"] for r in one.values()) == 1


def test_half_rule_and_ties_by_id():
    out = by_id(select_and_stratify(TABLE, keep_k=3, tier_rule="half"))
    assert {k: out[k]["tier"] for k in "abd"} == {"b": "foundational", "a": "foundational", "d": "advanced"}
    tied = [row("x2", 1.0, 0.5), row("x1", 1.0, 0.5)]
    out = by_id(select_and_stratify(tied, keep_k=2, tier_rule="half"))
    assert (out["x1"]["tier"], out["x2"]["tier"], out["x1"]["rank"]) == ("foundational", "advanced", 1)
    with pytest.raises(ValueError, match="tier_rule"):
        select_and_stratify(TABLE, tier_rule="median")


def test_count_rule_takes_the_n_highest_pass_rates_and_keeps_an_advanced_tier():
    # kept a, b, d with pass rates b > a > d (see test_half_rule_and_ties_by_id)
    two = by_id(select_and_stratify(TABLE, keep_k=3, tier_rule="count", n_foundational=2))
    assert {k: two[k]["tier"] for k in "abd"} == {"b": "foundational", "a": "foundational", "d": "advanced"}
    one = by_id(select_and_stratify(TABLE, keep_k=3, tier_rule="count", n_foundational=1))
    assert {k: one[k]["tier"] for k in "abd"} == {"b": "foundational", "a": "advanced", "d": "advanced"}
    # asking for as many foundational rubrics as are kept still leaves the lowest-pass one advanced
    capped = by_id(select_and_stratify(TABLE, keep_k=3, tier_rule="count", n_foundational=4))
    assert {k: capped[k]["tier"] for k in "abd"} == {"b": "foundational", "a": "foundational", "d": "advanced"}
    alone = by_id(select_and_stratify(TABLE, keep_k=1, tier_rule="count"))
    assert alone["a"]["tier"] == "foundational"


def test_summary():
    rows = select_and_stratify(TABLE, keep_k=3)
    s = summarize(rows, [Judgment("ok"), Judgment("failed", reason="x")])
    assert s["n_candidates"] == 7 and s["n_low_coverage"] == 1 and s["n_kept"] == 3
    assert (s["n_foundational"], s["n_advanced"]) == (2, 1)
    assert s["mean_pass_foundational"] == pytest.approx(0.7) and s["mean_pass_advanced"] == pytest.approx(0.25)
    assert (s["n_judgments"], s["n_judge_ok"], s["n_judge_failed"]) == (2, 1, 1)


def test_the_papers_selection_keeps_mostly_passed_rubrics_and_drops_saturated_ones():
    """The default reading: drop saturated rubrics (pass above the ceiling: no variance in a GRPO group), rank the
    rest by coverage then pass rate, foundational iff the pass rate is at least the threshold. The variance ranking
    would have dropped the mostly passed rubric ``m`` (4p(1-p) small) that the paper's foundational tier is made of."""
    table = [row("sat", 1.0, 0.99), row("m", 1.0, 0.85), row("half", 1.0, 0.5), row("low", 1.0, 0.2),
             row("rare", 0.5, 0.6)]
    out = by_id(select_and_stratify(table, keep_k=3, coverage_min=0.3, rank_by="coverage", saturation_max=0.95,
                                    tier_rule="threshold", foundational_min_pass=0.6))
    assert out["sat"]["drop_reason"] == "saturated (pass 0.990 > 0.95)" and not out["sat"]["kept"]
    assert [k for k in ("m", "half", "low", "rare") if out[k]["kept"]] == ["m", "half", "low"]  # coverage first
    assert out["rare"]["drop_reason"] == "not in top 3"
    assert (out["m"]["tier"], out["half"]["tier"], out["low"]["tier"]) == ("foundational", "advanced", "advanced")
    variance = by_id(select_and_stratify(table, keep_k=2, coverage_min=0.3, rank_by="informativeness"))
    assert not variance["m"]["kept"] and variance["half"]["kept"]  # keep 2: the earlier reading drops the mastered one
    with pytest.raises(ValueError, match="rank_by"):
        select_and_stratify(table, rank_by="entropy")


def test_kind_rule_keeps_grounded_rubrics_perception_first_and_pass_order_says_whether_the_start_agrees():
    """The perception-first reading: consistency and format rubrics are dropped (a template of zeros passes them),
    perception foundational, deduction advanced, whatever the pass rates; pass_order reports whether the start
    passes perception more often than deduction (the premise), and whether a pass-rate rule's tiers came out
    perception-first."""
    from rubricflow.methods.rucl.rubrics.stratify import pass_order, rubric_kind

    assert rubric_kind("counts_match_image", "visual_faithfulness") == "perception"
    assert rubric_kind("no_contradiction", "logical_coherence") == "consistency"
    assert rubric_kind(None, "mathematical_accuracy") == "deduction"  # a teacher rubric: from its category
    assert rubric_kind(None, "") is None
    table = [{**row("read", 1.0, 0.3), "kind": "perception"}, {**row("derive", 0.5, 0.4), "kind": "deduction"},
             {**row("consistent", 1.0, 0.8), "kind": "consistency"}, {**row("boxed", 1.0, 0.7), "kind": "format"}]
    kind = by_id(select_and_stratify(table, keep_k=6, coverage_min=0.3, tier_rule="kind", rank_by="coverage"))
    assert (kind["read"]["tier"], kind["derive"]["tier"]) == ("foundational", "advanced")
    assert not kind["consistent"]["kept"] and kind["consistent"]["drop_reason"] == "not grounded (kind consistency)"
    order = pass_order(list(kind.values()))
    # here the start passes deduction more often (0.4 > 0.3): the premise fails although the tiers are by kind
    assert order == {"mean_pass_perception": 0.3, "mean_pass_deduction": 0.4, "perception_first": 0.0,
                     "tiers_perception_first": 1.0}
    # the pass-rate rule on the same start puts consistency and format first and perception in the advanced tier
    by_pass = select_and_stratify(table, keep_k=6, coverage_min=0.3, tier_rule="threshold", rank_by="coverage",
                                  foundational_min_pass=0.6)
    assert pass_order(by_pass)["tiers_perception_first"] == 0.0 and pass_order(by_pass)["perception_first"] == 0.0
    table[0]["pass_rate"] = 0.7
    assert pass_order(select_and_stratify(table, keep_k=6, tier_rule="kind"))["perception_first"] == 1.0
