"""The pairwise-accuracy arithmetic: ties 0.5, a missing score 0, per pair category."""

import pytest

from rubricflow.methods.roro.judge.pairs import Pair
from rubricflow.methods.roro.judge.pairwise import pair_accuracy, pair_credit
from tests.roro.test_judge import _traj


def test_pair_credit():
    assert pair_credit(0.7, 0.2) == 1.0
    assert pair_credit(0.2, 0.2) == 0.5
    assert pair_credit(0.1, 0.2) == 0.0
    assert pair_credit(None, 0.2) == 0.0 and pair_credit(0.9, None) == 0.0  # missing counts as not ordered


def test_pair_accuracy_per_category_by_hand():
    right, wrong = _traj(), _traj()
    wrong.outcome = False
    trajs = [right, wrong, right, wrong]
    pairs = [Pair("p1", 0, 1, "outcome"), Pair("p1", 2, 0, "cost"), Pair("p1", 0, 2, "process"),
             Pair("p1", 1, 3, "process")]
    scores = {0: 0.9, 1: 0.2, 2: 0.9, 3: None}
    acc = pair_accuracy(pairs, trajs, scores)
    # outcome 1, cost tie 0.5, process-right tie 0.5, process-wrong missing 0
    assert acc["pairwise_acc"] == pytest.approx(2.0 / 4) and acc["strict_acc"] == pytest.approx(1 / 4)
    assert (acc["acc_outcome"], acc["acc_cost"], acc["acc_process_right"], acc["acc_process_wrong"]) == (
        1.0, 0.5, 0.5, 0.0)
    assert acc["acc_process"] == pytest.approx(0.25) and acc["n_process"] == 2.0
