"""The programmatic judge: checks rubrics exactly against the ground-truth ``facts`` of the synthetic tasks.

Each rubric names a ``check``; ``CHECKS[check](ctx) -> (applicable, satisfied, rationale)``. Whether a rubric
counts for a response is decided one of two ways (``judge.applicability``):

* ``problem`` (default): a rubric applies when the *question* calls for it, i.e. when its checker applies to the
  problem's reference reasoning (the gold trace rendered from the facts): intermediate-value rubrics never apply to
  counting, "the answer follows from the last computed value" applies to every task whose solution computes a
  value. A response that omits the reasoning an applicable rubric checks *fails* it ("required reasoning
  missing"), so a bare ``\\boxed{}`` answer cannot collect the outcome reward with the rubric term switched off.
* ``response``: the checker alone decides, from the facts *and the response* (a response that computes nothing
  makes "the answer follows from the last computed value" not applicable). This was the first reading; it pays
  for skipping the reasoning and is kept as a named option for the ablation.

The checks themselves live in ``rubricflow.judge.checks``; the response is only ever parsed. This is the default
judge of the CPU profile: rewards are exact.
"""

from __future__ import annotations

from typing import Literal

from rubricflow.data.traces import render_trace
from rubricflow.judge.checks import CHECKS, CHECKS_VERSION, Ctx, make_ctx
from rubricflow.judge.protocol import JudgeRequest, Judgment, Rubric, Verdict
from rubricflow.judge.usage import TokenUsage, estimate_request

Applicability = Literal["problem", "response"]


def check_rubric(rubric: Rubric, ctx: Ctx, reference: Ctx | None = None) -> Verdict:
    """The verdict on ``ctx``; with ``reference`` (the gold trace's context), applicability is the problem's."""
    check = CHECKS[rubric.check]  # type: ignore[index]
    if reference is not None:
        applies, _, why_not = check(reference)
        if not applies:
            return Verdict(False, None, f"not called for by the question: {why_not}")
        applicable, satisfied, why = check(ctx)
        if not applicable:
            return Verdict(True, False, f"required reasoning missing: {why}")
        return Verdict(True, satisfied, why)
    applicable, satisfied, why = check(ctx)
    return Verdict(applicable, satisfied if applicable else None, why)


def reference_ctx(facts: dict, answer: str | None) -> Ctx:
    """The context of the problem's reference reasoning (the gold trace), from the question's facts alone."""
    return make_ctx(facts, answer, render_trace(facts, answer or ""))


def require_checks(rubrics: list[Rubric]) -> None:
    """Raise ValueError naming every rubric the programmatic judge cannot check."""
    bad = [f"{r.id} (check={r.check!r})" for r in rubrics if r.check not in CHECKS]
    if bad:
        raise ValueError(
            f"programmatic judge: no checker for rubric(s) {', '.join(bad)}; known checks: {sorted(CHECKS)}. "
            "Use an LLM judge (judge.backend=openai|local) for rubrics without a `check`."
        )


class ProgrammaticJudge:
    """Exact rubric checks against ``JudgeRequest.facts`` (synthetic tasks)."""

    name = "programmatic"
    model_id = "programmatic"

    def __init__(self, applicability: Applicability = "problem"):
        if applicability not in ("problem", "response"):
            raise ValueError(f"judge.applicability: expected 'problem' or 'response', got {applicability!r}")
        self.applicability = applicability
        # the cache key names the reading, so verdicts of one are never served for the other
        self.prompt_version = f"{CHECKS_VERSION}+{applicability}"
        # no model runs: an estimate of what an LLM judge would spend on the same requests (rubricflow.judge.usage)
        self.usage = TokenUsage(estimated=True)

    def preflight(self) -> None:
        """Nothing to check: exact checks in-process, no server, no model."""

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        for req in requests:
            require_checks(req.rubrics)
        out = []
        for req in requests:
            if not req.facts:
                out.append(Judgment("failed", {}, reason=f"sample {req.sample_id}: no ground-truth facts to check"))
                continue
            ctx = make_ctx(req.facts, req.answer, req.response)
            ref = reference_ctx(req.facts, req.answer) if self.applicability == "problem" else None
            out.append(Judgment("ok", {r.id: check_rubric(r, ctx, ref) for r in req.rubrics}))
            self.usage.add(*estimate_request(req, out[-1].verdicts))
        return out

    async def ajudge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        return self.judge(requests)
