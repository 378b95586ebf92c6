"""The failure budget: a judge whose judgments mostly fail stops the stage instead of feeding it missing values.

A judgment that leaves out a requested rubric (``Judgment.missing``) counts like a failed one: its rubrics are
missing too, and a judge that answers one rubric and leaves out the rest must stop the stage, not feed it judgments
with nothing in them.

Below the budget a failed judgment stays *missing* (its rubrics are never scored 0 or 0.5). Above it
(``judge.max_failed_frac``), ``JudgeFailureBudgetExceeded`` is raised with the counts and the most frequent
reasons. ``BudgetedJudge`` checks after every call over the last ``judge.failure_window`` judgments (a call
larger than the window counts whole), so a stage that judges one large batch (stratify, evaluation) is checked on
that batch and a training loop that judges a few requests per step on a rolling window. The check starts once
``min(failure_window, MIN_JUDGMENTS)`` judgments were seen, so one unlucky failure in a tiny first batch does not
abort a run.
"""

from __future__ import annotations

import re
from collections import Counter, deque

from rubricflow.judge.errors import JudgeFailureBudgetExceeded
from rubricflow.judge.protocol import JudgeBackend, JudgeRequest, Judgment

MIN_JUDGMENTS = 8  # judgments seen before the rolling window is checked (see the module docstring)


def _kind(j: Judgment) -> str:
    if j.failed:
        return _reason_kind(j.reason)
    shown = ", ".join(j.missing[:4]) + (", ..." if len(j.missing) > 4 else "")
    return f"left out {len(j.missing)} requested rubric(s) (no verdict on {shown})"


def _reason_kind(reason: str | None) -> str:
    """A reason without its per-sample parts (attempt counts, numbers), so equal causes group together."""
    r = (reason or "no reason given").split(" (after ")[0]
    return re.sub(r"\s+", " ", r).strip()[:160]


def failure_summary(judgments: list[Judgment], top: int = 3) -> str:
    """``"30 of 32 judgments failed (94%); top reasons: 30x http 500: ..."`` (``failed or left out a requested
    rubric`` when some judgments are incomplete)."""
    failed = [j for j in judgments if j.counts_as_failed]
    n = len(judgments)
    reasons = Counter(_kind(j) for j in failed).most_common(top)
    frac = len(failed) / n if n else 0.0
    what = "failed or left out a requested rubric" if any(not j.failed for j in failed) else "failed"
    text = f"{len(failed)} of {n} judgments {what} ({frac:.0%})"
    if reasons:
        text += "; top reasons: " + "; ".join(f"{c}x {r}" for r, c in reasons)
    return text


def check_failure_budget(judgments: list[Judgment], max_failed_frac: float, where: str = "judge") -> None:
    """Raise ``JudgeFailureBudgetExceeded`` when more than ``max_failed_frac`` of ``judgments`` failed."""
    n = len(judgments)
    if not n:
        return
    n_failed = sum(j.counts_as_failed for j in judgments)
    if n_failed / n > max_failed_frac:
        raise JudgeFailureBudgetExceeded(
            f"{where}: {failure_summary(judgments)}, above judge.max_failed_frac={max_failed_frac:g}; "
            "stopping instead of going on with missing judgments (fix the judge, or raise the budget)"
        )


class BudgetedJudge:
    """Any judge + the failure budget: same interface; raises when the budget is exceeded."""

    def __init__(self, inner: JudgeBackend, max_failed_frac: float, window: int = 64, where: str = "judge"):
        self.inner = inner
        self.name = inner.name
        self.model_id = inner.model_id
        self.prompt_version = inner.prompt_version
        self.max_failed_frac = max_failed_frac
        self.window_size = window
        self.where = where
        self.recent: deque[Judgment] = deque(maxlen=window)

    def _check(self, out: list[Judgment]) -> list[Judgment]:
        self.recent.extend(out)
        seen = out if len(out) >= self.window_size else list(self.recent)
        if len(seen) >= min(self.window_size, MIN_JUDGMENTS):
            label = f"{self.where} {self.name}:{self.model_id}"
            check_failure_budget(seen, self.max_failed_frac, label)
        return out

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        return self._check(self.inner.judge(requests))

    async def ajudge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        if hasattr(self.inner, "ajudge"):
            return self._check(await self.inner.ajudge(requests))
        return self._check(self.inner.judge(requests))

    def __getattr__(self, name):  # preflight(), generate(), stats, backend, cache of the wrapped judge
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
