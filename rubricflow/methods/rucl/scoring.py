"""Score completions with rubricflow's judge and RuCL's hybrid reward: the one scorer of RuCL's own rollouts
(``rubricflow.methods.rucl.rollout``) and of the integrations with other trainers
(``rubricflow.methods.rucl.integrations``: TRL, verl).

``RubricScorer`` holds a judge (any backend of ``rubricflow.judge``: programmatic, openai, local; cached and
budgeted as ``make_judge`` builds it), the tiered rubrics, ``alpha`` and the reward mode, and a
``CurriculumScheduler``. Per reward call (one batch of completions)::

    lambda_t   = scheduler.lambda_t                  (decided by the steps before)
    judgments  = judge.judge(requests)               (one batched call; skipped in mode "outcome")
    breakdowns = compute_reward(outcome, judgment, tiers, lambda_t, alpha, mode)

A failed judgment gives a *missing* reward (``breakdown.missing``, total NaN), never 0 or 0.5
(``rubricflow.methods.rucl.rewards``). Once per optimizer step the trainer (or its hook) calls
:meth:`RubricScorer.step`: the mean S_F of the calls since the last step (averaged over ranks by ``reduce_s_f`` in a
multi-rank run) goes to ``scheduler.update`` (which returns lambda for the next step), and the step's statistics
(S_F, S_A, judge failures, the transition event when it happened) are returned for logging.

Judge tokens where they count: with ``advanced_monitor`` set (``rucl.reward.advanced_monitor``), while the
curriculum holds ``lambda_t = 0`` in mode ``rucl`` the advanced rubrics are asked about only for a monitoring sample
of that many completions per call (:meth:`RubricScorer.monitor_ids`: the ids with the smallest SHA-256, a fixed
pseudo-random pick); the others are judged on the foundational tier alone. The rewards are the same (the advanced
tier has weight 0 before the switch and never enters), and S_A is still measured, on the sample. Should the
curriculum switch between a submission and the rewards (one-step-off pipelining), :meth:`RubricScorer.finish` asks
the judge for the advanced rubrics of the completions that were judged without them before computing rewards.

Scoring as completions finish: :meth:`RubricScorer.submit` sends a group's judge requests to a
``rubricflow.judge.stream.JudgeStream`` and returns the future of their judgments; :meth:`RubricScorer.finish`
turns the gathered judgments into breakdowns exactly as :meth:`RubricScorer.score` does.

Why the curriculum survives GRPO's centring: the rubric term enters each completion's reward with a weight that is
the same for the whole group, and S_F / S_A differ between the completions of a group (that is what the judge
measures), so the group-centred advantage keeps ``(1 - lambda) dS_F + lambda dS_A``; a term constant within a group
would be removed, which is why the scheduler only moves weights, never adds a per-group constant.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubricflow.evaluation.answers import outcome_score
from rubricflow.judge.factory import make_judge
from rubricflow.judge.protocol import JudgeRequest, Judgment, Rubric
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
from rubricflow.methods.rucl.rewards import RewardBreakdown, batch_summary, compute_reward, tier_map
from rubricflow.methods.rucl.rubrics.pool import load_tiers


@dataclass
class Item:
    """One completion to score, with what the judge and the outcome check need about its problem."""

    sample_id: str
    question: str
    response: str
    answer: str
    answer_type: str = "text"
    facts: dict[str, Any] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)


def as_facts(value: Any, where: str = "facts") -> dict:
    """A facts column as a dict: a dict, a JSON object string, or None/empty (no facts: only an LLM judge can
    score it; the programmatic judge fails such a sample, which makes its reward missing)."""
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            out = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{where}: not a JSON object ({e}): {value[:80]!r}") from None
        if isinstance(out, dict):
            return out
    raise ValueError(f"{where}: expected a dict or a JSON object string, got {type(value).__name__}")


class RubricScorer:
    def __init__(self, judge, rubrics: Sequence[Rubric], scheduler: CurriculumScheduler | None = None,
                 alpha: float = 0.7, mode: str = "rucl", advanced_monitor: int | None = None, gate: str = "none"):
        """``advanced_monitor``: the size of the advanced tier's monitoring sample while ``lambda_t = 0`` (None: every
        completion is judged on every rubric); see the module docstring."""
        if mode != "outcome" and judge is None:
            raise ValueError(f"reward mode {mode!r} needs a judge (only 'outcome' scores without one)")
        if mode != "outcome" and not rubrics:
            raise ValueError(f"reward mode {mode!r} needs tiered rubrics (a stratify output), got none")
        self.judge = judge
        self.rubrics = list(rubrics)
        self.tiers = tier_map(self.rubrics) if self.rubrics else {}
        self.scheduler = scheduler
        self.alpha, self.mode, self.gate = alpha, mode, gate
        self._pending: list[RewardBreakdown] = []
        self.total_failures = 0
        self.last_judgments: list = []  # the judgments of the last call (None per item in mode "outcome")
        if advanced_monitor is not None and advanced_monitor < 0:
            raise ValueError(f"advanced_monitor: expected a sample size >= 0 or None, got {advanced_monitor}")
        self.advanced_monitor = advanced_monitor
        self.advanced_ids = [r.id for r in self.rubrics if self.tiers.get(r.id) == "advanced"]
        self._basic_rubrics = [r for r in self.rubrics if self.tiers.get(r.id) != "advanced"]
        self.advanced_judged = 0  # completions judged on the advanced tier since the last step()

    @classmethod
    def from_config(cls, rucl, judge_cfg, secret_resolver=None, image_root: str | Path | None = None) -> "RubricScorer":
        """From the ``rucl`` and ``judge`` sections: the tiers file, alpha and mode, the curriculum, the judge
        (``make_judge``: preflight, cache, failure budget)."""
        judge = None if rucl.reward.mode == "outcome" else make_judge(judge_cfg, secret_resolver, image_root=image_root)
        rubrics = load_tiers(rucl.tiers_path) if rucl.reward.mode != "outcome" else []
        return cls(judge, rubrics, CurriculumScheduler.from_config(rucl.curriculum), rucl.reward.alpha,
                   rucl.reward.mode, rucl.reward.advanced_monitor, rucl.reward.gate)

    @property
    def lambda_t(self) -> float:
        return float(self.scheduler.lambda_t) if self.scheduler is not None else 0.0

    def monitoring(self) -> bool:
        """True while only a monitoring sample is judged on the advanced tier (mode ``rucl``, a sample size set,
        ``lambda_t = 0``, advanced rubrics in the tiers)."""
        return (self.mode == "rucl" and self.advanced_monitor is not None and self.lambda_t == 0.0
                and bool(self.advanced_ids))

    def monitor_ids(self, sample_ids: Sequence[str]) -> set[str] | None:
        """The completions of one step (or call) judged on the advanced tier: while :meth:`monitoring`, the
        ``advanced_monitor`` ids with the smallest SHA-256 (a fixed pseudo-random pick, independent of the order
        and grouping in which they are judged); else None (all of them)."""
        if not self.monitoring():
            return None
        ranked = sorted(sample_ids, key=lambda i: hashlib.sha256(str(i).encode()).hexdigest())
        return set(ranked[: self.advanced_monitor])

    def _requests(self, items: Sequence[Item], monitored: Collection[str] | None = None) -> list[JudgeRequest]:
        """One request per item: every rubric, or (``monitored`` given) the advanced ones only for the ids in it."""
        out = []
        for it in items:
            rubrics = self.rubrics if monitored is None or it.sample_id in monitored else self._basic_rubrics
            out.append(JudgeRequest(it.sample_id, it.question, it.response, rubrics, list(it.images), it.facts,
                                    it.answer))
        return out

    def submit(self, items: Sequence[Item], stream, monitored: Collection[str] | None = None
               ) -> "concurrent.futures.Future[list]":
        """Send ``items`` (e.g. one finished group) to the judge through ``stream`` (a
        ``rubricflow.judge.stream.JudgeStream``); the future holds their judgments (None per item in mode
        ``outcome``, where nothing is sent). ``monitored``: :meth:`monitor_ids` of the whole step."""
        if self.mode == "outcome" or not items:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result([None] * len(items))
            return done
        return stream.submit(self._requests(items, monitored))

    def _top_up(self, items: Sequence[Item], judgments: list) -> list:
        """Judgments of completions judged without the advanced rubrics, completed with them when the reward now
        weighs the advanced tier (the curriculum switched after they were sent)."""
        if self.mode != "rucl" or not self.advanced_ids or self.lambda_t == 0.0:
            return judgments
        todo = [k for k, j in enumerate(judgments)
                if j is not None and not j.failed
                and not any(rid in j.verdicts or rid in j.missing for rid in self.advanced_ids)]
        if not todo:
            return judgments
        adv = [r for r in self.rubrics if r.id in set(self.advanced_ids)]
        reqs = [JudgeRequest(items[k].sample_id, items[k].question, items[k].response, adv, list(items[k].images),
                             items[k].facts, items[k].answer) for k in todo]
        extra = self.judge.judge(reqs)
        out = list(judgments)
        for k, e in zip(todo, extra):
            out[k] = merge_judgments(judgments[k], e)
        return out

    def finish(self, items: Sequence[Item], judgments: Sequence) -> list[RewardBreakdown]:
        """The breakdowns of ``items`` from judgments gathered elsewhere (:meth:`submit`'s futures), exactly as
        :meth:`score` computes them (after the advanced top-up, when one is needed)."""
        judgments = list(judgments)
        if len(judgments) != len(items):
            raise RuntimeError(f"judge returned {len(judgments)} judgments for {len(items)} requests")
        return self._breakdowns(items, self._top_up(items, judgments))

    def _breakdowns(self, items: Sequence[Item], judgments) -> list[RewardBreakdown]:
        lam = self.lambda_t
        out = [compute_reward(outcome_score(it.response, it.answer, it.answer_type), j, self.tiers, lam,
                              self.alpha, self.mode, self.gate) for it, j in zip(items, judgments)]
        self._pending.extend(out)
        self.last_judgments = list(judgments)
        # judged on the advanced tier: a verdict on, or a left-out, advanced rubric (counted here, per scored batch)
        self.advanced_judged += sum(1 for j in judgments if j is not None and any(
            rid in j.verdicts or rid in j.missing for rid in self.advanced_ids))
        self.total_failures += sum(1 for j in judgments if j is not None and j.counts_as_failed)
        return out

    def score(self, items: Sequence[Item]) -> list[RewardBreakdown]:
        """Judge ``items`` in one call and return each one's reward breakdown (``missing`` when its judgment
        failed)."""
        judgments: list = [None] * len(items)
        if self.mode != "outcome" and items:
            monitored = self.monitor_ids([it.sample_id for it in items])
            judgments = self.judge.judge(self._requests(items, monitored))
            if len(judgments) != len(items):
                raise RuntimeError(f"judge returned {len(judgments)} judgments for {len(items)} requests")
        return self._breakdowns(items, self._top_up(items, judgments))

    async def ascore(self, items: Sequence[Item]) -> list[RewardBreakdown]:
        """:meth:`score` for an event loop (the judge's ``ajudge`` when it has one)."""
        judgments: list = [None] * len(items)
        if self.mode != "outcome" and items:
            reqs = self._requests(items, self.monitor_ids([it.sample_id for it in items]))
            judgments = await self.judge.ajudge(reqs) if hasattr(self.judge, "ajudge") else self.judge.judge(reqs)
        return self._breakdowns(items, judgments)

    @staticmethod
    def batch_stats(breakdowns: Sequence[RewardBreakdown]) -> dict[str, float]:
        """Means over the breakdowns (``rubricflow.methods.rucl.rewards.batch_summary``)."""
        return batch_summary(breakdowns)

    def step(self, reduce_s_f: Callable[[float], float] | None = None) -> dict[str, Any]:
        """End of an optimizer step: feed the mean S_F of the scored completions since the last step to the
        scheduler and return the step's statistics (``lambda_t`` used, ``lambda_next``, S_F, S_A, judge failures,
        ``s_f_batch``: the S_F the scheduler saw, after ``reduce_s_f`` (the mean over ranks in a multi-rank run),
        ``transition``: the scheduler's event at the step it switched, else None)."""
        stats = self.batch_stats(self._pending)
        stats["judge_failures"] = stats["n_missing"] if self.mode != "outcome" else 0.0
        stats["n_scored"] = float(len(self._pending))
        stats["lambda_t"] = self.lambda_t
        stats["advanced_judged"] = float(self.advanced_judged)
        self._pending = []
        self.advanced_judged = 0
        transition = None
        stats["s_f_batch"] = reduce_s_f(stats["s_f"]) if reduce_s_f is not None else stats["s_f"]
        if self.scheduler is not None:
            before = self.scheduler.transitioned
            stats["lambda_next"] = self.scheduler.update(stats["s_f_batch"])
            if self.scheduler.transitioned and not before:
                transition = dict(self.scheduler.event or {})
        stats["transition"] = transition
        return stats


def merge_judgments(first, extra):
    """One judgment from two calls about disjoint rubrics of the same completion: failed when either failed (its
    rubrics would be missing), else the union of verdicts and of left-out rubrics, ``repaired`` if either was."""
    if first.failed:
        return first
    if extra.failed:
        return Judgment("failed", reason=f"advanced rubrics: {extra.reason}", raw=extra.raw)
    status = "repaired" if "repaired" in (first.status, extra.status) else "ok"
    reason = "; ".join(r for r in (first.reason, extra.reason) if r) or None
    return Judgment(status, {**first.verdicts, **extra.verdicts}, reason=reason, raw=first.raw,
                    missing=tuple(first.missing) + tuple(extra.missing))
