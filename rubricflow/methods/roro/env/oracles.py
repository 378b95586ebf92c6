"""Process scores of known quality for the router's reward: the exact oracle, the oracle corrupted to a chosen
process-pair accuracy, and an exact reader of a Rubricor's rubrics (the Judge-quality dose-response,
``rubricflow study roro_judge_dose``; ``rubricflow.methods.roro.study.judge_dose``).

* :func:`oracle_process_score`: ``1 - (accepted SLM errors + wasted LRM calls) / steps``, read off the route's
  checked steps (the ``oracle-process`` routers; the upper bound on what any Judge could give).
* ``oracle-noisy`` (:class:`NoisyOracleScorer`): the oracle's score plus Gaussian noise that is a pure function of
  the route and a seed, clipped to [0, 1]::

      score(t) = clip(oracle(t) + sigma * z(t, seed), 0, 1),   z(t, seed) = Phi^-1(u),  u = sha256(seed, t.key())

  The noise is fixed per distinct route (``Trajectory.key``): a route is scored the same at every GRPO step, as
  the learned Judge's memoised scores are, so its errors are systematic, not averaged away over steps.
  ``sigma`` is calibrated by bisection (:func:`calibrate_sigma`) so that the scorer orders, in expectation over
  the noise (the mean over fixed calibration draws), a target share of the val process pairs
  (``judge.pairwise.pair_accuracy``'s ``acc_process``: ties 0.5, the measure the learned Judge is kept and reported
  by); the accuracy the unit's own draw reaches on them is reported beside the target. A target at or above the
  oracle's own accuracy gives ``sigma = 0``: the oracle itself.
* ``exact-reader`` (:class:`ReaderScorer`): the score an exact code-level reader of a rubric gives
  (:func:`literal_score`: ``sum weight * 1[literal reading]``), under the rubrics the warm-started Rubricor writes
  (:func:`warm_rubricor_rubrics`: the Rubricor after round 0 of the alternation, with
  ``roro.rubricor_judge.seed``): the best any Judge could do under those rubrics.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

from rubricflow.methods.roro.judge.pairs import Pair, category
from rubricflow.methods.roro.judge.pairwise import pair_accuracy
from rubricflow.judge.protocol import Rubric
from rubricflow.methods.roro.judge.prompts import family_satisfied
from rubricflow.methods.roro.env.routing import Trajectory

SIGMA_MAX = 64.0  # far beyond the [0, 1] score range: clipped to its ends, the order is a coin flip
BISECT_STEPS = 40
CALIBRATION_DRAWS = 200


def oracle_process_score(t: Trajectory) -> float | None:
    """The process score an exact judge of the steps would give: ``1 - (accepted SLM errors + wasted LRM calls) /
    steps``, in [0, 1], read off the route's checked steps (the step cache). An accepted error is a wrong SLM step
    kept instead of calling the LRM; a wasted call is an LRM call where the SLM's step was right. None when the
    steps are not checkable."""
    acc, waste = t.accepted_slm_errors, t.wasted_calls
    if acc is None or waste is None or not t.steps:
        return None
    return 1.0 - (acc + waste) / len(t.steps)


# ----------------------------------------------------------------------------------------------------------------
# oracle-noisy


_NORMAL = NormalDist()


def route_noise(t: Trajectory, seed: int | str) -> float:
    """A standard normal draw that is a pure function of the route's identity (``Trajectory.key``) and ``seed``
    (SHA-256, not Python's salted ``hash``: the same in every process and on every machine)."""
    h = hashlib.sha256(repr((seed, t.key())).encode()).digest()
    u = (int.from_bytes(h[:8], "big") + 0.5) / 2.0**64  # in (0, 1)
    return _NORMAL.inv_cdf(u)


def noisy_score(base: float | None, z: float, sigma: float) -> float | None:
    """``clip(base + sigma * z, 0, 1)``; None when ``base`` is None (not checkable: missing, never 0)."""
    if base is None:
        return None
    return min(1.0, max(0.0, base + sigma * z))


def process_pairs(pairs: Sequence[Pair], trajectories: Sequence[Trajectory]) -> list[Pair]:
    """The process pairs (``process-right`` and ``process-wrong``) among ``pairs``."""
    return [p for p in pairs if category(p, list(trajectories)).startswith("process")]


def process_accuracy(pairs: Sequence[Pair], trajectories: Sequence[Trajectory],
                     score: Callable[[Trajectory], float | None]) -> float | None:
    """``score``'s accuracy on the process pairs among ``pairs`` (ties 0.5, a missing score 0); None when there
    are none."""
    pp = process_pairs(pairs, trajectories)
    if not pp:
        return None
    need = {i for p in pp for i in (p.chosen, p.rejected)}
    return pair_accuracy(pp, list(trajectories), {i: score(trajectories[i]) for i in need})["acc_process"]


def calibrate_sigma(pairs: Sequence[Pair], trajectories: Sequence[Trajectory], target: float, seed: int,
                    base: Callable[[Trajectory], float | None] = oracle_process_score, draws: int = CALIBRATION_DRAWS,
                    steps: int = BISECT_STEPS, sigma_max: float = SIGMA_MAX) -> dict:
    """The noise scale at which ``clip(base + sigma * z, 0, 1)`` orders, in expectation over the noise, ``target``
    of the process pairs among ``pairs`` (the val pairs), by bisection on ``sigma`` in [0, ``sigma_max``].

    The expectation is the mean accuracy over ``draws`` fixed noise draws (``route_noise`` seeded ``cal0``,
    ``cal1``, ...), not the unit's own draw: a few dozen pairs under one draw give a step function of ``sigma``
    that a bisection would fit to that draw's luck (a scale that hits the target on val by chance and misses it on
    the train routes the router learns from). So ``sigma`` depends on the target and the pairs only; the accuracy
    the unit's draw (``seed``) reaches on these pairs is ``reached``, reported beside the ``expected`` one.
    ``target`` at or above the accuracy at ``sigma = 0`` (``base_accuracy``) gives ``sigma = 0``: the base score
    itself; a target of 0.5 (chance) or below gives ``sigma_max``, where the clipped score is a coin per route in all
    but name. Raises ValueError when there is no process pair or the target is not in (0, 1]."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target accuracy {target!r}: expected a number in (0, 1]")
    pp = process_pairs(pairs, trajectories)
    if not pp:
        raise ValueError("calibrate_sigma: no process pairs to calibrate on")
    need = sorted({i for p in pp for i in (p.chosen, p.rejected)})
    b = {i: base(trajectories[i]) for i in need}
    zs = [{i: route_noise(trajectories[i], f"cal{k}") for i in need} for k in range(draws)]
    own = {i: route_noise(trajectories[i], seed) for i in need}

    def acc_with(z: dict, sigma: float) -> float:
        return pair_accuracy(pp, list(trajectories), {i: noisy_score(b[i], z[i], sigma) for i in need})["acc_process"]

    def expected(sigma: float) -> float:
        return sum(acc_with(z, sigma) for z in zs) / len(zs)

    a0 = acc_with(own, 0.0)
    out = {"target": target, "base_accuracy": a0, "n_process_pairs": len(pp), "seed": seed, "draws": draws}
    if target >= a0:
        return {**out, "sigma": 0.0, "expected": a0, "reached": a0}
    lo, hi = 0.0, sigma_max
    if target <= 0.5 or expected(hi) >= target:  # chance, or below what the widest noise gives: as noisy as it gets
        lo = hi
    else:
        for _ in range(steps):
            mid = (lo + hi) / 2
            if expected(mid) >= target:
                lo = mid
            else:
                hi = mid
    return {**out, "sigma": lo, "expected": expected(lo), "reached": acc_with(own, lo)}


class NoisyOracleScorer:
    """``ProcessScorer``'s interface over ``clip(oracle + sigma * z(t, seed), 0, 1)`` (nothing cached: a cheap pure
    function of the route; ``failures`` counts the routes without a checkable oracle score)."""

    def __init__(self, sigma: float, seed: int, base: Callable[[Trajectory], float | None] = oracle_process_score):
        if not (sigma >= 0 and math.isfinite(sigma)):
            raise ValueError(f"noise scale {sigma!r}: expected a finite number >= 0")
        self.sigma, self.seed, self.base = float(sigma), int(seed), base
        self.failures = 0

    def score(self, t: Trajectory) -> float | None:
        if self.sigma == 0.0:
            return self.base(t)
        return noisy_score(self.base(t), route_noise(t, self.seed), self.sigma)

    def scores(self, trajs: list[Trajectory]) -> list[float | None]:
        out = [self.score(t) for t in trajs]
        self.failures += sum(s is None for s in out)
        return out


# ----------------------------------------------------------------------------------------------------------------
# exact-reader


def literal_score(rubric: list[Rubric], t: Trajectory, reads_problem: bool = False) -> float | None:
    """An exact reader's process score of ``t`` under a parsed rubric: ``sum weight * 1.0 * literal reading``
    (score 1.0, the families' guidance; a reader of the problem when ``reads_problem``); None when a criterion is not
    a family template."""
    total = 0.0
    for c in rubric:
        sat = family_satisfied(c, t, reads_problem)
        if sat is None:
            return None
        total += c.weight * float(sat)
    return total


class ReaderScorer:
    """``ProcessScorer``'s interface over :func:`literal_score` under fixed rubrics (problem id -> ``ParsedRubric``):
    a failed rubric or a criterion off the family templates is missing (None), counted in ``failures``."""

    def __init__(self, rubrics: dict, reads_problem: bool = False):
        self.rubrics, self.reads_problem = rubrics, reads_problem  # reads as the Judge does (judge_reads)
        self.failures = 0

    def score(self, t: Trajectory) -> float | None:
        r = self.rubrics.get(t.problem_id)
        if r is None:
            raise KeyError(f"no rubric for problem {t.problem_id}")
        return None if r.failed else literal_score(r.value, t, self.reads_problem)

    def scores(self, trajs: list[Trajectory]) -> list[float | None]:
        out = [self.score(t) for t in trajs]
        self.failures += sum(s is None for s in out)
        return out


def warm_rubricor_rubrics(rc, trajectories: list[Trajectory], train_pids: Sequence[str], views: dict) -> dict:
    """The rubric the warm-started Rubricor writes (greedy) for each problem of ``views`` (problem id ->
    ``rubricor.ProblemView``): the same Rubricor as round 0 of the alternation with ``rc.rubricor_judge`` (built
    from the stored routes' tokenizer corpus, warm-started on random rubrics of the ``train_pids`` problems:
    ``judge.alternation.warm_start``)."""
    from rubricflow.methods.roro.judge.rubricor import problem_views, write_rubrics
    from rubricflow.methods.roro.judge.alternation import build_lms, warm_start

    rj = rc.rubricor_judge
    stored = problem_views(trajectories)
    _, rubricor = build_lms(rj, stored, trajectories)
    pids = sorted(set(train_pids))
    warm_start(None, rubricor, rj, {p: stored[p] for p in pids}, [t for t in trajectories if t.problem_id in set(pids)])
    return write_rubrics(rubricor, dict(views), sorted(views))
