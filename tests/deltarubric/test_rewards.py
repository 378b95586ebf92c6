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


def test_relative_equals_absolute_within_a_group_unless_a_checklist_is_malformed():
    """Documents the GRPO consequence stated in rewards.py: acc0 is constant within a pair's planner group, so
    centring removes it; the two modes differ only through malformed checklists (and the batch std)."""
    import torch

    import rubricflow.config  # noqa: F401
    from rubricflow.grpo.core import grouped_advantages

    acc0, accs = 0.4, [0.2, 0.8, 1.0, 0.6]

    def adv(mode, valid, scale):
        r = [planner_reward(v, a if v else None, acc0, mode) for v, a in zip(valid, accs)]
        return grouped_advantages(torch.tensor(r), ["p"] * len(r), ["planner"] * len(r), scale)

    for scale in ("group", "none"):
        assert torch.allclose(adv("relative", [True] * 4, scale), adv("absolute", [True] * 4, scale), atol=1e-6)
        with_bad = [True, True, False, True]
        assert not torch.allclose(adv("relative", with_bad, scale), adv("absolute", with_bad, scale), atol=1e-3)
    # the guidance bonus is a per-group factor: group-std scaling cancels it, "none" keeps it
    c = torch.tensor([1.0, 0.0, 1.0, 1.0])
    for scale, same in (("group", True), ("none", False)):
        a0 = grouped_advantages(c * (1 + 0.4 * (1 - 0.0)), ["g"] * 4, ["verifier"] * 4, scale)
        a1 = grouped_advantages(c, ["g"] * 4, ["verifier"] * 4, scale)
        assert torch.allclose(a0, a1, atol=1e-3) is same
