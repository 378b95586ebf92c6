"""DeltaRubric reward math, hand-computed, and what GRPO's centring and scaling leave of each reading.

The non-vacuity tests build a batch by hand and compare the advantages ``grouped_advantages`` (the updater's
function) computes: a reading whose ablation would be a no-op under GRPO fails them.
"""

import pytest
import torch

import rubricflow.config  # noqa: F401  (compose Config before importing rubricflow.grpo: avoids an import cycle)
from rubricflow.methods.deltarubric.rewards import (
    accuracy,
    judge_reward,
    planner_quality,
    planner_reward,
    same_direction,
    verifier_reward,
)
from rubricflow.grpo.core import grouped_advantages

SCALES = ("group", "batch", "none")


def test_accuracy():
    assert accuracy([1, 0, 1, 1, 0]) == pytest.approx(0.6)
    assert accuracy([True, True]) == 1.0
    with pytest.raises(ValueError, match="empty"):
        accuracy([])


@pytest.mark.parametrize(
    "correct, c0, acc0, lam, guidance, expected",
    [
        (1, 0, 0.2, 0.4, "paired", 1.4),  # right where the paired no-rubric verdict was wrong: the bonus
        (1, 1, 0.2, 0.4, "paired", 1.0),  # right, and so was the paired no-rubric verdict: no bonus
        (0, 0, 0.2, 0.4, "paired", 0.0),  # a wrong verdict earns nothing
        (1, 0, 0.2, 0.0, "paired", 1.0),  # lambda = 0: plain correctness
        (1, None, 0.0, 0.4, "pair_rate", 1.4),  # the reading built first: 1 + lambda (1 - acc0)
        (1, None, 0.6, 0.4, "pair_rate", 1.16),
        (0, None, 0.0, 0.4, "pair_rate", 0.0),
    ],
)
def test_verifier_reward(correct, c0, acc0, lam, guidance, expected):
    assert verifier_reward(correct, c0, acc0, lam, guidance) == pytest.approx(expected)


def test_verifier_reward_errors():
    with pytest.raises(ValueError, match="paired no-rubric"):
        verifier_reward(1, None, 0.5, 0.4, "paired")
    with pytest.raises(ValueError, match="acc0"):
        verifier_reward(1, 1, None, 0.4, "pair_rate")
    with pytest.raises(ValueError, match="guidance must be one of"):
        verifier_reward(1, 1, 0.5, 0.4, "bonus")


@pytest.mark.parametrize(
    "valid, acc_c, acc0, mode, expected",
    [
        (True, 0.8, 0.4, "improvement", 2.0),  # improves on the no-rubric judge
        (True, 0.4, 0.4, "improvement", 1.0),  # changes nothing: no quality reward
        (True, 0.2, 0.8, "improvement", 0.0),  # hurts: as low as a malformed checklist
        (True, 1.0, 1.0, "improvement", 1.0),  # an easy pair: right, but no better than without a checklist
        (True, 0.8, 0.4, "shift", 1.4),
        (True, 0.2, 0.8, "shift", 0.4),
        (True, 0.8, 0.4, "absolute", 1.8),
        (True, 1.0, 1.0, "absolute", 2.0),  # absolute pays in full for a checklist that changed nothing
        (False, None, 0.4, "improvement", 0.0),
        (False, None, 0.4, "shift", 0.0),
        (False, None, 0.4, "absolute", 0.0),
    ],
)
def test_planner_reward(valid, acc_c, acc0, mode, expected):
    assert planner_reward(valid, acc_c, acc0, mode) == pytest.approx(expected)


def test_planner_reward_errors_and_judge_reward():
    with pytest.raises(ValueError, match="needs the accuracy"):
        planner_reward(True, None, 0.5)
    with pytest.raises(ValueError, match="one of \\('improvement', 'shift', 'absolute'\\)"):
        planner_reward(True, 0.5, 0.5, "relative")
    with pytest.raises(ValueError, match="one of"):
        planner_reward(False, None, 0.5, "ratio")  # a bad mode is an error even for a malformed checklist
    assert planner_quality(0.6, 0.4, "improvement") == 1.0 and planner_quality(0.4, 0.6, "improvement") == -1.0
    assert judge_reward(True) == 1.0 and judge_reward(False) == 0.0


# ----------------------------------------------------------------------------------------------------------------
# Non-vacuity: a constructed batch of two pairs, four checklists each (one malformed in pair 1)

ACC0 = {"p0": 0.6, "p1": 0.2}
CHECKLISTS = {"p0": [0.2, 0.4, 0.8, 1.0], "p1": [0.2, 0.2, 0.6, None]}  # acc_c per checklist; None = malformed


def planner_batch(mode):
    rewards, groups = [], []
    for pair, accs in CHECKLISTS.items():
        for a in accs:
            rewards.append(planner_reward(a is not None, a, ACC0[pair], mode))
            groups.append(f"{pair}/plan")
    return torch.tensor(rewards), groups


def planner_adv(mode, scale):
    r, g = planner_batch(mode)
    return grouped_advantages(r, g, ["planner"] * len(g), scale)


@pytest.mark.parametrize("scale", SCALES)
def test_relative_and_absolute_planner_rewards_give_different_advantages(scale):
    """The default relative reading (improvement over the no-rubric judge) moves the planner differently from the
    absolute reward under every scaling: in pair p0 (acc0 0.6) the checklists at 0.2 and 0.4 both hurt and get the
    same advantage, which absolute tells apart; at 0.8 and 1.0 both improve."""
    rel, ab = planner_adv("improvement", scale), planner_adv("absolute", scale)
    assert not torch.allclose(rel, ab, atol=1e-3)
    assert rel[0] == pytest.approx(float(rel[1]), abs=1e-6) and ab[0] < ab[1]
    assert rel[2] == pytest.approx(float(rel[3]), abs=1e-6) and ab[2] < ab[3]


def test_the_shift_reading_is_the_absolute_reward_after_group_centring():
    """Why the reading built first was vacuous: acc_c - acc0 differs from acc_c by acc0, constant within a planner
    group, so centring removes it (all valid checklists: identical advantages; under batch scaling the two differ
    by one positive factor, the step size)."""
    acc0, accs = 0.4, [0.2, 0.8, 1.0, 0.6]
    for scale in ("group", "none"):
        sh = grouped_advantages(torch.tensor([planner_reward(True, a, acc0, "shift") for a in accs]), ["p"] * 4,
                                ["planner"] * 4, scale)
        ab = grouped_advantages(torch.tensor([planner_reward(True, a, acc0, "absolute") for a in accs]), ["p"] * 4,
                                ["planner"] * 4, scale)
        assert torch.allclose(sh, ab, atol=1e-6)
    # a paired per-sample transition score (+1 wrong->right, -1 right->wrong, 0 otherwise) averages to acc_c - acc0
    guided, no_rubric = [1, 1, 0, 1, 0], [0, 1, 1, 1, 1]
    transitions = [g - n for g, n in zip(guided, no_rubric)]
    assert sum(transitions) / 5 == pytest.approx(accuracy(guided) - accuracy(no_rubric))
    # batch scaling (two all-valid pairs with different acc0): the same direction, another step size
    def two_pairs(mode):
        r = [planner_reward(True, a, a0, mode) for a0, accs in ((0.6, [0.2, 0.4, 0.8]), (0.2, [0.0, 1.0, 0.6]))
             for a in accs]
        return grouped_advantages(torch.tensor(r), ["p0"] * 3 + ["p1"] * 3, ["planner"] * 6, "batch")

    sh, ab = two_pairs("shift"), two_pairs("absolute")
    k = float(sh[0] / ab[0])
    assert k > 0 and torch.allclose(sh, k * ab, atol=1e-4)
    # a malformed checklist (0 in every reading) breaks the shift: then shift and absolute differ in direction too
    assert not torch.allclose(planner_adv("shift", "group"), planner_adv("absolute", "group"), atol=1e-3)


def verifier_batch(lam, guidance):
    """One pair (acc0 = 0.5 from K = 4 no-rubric verdicts [1, 0, 1, 0]), two checklists, M = 4 verdicts each."""
    nr = [1, 0, 1, 0]
    acc0 = accuracy(nr)
    guided = {"c0": [1, 1, 0, 1], "c1": [1, 1, 1, 1]}
    rewards, groups = [], []
    for j, cs in guided.items():
        for m, c in enumerate(cs):
            rewards.append(verifier_reward(c, nr[m % len(nr)], acc0, lam, guidance))
            groups.append(f"p/{j}")
    return torch.tensor(rewards), groups


def verifier_adv(lam, guidance, scale):
    r, g = verifier_batch(lam, guidance)
    return grouped_advantages(r, g, ["verifier"] * len(g), scale)


def test_lambda_changes_verifier_advantages_under_group_scaling():
    """The paired bonus varies within a group: lambda moves the advantages even under group-std scaling, and a
    group whose verdicts are all right still separates those right where the paired no-rubric verdict was wrong.
    The reading built first (a per-group factor) is cancelled exactly by group scaling."""
    base = verifier_adv(0.0, "paired", "group")
    for lam in (0.2, 0.4, 0.6):
        assert not torch.allclose(verifier_adv(lam, "paired", "group"), base, atol=1e-3)
    a = verifier_adv(0.4, "paired", "group")
    assert float(base[4:].abs().sum()) == 0.0  # lambda 0: an all-right group carries no signal
    assert a[5] > 0 > a[4]  # lambda 0.4: verdict 1 (paired no-rubric wrong) above verdict 0 (paired right)
    assert torch.allclose(verifier_adv(0.4, "pair_rate", "group"), verifier_adv(0.0, "pair_rate", "group"), atol=1e-3)
    # under batch scaling the old reading's factor acts (as a weight per pair), and the paired one acts too
    assert not torch.allclose(verifier_adv(0.4, "paired", "batch"), verifier_adv(0.0, "paired", "batch"), atol=1e-3)


@pytest.mark.parametrize("scale", SCALES)
def test_decoupling_holds_with_the_new_rewards(scale):
    """Planner and verifier episodes in one batch: changing lambda moves only the verifier's advantages, changing the
    planner's reading moves only the planner's (advantages are normalised per role)."""

    def both(lam, mode):
        pr, pg = planner_batch(mode)
        vr, vg = verifier_batch(lam, "paired")
        r = torch.cat([pr, vr])
        roles = ["planner"] * len(pg) + ["verifier"] * len(vg)
        adv = grouped_advantages(r, pg + vg, roles, scale)
        return adv[: len(pg)], adv[len(pg):]

    p0, v0 = both(0.0, "improvement")
    p1, v1 = both(0.6, "improvement")
    assert torch.allclose(p0, p1, atol=1e-6) and not torch.allclose(v0, v1, atol=1e-3)
    p2, v2 = both(0.0, "absolute")
    assert torch.allclose(v0, v2, atol=1e-6) and not torch.allclose(p0, p2, atol=1e-3)


def test_same_direction_is_equal_advantages_up_to_a_positive_factor():
    """Two readings of one group's rewards move its members alike when the centred rewards are positive multiples
    (an affine map with a positive slope, as relative and absolute are on checklists whose verdicts agree)."""
    rel = [planner_reward(True, a, 0.5, "improvement") for a in (1.0, 0.0, 1.0)] + [0.0]
    absolute = [planner_reward(True, a, 0.5, "absolute") for a in (1.0, 0.0, 1.0)] + [0.0]
    assert rel == [2.0, 0.0, 2.0, 0.0] and absolute == [2.0, 1.0, 2.0, 0.0]
    # the malformed checklist (0 under both) ties with a wrong valid one under relative only: they differ
    assert not same_direction(rel, absolute)
    assert same_direction(rel[:3], absolute[:3])  # without it, 2 (acc 1) and 0 / 1 (acc 0): same order and spacing
    assert same_direction([1.0, 1.0], [3.0, 3.0])  # both flat
    assert not same_direction([1.0, 1.0], [0.0, 1.0])  # flat against not
    assert not same_direction([0.0, 1.0], [1.0, 0.0])  # a negative multiple reverses the advantages
    assert same_direction([0.0, 1.0, 3.0], [1.0, 3.0, 7.0])  # 2x + 1
    assert not same_direction([0.0, 1.0, 3.0], [0.0, 2.0, 3.0])  # same order, other spacing
    with pytest.raises(ValueError, match="3 rewards against 2"):
        same_direction([0.0, 1.0, 2.0], [0.0, 1.0])
    # under group scaling (the updater's own function): the same advantages exactly when same_direction holds
    for a, b in [(rel, absolute), (rel[:3], absolute[:3]), ([0.0, 1.0, 3.0], [1.0, 3.0, 7.0]),
                 ([0.0, 1.0, 3.0], [0.0, 2.0, 3.0]), ([1.0, 1.0], [3.0, 3.0])]:
        ga = grouped_advantages(torch.tensor(a), ["g"] * len(a), scale="group", eps=1e-9)
        gb = grouped_advantages(torch.tensor(b), ["g"] * len(b), scale="group", eps=1e-9)
        assert torch.allclose(ga, gb, atol=1e-5) == same_direction(a, b)
