"""Preference pairs between routing trajectories of the same problem (pure functions).

Two trajectories are compared lexicographically by ``order`` (default outcome, then cost, then process quality);
the first criterion that separates them decides, and the pair records which one (``reason``):

* ``outcome``: a right final answer beats a wrong one;
* ``cost``: fewer LRM tokens win, when the difference exceeds ``cost_margin``;
* ``process``: fewer *accepted SLM errors* win (a wrong SLM step that was kept instead of calling the LRM before the
  error propagated); then more *interventions* (LRM calls exactly where the SLM was wrong); then fewer *wasted
  calls* (LRM calls where the SLM was right). Only checkable problems have process quality.

Trajectories that no criterion separates form no pair. Identical trajectories (same steps by the same writers,
``Trajectory.key``) are merged first.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from rubricflow.roro.routing import Trajectory

CRITERIA = ("outcome", "cost", "process")


@dataclass(frozen=True)
class Pair:
    problem_id: str
    chosen: int  # index into the trajectory list
    rejected: int
    reason: str  # the criterion that decided

    def to_row(self, split: str) -> dict:
        return {"problem_id": self.problem_id, "chosen": self.chosen, "rejected": self.rejected,
                "reason": self.reason, "split": split}


def _process_key(t: Trajectory) -> tuple[int, int, int] | None:
    """Bigger is better: (-accepted errors, interventions, -wasted calls); None when not checkable."""
    acc, itv, waste = t.accepted_slm_errors, t.interventions, t.wasted_calls
    if acc is None or itv is None or waste is None:
        return None
    return (-acc, itv, -waste)


def compare(a: Trajectory, b: Trajectory, order: tuple[str, ...] | list[str] = CRITERIA,
            cost_margin: int = 0) -> tuple[int, str | None]:
    """``(+1, reason)`` if ``a`` is preferred, ``(-1, reason)`` if ``b`` is, ``(0, None)`` if no criterion decides."""
    for crit in order:
        if crit == "outcome":
            if a.outcome != b.outcome:
                return (1 if a.outcome else -1), "outcome"
        elif crit == "cost":
            d = b.lrm_tokens - a.lrm_tokens  # > 0: a is cheaper
            if abs(d) > cost_margin:
                return (1 if d > 0 else -1), "cost"
        elif crit == "process":
            ka, kb = _process_key(a), _process_key(b)
            if ka is not None and kb is not None and ka != kb:
                return (1 if ka > kb else -1), "process"
        else:
            raise ValueError(f"pairs.order: unknown criterion {crit!r}; expected one of {CRITERIA}")
    return 0, None


def dedupe(trajectories: list[Trajectory]) -> list[Trajectory]:
    """First trajectory of each distinct solution (policies that routed identically are merged)."""
    seen: dict[tuple, int] = {}
    out = []
    for t in trajectories:
        k = t.key()
        if k not in seen:
            seen[k] = len(out)
            out.append(t)
    return out


def build_trajectory_pairs(
    trajectories: list[Trajectory],
    order: tuple[str, ...] | list[str] = CRITERIA,
    cost_margin: int = 0,
    max_per_problem: int | None = None,
    seed: int = 0,
) -> list[Pair]:
    """All decided pairs within each problem (indices into ``trajectories``), at most ``max_per_problem`` per
    problem. Subsampling is round-robin over reasons (so outcome, cost and process pairs are all represented),
    random within a reason, seeded."""
    by_problem: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        by_problem[t.problem_id].append(i)
    rng = random.Random(seed)
    out: list[Pair] = []
    for pid in sorted(by_problem):
        idx = by_problem[pid]
        by_reason: dict[str, list[Pair]] = defaultdict(list)
        for x in range(len(idx)):
            for y in range(x + 1, len(idx)):
                i, j = idx[x], idx[y]
                s, reason = compare(trajectories[i], trajectories[j], order, cost_margin)
                if s:
                    by_reason[reason].append(Pair(pid, i, j, reason) if s > 0 else Pair(pid, j, i, reason))
        if max_per_problem is None:
            out.extend(p for r in order for p in by_reason.get(r, []))
            continue
        for r in by_reason:
            rng.shuffle(by_reason[r])
        kept: list[Pair] = []
        while len(kept) < max_per_problem and any(by_reason.values()):
            for r in order:
                if by_reason.get(r) and len(kept) < max_per_problem:
                    kept.append(by_reason[r].pop())
        out.extend(kept)
    return out
