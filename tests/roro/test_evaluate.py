"""The accuracy-vs-cost summaries: upper concave hull, its area and the accuracy at a matched cost, by hand."""

import pytest

from rubricflow.config import ConfigError, config_from_dict
from rubricflow.methods.roro.router.curves import (
    accuracy_at_cost,
    common_range,
    curve_auc,
    curve_metrics,
    hull,
    matched_accuracy,
    range_auc,
    select_cost_weights,
)
from rubricflow.methods.roro.router.evaluate import method_curves

ENDS = [(0.0, 0.3), (1.0, 1.0)]  # all-SLM, all-LRM


def test_hull_drops_points_under_the_chord_and_keeps_the_best_at_a_cost():
    pts = [(0.5, 0.9), (0.25, 0.4), (0.75, 0.97), (0.5, 0.6)]
    # (0.25, 0.4) lies under the segment (0, 0.3)-(0.5, 0.9) (0.6 there): dropped; at 0.5 the best (0.9) counts
    assert hull(pts + ENDS) == [(0.0, 0.3), (0.5, 0.9), (0.75, 0.97), (1.0, 1.0)]
    # a point exactly on a segment is not a vertex
    assert hull([(0.0, 0.0), (0.5, 0.5), (1.0, 1.0)]) == [(0.0, 0.0), (1.0, 1.0)]
    with pytest.raises(ValueError, match="no points"):
        hull([])
    with pytest.raises(ValueError, match=r"costs must be fractions.*\[1.5\]"):
        hull([(1.5, 0.9)])


def test_auc_and_matched_accuracy_by_hand():
    pts = [(0.5, 0.9)]
    # trapezoids: 0.5 * (0.3 + 0.9) / 2 + 0.5 * (0.9 + 1.0) / 2 = 0.3 + 0.475
    assert curve_auc(pts, ENDS) == pytest.approx(0.775)
    assert curve_auc([], ENDS) == pytest.approx(0.65)  # no point above the chord: the chord's area
    assert curve_auc([(0.3, 0.4)], ENDS) == pytest.approx(0.65)  # a router worse than mixing the ends adds nothing
    assert accuracy_at_cost(pts, ENDS, 0.25) == pytest.approx(0.6)
    assert accuracy_at_cost(pts, ENDS, 0.75) == pytest.approx(0.95)
    with pytest.raises(ValueError, match="anchors must include cost 0"):
        curve_auc(pts, [(0.0, 0.3)])


# two methods whose swept points cover different costs: A at 0.1-0.6, B at 0.4-0.9
A = [(0.1, 0.5), (0.3, 0.7), (0.6, 0.9)]
B = [(0.4, 0.7), (0.6, 0.8), (0.9, 0.95)]


def test_common_range_is_where_every_method_has_points_inside_the_fixed_range():
    assert common_range({"a": A, "b": B}, 0.2, 0.8) == (0.4, 0.6)
    assert common_range({"a": A, "b": B}, 0.0, 1.0) == (0.4, 0.6)
    assert common_range({"a": A}, 0.2, 0.8) == (0.2, 0.6)
    assert common_range({"a": [(0.1, 0.5)], "b": [(0.7, 0.9)]}, 0.0, 1.0) is None  # no overlap
    assert common_range({"a": A, "b": []}, 0.2, 0.8) is None


def test_range_auc_by_hand_and_na_without_points_at_both_ends():
    # A's hull on [0.1, 0.6]: (0.1, 0.5)-(0.3, 0.7)-(0.6, 0.9); over [0.2, 0.6]: mean of the trapezoids
    want = (0.1 * (0.6 + 0.7) / 2 + 0.3 * (0.7 + 0.9) / 2) / 0.4
    assert range_auc(A, ENDS, 0.2, 0.6) == pytest.approx(want)
    assert range_auc(A, ENDS, 0.2, 0.8) is None  # A has no point at or above 0.8: its hull there is a chord to 1.0
    assert range_auc(B, ENDS, 0.2, 0.8) is None  # B has none at or below 0.2
    assert range_auc(B, ENDS, 0.4, 0.9) == pytest.approx((0.7 + 0.95) / 2)  # B's points lie on one line


def test_accuracy_at_matched_cost_only_between_a_methods_own_points():
    assert matched_accuracy(A, ENDS, 0.45) == pytest.approx(0.8)
    assert matched_accuracy(A, ENDS, 0.6) == pytest.approx(0.9)  # a point exactly there
    assert matched_accuracy(A, ENDS, 0.75) is None  # the chord (0.6, 0.9)-(1.0, 1.0) is no measurement
    assert accuracy_at_cost(A, ENDS, 0.75) == pytest.approx(0.9375)  # what the chord would have said
    assert matched_accuracy(B, ENDS, 0.3) is None
    m = curve_metrics(A, ENDS, (0.2, 0.8), [0.3, 0.5, 0.7])
    assert m["acc_at_cost_30"] == pytest.approx(0.7) and m["acc_at_cost_70"] is None and m["range_auc"] is None
    assert (m["cost_min"], m["cost_max"]) == (0.1, 0.6) and m["auc"] == pytest.approx(curve_auc(A, ENDS))
    assert set(curve_metrics(A, ENDS, (0.2, 0.8), [0.5], prefix="chain_")) == {
        "chain_auc", "chain_range_auc", "chain_acc_at_cost_50", "chain_cost_min", "chain_cost_max"}


def test_cost_weight_rule_keeps_the_range_and_the_nearest_weight_outside_each_end():
    val = {0.05: 0.95, 0.1: 0.85, 0.2: 0.7, 0.3: 0.5, 0.4: 0.3, 0.6: 0.15, 0.8: 0.05}
    assert select_cost_weights(val, 0.2, 0.8) == [0.1, 0.2, 0.3, 0.4, 0.6]
    assert select_cost_weights({0.1: 0.6, 0.2: 0.5}, 0.2, 0.8) == [0.1, 0.2]  # none outside: the range only
    assert select_cost_weights({0.1: 0.9, 0.2: 0.85}, 0.2, 0.8) == [0.2]  # all above: the nearest


def _row(method, cost, acc, chain):
    return {"method": method, "lrm_cost_frac": cost, "accuracy": acc, "chain_exact": chain}


def test_method_curves_give_outcome_and_chain_exact_metrics_over_the_configured_range():
    ec = config_from_dict({}).roro.eval
    assert (ec.cost_range, ec.matched_costs, ec.cost_weight_rule) == ([0.2, 0.8], [0.3, 0.5, 0.7], "val_span")
    rows = [_row("all-slm", 0.0, 0.5, 0.3), _row("all-lrm", 1.0, 0.9, 0.7)]
    rows += [_row("roro", c, a, a - 0.2) for c, a in ((0.1, 0.7), (0.5, 0.85), (0.9, 0.9))]  # a concave curve
    rows += [_row("outcome-only", c, a, 0.4) for c, a in ((0.4, 0.7), (0.6, 0.78))]
    cur = method_curves(rows, ec)
    # the hull at 0.2, 0.5, 0.8: 0.7375, 0.85, 0.8875; two trapezoids over the width 0.6
    want = (0.3 * (0.7375 + 0.85) / 2 + 0.3 * (0.85 + 0.8875) / 2) / 0.6
    assert cur["roro"]["range_auc"] == pytest.approx(want)
    assert cur["roro"]["chain_range_auc"] == pytest.approx(want - 0.2)
    assert cur["outcome-only"]["range_auc"] is None and cur["outcome-only"]["acc_at_cost_50"] == pytest.approx(0.74)
    assert cur["outcome-only"]["acc_at_cost_30"] is None and cur["outcome-only"]["chain_acc_at_cost_70"] is None
    gsm = [{**r, "chain_exact": None} for r in rows]  # steps not checkable: no chain-exact metrics
    assert not any(k.startswith("chain_") for k in method_curves(gsm, ec)["roro"])


def test_cost_range_and_matched_costs_are_checked():
    with pytest.raises(ConfigError, match=r"roro.eval.*cost_range \[0.8, 0.2\]"):
        config_from_dict({"roro": {"eval": {"cost_range": [0.8, 0.2]}}})
    with pytest.raises(ConfigError, match=r"matched_costs \[0.9\] lie outside cost_range"):
        config_from_dict({"roro": {"eval": {"matched_costs": [0.5, 0.9]}}})
