"""Preference pairs between routing trajectories of the same problem (``roro_pairs``).

Two trajectories are compared lexicographically by ``order`` (default outcome, then cost, then process quality);
the first criterion that separates them decides, and the pair records which one (``reason``):

* ``outcome``: a right final answer beats a wrong one;
* ``cost``: the cheaper route wins when the difference exceeds ``cost_margin``; cost is counted in LRM calls
  (``cost_unit="lrm_calls"``, the default) or in LRM tokens (``"lrm_tokens"``);
* ``process``: fewer *accepted SLM errors* win (a wrong SLM step that was kept instead of calling the LRM before the
  error propagated); then more *interventions* (LRM calls exactly where the SLM was wrong); then fewer *wasted
  calls* (LRM calls where the SLM was right). Only checkable problems have process quality.

With the default order a *process pair* is two routes with the same outcome and the same cost that placed their LRM
calls differently: what only the process can tell apart. Its ``category`` says whether both routes reached the right
answer (``process-right``: one of them accepted an error the LRM later repaired, or wasted a call the other spent on
an error) or both failed (``process-wrong``: one of them let more SLM errors through).

Trajectories that no criterion separates form no pair. Identical trajectories (same steps by the same writers,
``Trajectory.key``) are merged first (``env.trajectories.dedupe``).

``make_pairs`` pairs the trajectories of each split under ``roro.pairs``; ``run_pairs`` stores the pairs of the
stored trajectories with their split (``paths.pairs_path``), ``read_trajectory_pairs`` reads them back.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rubricflow.util.io import write_parquet
from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.paths import pairs_path, trajectories_path
from rubricflow.methods.roro.env.routing import Trajectory
from rubricflow.methods.roro.env.trajectories import read_trajectories

CRITERIA = ("outcome", "cost", "process")
COST_UNITS = ("lrm_calls", "lrm_tokens")
CATEGORIES = ("outcome", "cost", "process-right", "process-wrong")


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


def route_cost(t: Trajectory, cost_unit: str = "lrm_calls") -> int:
    if cost_unit == "lrm_calls":
        return t.lrm_calls
    if cost_unit == "lrm_tokens":
        return t.lrm_tokens
    raise ValueError(f"pairs.cost_unit: unknown unit {cost_unit!r}; expected one of {COST_UNITS}")


def category(pair: "Pair", trajectories: list[Trajectory]) -> str:
    """``outcome``, ``cost``, ``process-right`` or ``process-wrong`` (see the module docstring)."""
    if pair.reason != "process":
        return pair.reason
    return "process-right" if trajectories[pair.chosen].outcome else "process-wrong"


def compare(a: Trajectory, b: Trajectory, order: tuple[str, ...] | list[str] = CRITERIA,
            cost_margin: int = 0, cost_unit: str = "lrm_calls") -> tuple[int, str | None]:
    """``(+1, reason)`` if ``a`` is preferred, ``(-1, reason)`` if ``b`` is, ``(0, None)`` if no criterion decides."""
    for crit in order:
        if crit == "outcome":
            if a.outcome != b.outcome:
                return (1 if a.outcome else -1), "outcome"
        elif crit == "cost":
            d = route_cost(b, cost_unit) - route_cost(a, cost_unit)  # > 0: a is cheaper
            if abs(d) > cost_margin:
                return (1 if d > 0 else -1), "cost"
        elif crit == "process":
            ka, kb = _process_key(a), _process_key(b)
            if ka is not None and kb is not None and ka != kb:
                return (1 if ka > kb else -1), "process"
        else:
            raise ValueError(f"pairs.order: unknown criterion {crit!r}; expected one of {CRITERIA}")
    return 0, None


def build_trajectory_pairs(
    trajectories: list[Trajectory],
    order: tuple[str, ...] | list[str] = CRITERIA,
    cost_margin: int = 0,
    max_per_problem: int | None = None,
    seed: int = 0,
    cost_unit: str = "lrm_calls",
    available: dict[str, int] | None = None,
    balance: str = "problem",
) -> list[Pair]:
    """The decided pairs within each problem (indices into ``trajectories``), subsampled, seeded:

    * ``balance="problem"``: at most ``max_per_problem`` per problem, round-robin over reasons (so outcome, cost and
      process pairs are all represented where the problem has them), random within a reason;
    * ``balance="split"``: a budget of ``max_per_problem`` times the number of problems, shared equally by the
      reasons (a reason with fewer pairs than its share gives the rest to the others); within a reason, pairs are
      drawn round-robin over problems, random within a problem. Process pairs exist only in problems with several
      SLM errors, so per-problem balancing leaves them a small share; this gives each reason the same share of
      the whole set where the pool has them.

    ``max_per_problem=None`` keeps every decided pair. ``available``, when given, is filled with the number of
    decided pairs per category before subsampling."""
    if balance not in ("problem", "split"):
        raise ValueError(f"pairs.balance: unknown rule {balance!r}; expected 'problem' or 'split'")
    by_problem: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajectories):
        by_problem[t.problem_id].append(i)
    rng = random.Random(seed)
    out: list[Pair] = []
    pool: dict[str, dict[str, list[Pair]]] = {}  # reason -> problem -> pairs (balance="split")
    for pid in sorted(by_problem):
        idx = by_problem[pid]
        by_reason: dict[str, list[Pair]] = defaultdict(list)
        for x in range(len(idx)):
            for y in range(x + 1, len(idx)):
                i, j = idx[x], idx[y]
                s, reason = compare(trajectories[i], trajectories[j], order, cost_margin, cost_unit)
                if s:
                    p = Pair(pid, i, j, reason) if s > 0 else Pair(pid, j, i, reason)
                    by_reason[reason].append(p)
                    if available is not None:
                        cat = category(p, trajectories)
                        available[cat] = available.get(cat, 0) + 1
        if max_per_problem is None:
            out.extend(p for r in order for p in by_reason.get(r, []))
            continue
        for r in by_reason:
            rng.shuffle(by_reason[r])
        if balance == "split":
            for r, ps in by_reason.items():
                pool.setdefault(r, {})[pid] = ps
            continue
        kept: list[Pair] = []
        while len(kept) < max_per_problem and any(by_reason.values()):
            for r in order:
                if by_reason.get(r) and len(kept) < max_per_problem:
                    kept.append(by_reason[r].pop())
        out.extend(kept)
    if balance == "split" and max_per_problem is not None:
        out = _split_balanced(pool, order, max_per_problem * len(by_problem))
    return out


def _split_balanced(pool: dict[str, dict[str, list[Pair]]], order, budget: int) -> list[Pair]:
    """Equal shares of ``budget`` per reason (unused shares passed on), each drawn round-robin over problems."""
    avail = {r: sum(len(v) for v in pool.get(r, {}).values()) for r in order}
    share = dict.fromkeys(order, 0)
    left = budget
    while left > 0:
        open_ = [r for r in order if share[r] < avail[r]]
        if not open_:
            break
        each = max(1, left // len(open_))
        for r in open_:
            add = min(each, avail[r] - share[r], left)
            share[r] += add
            left -= add
            if left == 0:
                break
    out: list[Pair] = []
    for r in order:
        queues = {pid: list(ps) for pid, ps in sorted(pool.get(r, {}).items())}
        taken = 0
        while taken < share[r]:
            for pid in list(queues):
                if taken >= share[r]:
                    break
                if queues[pid]:
                    out.append(queues[pid].pop())
                    taken += 1
                else:
                    del queues[pid]
    return out


def category_counts(pairs: list[Pair], trajectories: list[Trajectory]) -> dict[str, int]:
    """Pairs per category (every category listed, 0 when absent)."""
    out = dict.fromkeys(CATEGORIES, 0)
    for p in pairs:
        out[category(p, trajectories)] += 1
    return out


# ----------------------------------------------------------------------------------------------------------------
# The stage


PAIR_SCHEMA = pa.schema([("problem_id", pa.string()), ("chosen", pa.int64()), ("rejected", pa.int64()),
                         ("reason", pa.string()), ("split", pa.string())])


def make_pairs(rc: RoRoConfig, trajs: list[Trajectory]) -> tuple[list[Pair], dict]:
    """The pairs of ``trajs`` under ``rc.pairs`` and their counts: per split and category, kept (``<split>_<cat>``)
    and decided before the per-problem cap (``<split>_available_<cat>``), and the process share of the kept pairs."""
    pc = rc.pairs
    split_of = {t.problem_id: t.split for t in trajs}
    out: dict = {}
    pairs: list[Pair] = []
    for split in sorted(set(split_of.values())):
        idx = [i for i, t in enumerate(trajs) if t.split == split]
        sub = [trajs[i] for i in idx]
        available: dict[str, int] = {}
        ps = build_trajectory_pairs(sub, pc.order, pc.cost_margin, pc.max_pairs_per_problem, pc.seed, pc.cost_unit,
                                    available, pc.balance)
        counts = category_counts(ps, sub)
        out[f"{split}_pairs"] = len(ps)
        for cat in CATEGORIES:
            out[f"{split}_{cat}"] = counts[cat]
            out[f"{split}_available_{cat}"] = available.get(cat, 0)
        out[f"{split}_process_frac"] = (counts["process-right"] + counts["process-wrong"]) / max(1, len(ps))
        pairs += [Pair(p.problem_id, idx[p.chosen], idx[p.rejected], p.reason) for p in ps]
    out["n_pairs"] = len(pairs)
    return pairs, out


def run_pairs(rc: RoRoConfig, log: Callable[[str, dict], None] | None = None) -> dict:
    """Pair the stored trajectories (indices into the stored list) and store the pairs with their split; returns
    the counts of :func:`make_pairs`."""
    trajs = read_trajectories(trajectories_path(rc))
    pairs, out = make_pairs(rc, trajs)
    split_of = {t.problem_id: t.split for t in trajs}
    rows = [p.to_row(split_of[p.problem_id]) for p in pairs]
    write_parquet(pairs_path(rc), pa.Table.from_pylist(rows, schema=PAIR_SCHEMA))
    return out


def read_trajectory_pairs(path: Path) -> dict[str, list[Pair]]:
    """The stored trajectory pairs per split (``{"train": [Pair, ...], "val": [...]}``)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no pairs; run `rubricflow roro-pairs` first")
    rows = pq.read_table(path).to_pylist()
    return {split: [Pair(r["problem_id"], int(r["chosen"]), int(r["rejected"]), r["reason"]) for r in rows
                    if r["split"] == split] for split in ("train", "val")}
