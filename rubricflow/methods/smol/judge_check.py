"""The served model as a judge, measured against the programmatic judge on the same requests.

Requests: for each of the first ``n_problems`` calib problems, one response per *kind* (all written from the
problem's facts, so every verdict has a known right value):

* ``gold``          the reference trace (``a = 2, b = 3, c = 4. s = 5, t = 20. \\boxed{20}``);
* ``wrong_step``    the reference trace with the first computed value off by one and the right answer (a flaw that
                    an outcome check misses);
* ``bare``          only ``\\boxed{answer}`` (skipped reasoning);
* ``wrong_answer``  the reference trace with a boxed answer one too high.

The responses, the agreement table and Cohen's kappa are the kernel's judge-agreement evaluation
(``rubricflow.judge.agreement``, also ``rubricflow judge-agreement``); this check is that evaluation with the
programmatic judge's verdicts as the reference labels. Both judges see the same rubrics
(``smol.judge_check.rubrics`` of the text pool). Reported per verdict format: the status mix (ok / repaired / failed),
wall time, and per rubric the agreement with the programmatic verdicts over the requests both judged: ``agree`` (same
applicability and, when applicable, same satisfaction), beside the ``majority`` line (how often the programmatic judge's
most frequent verdict for that rubric occurs: a judge that always answers that would reach it) and Cohen's ``kappa``
over the three verdicts pass / fail / n/a (0: no better than chance agreement given both judges' verdict frequencies,
e.g. a judge that always says "pass"; None when both judges give one and the same verdict throughout).
"""

from __future__ import annotations

from typing import Any

from rubricflow.judge.agreement import evaluate_agreement
from rubricflow.judge.errors import JudgeFailureBudgetExceeded
from rubricflow.judge.protocol import JudgeRequest, Judgment


def judge_and_compare(judge, reference: list[Judgment], requests: list[JudgeRequest]) -> dict[str, Any]:
    """Run ``judge`` on ``requests`` and compare with ``reference`` (``evaluate_agreement``), plus the seconds per
    judgment and ``agreement_overall`` (the pooled agreement)."""
    report = evaluate_agreement(judge, requests, reference)
    return {**report, "s_per_judgment": round(report["wall_s"] / max(1, len(requests)), 2),
            "agreement_overall": report["overall"]["agree"]}


def require_within_budget(result: dict[str, Any], max_failed_frac: float, where: str) -> None:
    """Raise ``JudgeFailureBudgetExceeded`` when more than ``max_failed_frac`` of a ``judge_and_compare`` result's
    judgments failed or left out a requested rubric (``incomplete``): ``smol-judge`` must not write its outputs (or
    exit 0) from a judge that mostly failed."""
    n = result["n_requests"]
    incomplete = result.get("incomplete", 0)
    failed = result["statuses"].get("failed", 0) + incomplete
    if n and failed / n > max_failed_frac:
        top = ([f"{incomplete}x left out requested rubric(s)"] if incomplete else []) + result["top_failure_reasons"]
        reasons = "; ".join(top) or "no reason given"
        what = "failed or left out a requested rubric" if incomplete else "failed"
        raise JudgeFailureBudgetExceeded(
            f"{where}: {failed} of {n} judgments {what} ({failed / n:.0%}), above judge.max_failed_frac="
            f"{max_failed_frac:g}; top reasons: {reasons}; no outputs written"
        )
