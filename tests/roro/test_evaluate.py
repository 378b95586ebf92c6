"""The accuracy-vs-cost summaries: upper concave hull, its area and the accuracy at a matched cost, by hand."""

import pytest

from rubricflow.methods.roro.evaluate import accuracy_at_cost, curve_auc, curve_metrics, hull

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
    m = curve_metrics(pts, ENDS)
    assert m == pytest.approx({"auc": 0.775, "acc_at_cost_25": 0.6, "acc_at_cost_50": 0.9, "acc_at_cost_75": 0.95})
    with pytest.raises(ValueError, match="anchors must include cost 0"):
        curve_auc(pts, [(0.0, 0.3)])
