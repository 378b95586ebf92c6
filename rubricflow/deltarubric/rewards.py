"""DeltaRubric's rewards: pure functions of verdict correctness (hand-computed tests in test_deltarubric_rewards).

Per pair the rollout has K no-rubric verdicts, N checklists from the planner and M checklist-guided verdicts per
valid checklist. Let ``c`` be 1 for a right verdict and 0 for a wrong one or a format failure (no verdict).

* No-rubric accuracy of the pair: ``acc0 = mean(c over the K no-rubric verdicts)``, the current policy's
  chance of judging the pair right *without* a checklist.
* Verifier reward of a guided verdict: ``c + lambda * c * (1 - acc0)``. The guidance bonus pays a right
  checklist-guided verdict in proportion to how often the no-rubric verdict was wrong on the same pair: +lambda
  when the no-rubric judge always fails, 0 when it never does (the exact reading of "right where the no-rubric
  verdict was wrong", in expectation over the no-rubric samples).
* Planner reward of a checklist: a checklist that violates the planner's contract (``parse_checklist`` raises)
  gets 0 (format reward 0, and it is never executed). A valid one gets ``1 + quality`` where ``quality`` is
  ``acc_c - acc0`` (``relative``, the paper's choice: the improvement over the no-rubric verdict) or ``acc_c``
  (``absolute``, the ablation); ``acc_c`` = mean ``c`` over the M verdicts guided by that checklist.

Note on GRPO normalisation (why the defaults use per-role *batch* scaling): within one advantage group the
guidance bonus is the constant factor ``1 + lambda (1 - acc0)`` and the relative baseline is the constant
``acc0``. Group-std scaling (``scale_rewards="group"``) cancels both exactly, so the bonus would have no effect
and relative == absolute except for the margin to malformed checklists. With ``"batch"`` (centre per group, scale
by the role's batch std) or ``"none"``, the bonus up-weights pairs the no-rubric judge gets wrong; relative and
absolute still centre identically within a group and differ in the valid-vs-malformed margin (``1 + acc_c -
acc0`` vs ``1 + acc_c``) and in the batch std that sets the step size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

PlannerReward = Literal["relative", "absolute"]


def accuracy(correct: Sequence[bool | float]) -> float:
    """Mean correctness; an empty list is an error (there is no accuracy of nothing)."""
    if len(correct) == 0:
        raise ValueError("accuracy of an empty list of verdicts")
    return sum(float(c) for c in correct) / len(correct)


def verifier_reward(correct: bool | float, acc0: float, lam: float) -> float:
    """``c + lam * c * (1 - acc0)`` (see the module docstring)."""
    c = float(correct)
    return c + lam * c * (1.0 - acc0)


def planner_reward(valid: bool, acc_c: float | None, acc0: float, mode: PlannerReward = "relative") -> float:
    """0 for a malformed checklist; ``1 + (acc_c - acc0)`` (relative) or ``1 + acc_c`` (absolute) otherwise."""
    if not valid:
        return 0.0
    if acc_c is None:
        raise ValueError("planner_reward: a valid checklist needs the accuracy of its guided verdicts")
    if mode == "relative":
        return 1.0 + (acc_c - acc0)
    if mode == "absolute":
        return 1.0 + acc_c
    raise ValueError(f"planner_reward: mode must be 'relative' or 'absolute', got {mode!r}")
