"""DeltaRubric reward math, hand-computed."""

import pytest

from rubricflow.deltarubric.rewards import accuracy, planner_reward, verifier_reward


def test_accuracy():
    assert accuracy([1, 0, 1, 1, 0]) == pytest.approx(0.6)
    assert accuracy([True, True]) == 1.0
    with pytest.raises(ValueError, match="empty"):
        accuracy([])


@pytest.mark.parametrize(
    "correct, acc0, lam, expected",
    [
        (1, 0.0, 0.4, 1.4),  # no-rubric always wrong: full bonus
        (1, 1.0, 0.4, 1.0),  # no-rubric always right: no bonus
        (1, 0.6, 0.4, 1.16),  # 1 + 0.4 * 0.4
        (0, 0.0, 0.4, 0.0),  # a wrong verdict earns nothing
        (1, 0.2, 0.0, 1.0),  # lambda = 0: plain correctness
    ],
)
def test_verifier_reward(correct, acc0, lam, expected):
    assert verifier_reward(correct, acc0, lam) == pytest.approx(expected)


@pytest.mark.parametrize(
    "valid, acc_c, acc0, mode, expected",
    [
        (True, 0.8, 0.4, "relative", 1.4),
        (True, 0.8, 0.4, "absolute", 1.8),
        (True, 0.2, 0.8, "relative", 0.4),  # a checklist that hurts
        (True, 0.0, 1.0, "relative", 0.0),  # as bad as a malformed checklist
        (False, None, 0.4, "relative", 0.0),
        (False, None, 0.4, "absolute", 0.0),
    ],
)
def test_planner_reward(valid, acc_c, acc0, mode, expected):
    assert planner_reward(valid, acc_c, acc0, mode) == pytest.approx(expected)


def test_planner_reward_errors():
    with pytest.raises(ValueError, match="needs the accuracy"):
        planner_reward(True, None, 0.5)
    with pytest.raises(ValueError, match="'relative' or 'absolute'"):
        planner_reward(True, 0.5, 0.5, "ratio")
