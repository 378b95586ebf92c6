"""RuCL's hybrid reward: final-answer outcome plus stratified rubric scores (paper section 3.3).

::

    r      = alpha * outcome + (1 - alpha) * rubric
    rubric = (1 - lambda_t) * S_F + lambda_t * S_A

``S_F`` / ``S_A`` are the fractions of *applicable* foundational / advanced rubrics that the response satisfies
(RuCL's applicability-aware judging: a rubric that does not apply to a response is left out, never counted as
failed). Only rubrics kept by the stratification (present in ``tiers``) count; a kept rubric the judge was asked
about and left out makes the whole reward missing (below).

Rules for what is not there (decided here, tested in tests/test_rewards.py):

* **A tier with no applicable rubric** for this response has no score (``S = NaN``) and its weight moves to the
  other tier: ``rubric = sum(w_k S_k) / sum(w_k)`` over the tiers that have a score, with ``w_F = 1 - lambda_t``,
  ``w_A = lambda_t``. A tier whose weight is 0 never enters (before the curriculum switch, ``lambda_t = 0``, the
  advanced rubrics have no influence at all, even on a response where no foundational rubric applies).
* **No rubric term** (no tier with a score and a positive weight): ``r = alpha * outcome``, the rubric term earning
  nothing. This is a real measurement ("nothing to check in the reasoning"), not a failure, and it never pays more
  than reasoning that the rubrics can check: with applicability read from the response (``judge.applicability:
  response``) a bare answer that no rubric applies to would otherwise earn the whole outcome weight.
* **Judge failure** (``Judgment.status == "failed"``, or no judgment): the whole reward is *missing* (``NaN``);
  the GRPO updater leaves it out of the advantage statistics. Never a 0 or 0.5 reward. Not so in mode ``outcome``.
* **Left-out rubrics** (``Judgment.missing``: kept rubrics the judge was asked about and gave no verdict for): the
  reward is *missing* too. Their verdicts are unknown, not "not applicable": a judge answering one rubric "n/a"
  and leaving out the rest must not earn ``alpha * outcome`` as if nothing could be checked, and a judge talked
  into leaving out the rubrics a response fails must not score it on the rest. (A ``Judgment`` built without
  ``missing``, as in hand-made tests, is scored over the verdicts it has.)

Modes: ``rucl`` (tiers + curriculum weight), ``uniform`` (no tiers: all kept rubrics weigh the same, the paper's
"uniform averaging" ablation), ``outcome`` (``alpha = 1``; the judge is not consulted).

Gate (beyond the paper, labelled as such; ``rucl.reward.gate``):

* ``none`` (the paper's composition): every response earns its rubric term. With ``alpha > 1/2`` a correct answer
  still outranks a wrong one, but *within a group of wrong answers* the rubric term is the only signal, and group
  std scaling turns its small spread ({0, 0.15, 0.3}) into advantages of about +-1 toward whichever template the
  rubrics pay for: a consistent wrong answer is rewarded.
* ``correct_only``: ``r = outcome * (alpha + (1 - alpha) * rubric)`` for a 0/1 outcome: the rubric term only ranks
  correct answers among themselves; every wrong answer earns 0, so an all-wrong group has no advantage (as under
  outcome-only) and every correct answer outranks every wrong one for any ``alpha > 0``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from rubricflow.judge.protocol import Judgment, Rubric
from rubricflow.methods.rucl.config import REWARD_GATES, REWARD_MODES, Gate, RewardMode

TIERS = ("foundational", "advanced")
NAN = float("nan")


@dataclass
class RewardBreakdown:
    """One response's reward and its parts (NaN where a part is undefined; see the module rules)."""

    total: float
    outcome: float
    s_f: float
    s_a: float
    rubric: float
    missing: bool
    lambda_t: float
    n_f: int = 0  # applicable foundational rubrics with a verdict
    n_a: int = 0  # applicable advanced rubrics with a verdict
    reason: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def tier_map(tiers: Mapping[str, str] | Iterable[Rubric]) -> dict[str, str]:
    """``{rubric_id: "foundational" | "advanced"}`` from a mapping or from ``Rubric`` objects (checked)."""
    items = tiers.items() if isinstance(tiers, Mapping) else ((r.id, r.tier) for r in tiers)
    out = {}
    for rid, tier in items:
        if tier not in TIERS:
            raise ValueError(f"rubric {rid!r}: tier must be one of {TIERS} for the reward, got {tier!r}")
        out[str(rid)] = tier
    return out


def tier_scores(judgment: Judgment, tiers: Mapping[str, str]) -> dict[str, tuple[float, int]]:
    """``{"foundational": (S_F, n_F), "advanced": (S_A, n_A), "all": (S, n)}`` over applicable judged rubrics."""
    counts = {t: [0, 0] for t in (*TIERS, "all")}  # satisfied, applicable
    for rid, tier in tiers.items():
        v = judgment.verdicts.get(rid)
        if v is None or not v.applicable or v.satisfied is None:
            continue
        for key in (tier, "all"):
            counts[key][1] += 1
            counts[key][0] += int(bool(v.satisfied))
    return {k: ((s / n) if n else NAN, n) for k, (s, n) in counts.items()}


def combine_tiers(s_f: float, s_a: float, lambda_t: float) -> float:
    """``(1 - lambda) S_F + lambda S_A`` renormalised over the tiers that have a score and a positive weight."""
    parts = [(1.0 - lambda_t, s_f), (lambda_t, s_a)]
    parts = [(w, s) for w, s in parts if w > 0 and not math.isnan(s)]
    wsum = sum(w for w, _ in parts)
    return sum(w * s for w, s in parts) / wsum if wsum > 0 else NAN


def compute_reward(
    outcome: float,
    judgment: Judgment | None,
    tiers: Mapping[str, str],
    lambda_t: float = 0.0,
    alpha: float = 0.7,
    mode: RewardMode = "rucl",
    gate: Gate = "none",
) -> RewardBreakdown:
    """The reward of one response (see the module docstring for every rule)."""
    if mode not in REWARD_MODES:
        raise ValueError(f"reward mode: expected one of {REWARD_MODES}, got {mode!r}")
    if gate not in REWARD_GATES:
        raise ValueError(f"reward gate: expected one of {REWARD_GATES}, got {gate!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"reward alpha: expected a weight in [0, 1], got {alpha}")
    if not 0.0 <= lambda_t <= 1.0:
        raise ValueError(f"lambda_t: expected a weight in [0, 1], got {lambda_t}")
    outcome = float(outcome)
    if mode == "outcome":
        # the judge does not enter the reward; a judgment that is there still gives S_F / S_A for logging
        s_f = s_a = NAN
        n_f = n_a = 0
        if judgment is not None and not judgment.failed:
            sc = tier_scores(judgment, tiers)
            (s_f, n_f), (s_a, n_a) = sc["foundational"], sc["advanced"]
        return RewardBreakdown(outcome, outcome, s_f, s_a, NAN, math.isnan(outcome), lambda_t, n_f, n_a)
    if judgment is None or judgment.failed:
        reason = "no judgment" if judgment is None else f"judge failed: {judgment.reason}"
        return RewardBreakdown(NAN, outcome, NAN, NAN, NAN, True, lambda_t, reason=reason)
    sc = tier_scores(judgment, tiers)
    (s_f, n_f), (s_a, n_a) = sc["foundational"], sc["advanced"]
    left_out = [rid for rid in judgment.missing if rid in tiers]
    if left_out:
        reason = f"no verdict on kept rubric(s) {', '.join(left_out)}: the judge left them out"
        return RewardBreakdown(NAN, outcome, s_f, s_a, NAN, True, lambda_t, n_f, n_a, reason=reason)
    rubric = combine_tiers(s_f, s_a, lambda_t) if mode == "rucl" else sc["all"][0]
    term = 0.0 if math.isnan(rubric) else rubric
    if gate == "correct_only":
        term *= outcome  # the rubric term ranks correct answers only
    total = alpha * outcome + (1.0 - alpha) * term
    return RewardBreakdown(total, outcome, s_f, s_a, rubric, math.isnan(total), lambda_t, n_f, n_a)


def _nanmean(xs: Iterable[float]) -> float:
    v = [x for x in xs if not math.isnan(x)]
    return sum(v) / len(v) if v else NAN


def batch_summary(breakdowns: Sequence[RewardBreakdown]) -> dict[str, float]:
    """Batch means for logging and the curriculum: ``reward``, ``outcome``, ``s_f`` (the curriculum's foundational
    score), ``s_a``, ``rubric`` (each over the samples where it is defined) and ``n_missing``."""
    return {
        "reward": _nanmean(b.total for b in breakdowns),
        "outcome": _nanmean(b.outcome for b in breakdowns),
        "s_f": _nanmean(b.s_f for b in breakdowns),
        "s_a": _nanmean(b.s_a for b in breakdowns),
        "rubric": _nanmean(b.rubric for b in breakdowns),
        "n_missing": float(sum(b.missing for b in breakdowns)),
    }
