"""DeltaRubric's rewards: pure functions of verdict correctness (hand-computed tests in tests/deltarubric/).

Per pair the rollout has K no-rubric verdicts, N checklists from the planner and M checklist-guided verdicts per
valid checklist. ``c`` is 1 for a right verdict and 0 for a wrong one or a format failure (no verdict, or a
verifier output that does not execute every check). ``acc0`` = mean ``c`` over the K no-rubric verdicts of the
pair; ``acc_c`` = mean ``c`` over the M verdicts guided by one checklist.

What GRPO does to a reward decides which readings can act. Advantages are centred per group (the N checklists
of a pair for the planner; the M verdicts of one checklist for the verifier) and then divided by the group's std
(``scale_rewards="group"``), the role's batch std (``"batch"``) or nothing (``"none"``). A term that is constant
within a group vanishes in the centring, and a factor that is constant within a group vanishes under group
scaling. So:

Planner (``train.planner_reward``):

* ``improvement`` (default): ``sign(acc_c - acc0)``: +1 when the checklist makes the verifier right more often
  than the no-rubric judge on the same pair, -1 when less often, 0 when it changes nothing. This is the paper's
  "whether the checklist improves over the no-rubric decision": the reward depends on ``acc_c`` *relative to*
  ``acc0`` non-linearly, so it does not reduce to ``acc_c`` plus a per-group constant. A checklist that changes
  nothing (an off-topic one, or any checklist on a pair the judge already gets right) earns no quality reward,
  however often the verdict it guides is right.
* ``shift``: ``acc_c - acc0``, the reading built first. Paired per verifier sample (+1 wrong -> right, -1 right
  -> wrong, 0 otherwise, averaged over the M samples) it is the same number: the transition score of a pair of
  samples is ``c - c0``, so its mean is ``acc_c - acc0``. ``acc0`` is constant within the planner's group, so
  its advantages equal ``absolute``'s (tests/deltarubric/test_rewards.py proves it). Kept for the ablation.
* ``absolute``: ``acc_c`` (the paper's ablation: reward by the final verdict's accuracy alone).

A checklist that breaks the planner's contract (``parse_checklist`` raises) is never executed and gets 0; a valid
one gets ``1 + quality``, so a malformed checklist is never better than a valid one.

Verifier (``train.guidance``), the reward of one guided verdict: ``c + lambda * bonus`` with

* ``paired`` (default): ``bonus = c * (1 - c0)`` where ``c0`` is the correctness of the no-rubric verdict paired
  with this guided verdict (verdict m of a checklist is paired with no-rubric sample ``m mod K``): a right guided
  verdict earns the bonus exactly when its paired no-rubric verdict was wrong, the paper's "right where the
  no-rubric decision was wrong". The bonus varies within a verifier group, so lambda changes advantages under
  group scaling too. What it can and cannot do: the paired no-rubric verdict is sampled independently of the
  guided one, so *which* right verdict of a group gets the bonus carries no information about that verdict;
  averaged over the pairing, a right verdict's bonus is ``lambda * (1 - acc0)``: more weight on pairs the
  no-rubric judge gets wrong. That weight survives batch or no scaling (the default is batch); under group
  scaling only the pairing noise is left.
* ``pair_rate``: ``bonus = c * (1 - acc0)``, the reading built first: the expected value of ``paired``. Within a
  group it is the factor ``1 + lambda (1 - acc0)``, which group scaling cancels exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

PlannerReward = Literal["improvement", "shift", "absolute"]
Guidance = Literal["paired", "pair_rate"]
PLANNER_REWARDS: tuple[str, ...] = ("improvement", "shift", "absolute")
GUIDANCE: tuple[str, ...] = ("paired", "pair_rate")


def accuracy(correct: Sequence[bool | float]) -> float:
    """Mean correctness; an empty list is an error (there is no accuracy of nothing)."""
    if len(correct) == 0:
        raise ValueError("accuracy of an empty list of verdicts")
    return sum(float(c) for c in correct) / len(correct)


def verifier_reward(correct: bool | float, paired_no_rubric: bool | float | None, acc0: float | None, lam: float,
                    guidance: Guidance = "paired") -> float:
    """``c + lam * c * (1 - c0)`` with ``c0`` the paired no-rubric verdict's correctness (``paired``) or the
    pair's no-rubric accuracy ``acc0`` (``pair_rate``); see the module docstring."""
    c = float(correct)
    if guidance == "paired":
        if paired_no_rubric is None:
            raise ValueError("verifier_reward: guidance 'paired' needs the paired no-rubric verdict's correctness")
        c0 = float(paired_no_rubric)
    elif guidance == "pair_rate":
        if acc0 is None:
            raise ValueError("verifier_reward: guidance 'pair_rate' needs the pair's no-rubric accuracy acc0")
        c0 = float(acc0)
    else:
        raise ValueError(f"verifier_reward: guidance must be one of {GUIDANCE}, got {guidance!r}")
    return c + lam * c * (1.0 - c0)


def planner_quality(acc_c: float, acc0: float, mode: PlannerReward = "improvement") -> float:
    """``sign(acc_c - acc0)`` (improvement), ``acc_c - acc0`` (shift) or ``acc_c`` (absolute)."""
    if mode == "improvement":
        d = acc_c - acc0
        return 0.0 if abs(d) < 1e-9 else (1.0 if d > 0 else -1.0)
    if mode == "shift":
        return acc_c - acc0
    if mode == "absolute":
        return acc_c
    raise ValueError(f"planner_reward: mode must be one of {PLANNER_REWARDS}, got {mode!r}")


def planner_reward(valid: bool, acc_c: float | None, acc0: float, mode: PlannerReward = "improvement") -> float:
    """0 for a malformed checklist; ``1 + planner_quality(acc_c, acc0, mode)`` otherwise."""
    if mode not in PLANNER_REWARDS:
        raise ValueError(f"planner_reward: mode must be one of {PLANNER_REWARDS}, got {mode!r}")
    if not valid:
        return 0.0
    if acc_c is None:
        raise ValueError("planner_reward: a valid checklist needs the accuracy of its guided verdicts")
    return 1.0 + planner_quality(acc_c, acc0, mode)


def same_direction(a: Sequence[float], b: Sequence[float], tol: float = 1e-9) -> bool:
    """Whether one group's rewards under two readings give its members the same advantages up to a positive factor:
    the centred vectors are positive multiples of each other, or both zero (a flat group). Under group scaling the
    advantages are then equal; under batch or no scaling the group's update points the same way and only its weight
    against the other groups can differ. ``a`` and ``b`` score the same members in the same order."""
    if len(a) != len(b):
        raise ValueError(f"same_direction: {len(a)} rewards against {len(b)}")
    ca = [x - sum(a) / len(a) for x in a] if a else []
    cb = [x - sum(b) / len(b) for x in b] if b else []
    na, nb = max((abs(x) for x in ca), default=0.0), max((abs(x) for x in cb), default=0.0)
    if na < tol or nb < tol:
        return na < tol and nb < tol
    return all(abs(x / na - y / nb) < 1e-6 for x, y in zip(ca, cb))


def judge_reward(correct: bool | float) -> float:
    """A single-step judge (no-rubric or static, trained as the paper's baselines): its verdict's correctness."""
    return float(correct)
