"""The served model as a judge, measured against the programmatic judge on the same requests.

Requests: for each of the first ``n_problems`` calib problems, one response per *kind* (all written from the
problem's facts, so every verdict has a known right value):

* ``gold``          the reference trace (``a = 2, b = 3, c = 4. s = 5, t = 20. \\boxed{20}``);
* ``wrong_step``    the reference trace with the first computed value off by one and the right answer (a flaw that
                    an outcome check misses);
* ``bare``          only ``\\boxed{answer}`` (skipped reasoning);
* ``wrong_answer``  the reference trace with a boxed answer one too high.

Both judges see the same rubrics (``smol.judge_check.rubrics`` of the text pool). Reported per verdict format:
the status mix (ok / repaired / failed), wall time, and per rubric the agreement with the programmatic verdicts
over the requests both judged: ``agree`` (same applicability and, when applicable, same satisfaction), beside the
``majority`` line (how often the programmatic judge's most frequent verdict for that rubric occurs: a judge that
always answers that would reach it) and Cohen's ``kappa`` over the three verdicts pass / fail / n/a (0: no better
than chance agreement given both judges' verdict frequencies, e.g. a judge that always says "pass"; None when both
judges give one and the same verdict throughout).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

from rubricflow.data.traces import render_trace
from rubricflow.judge.errors import JudgeFailureBudgetExceeded
from rubricflow.judge.protocol import JudgeRequest, Judgment, Rubric, status_counts

KINDS = ("gold", "wrong_step", "bare", "wrong_answer")


def make_response(kind: str, facts: dict, answer: str) -> str:
    gold = render_trace(facts, answer)
    if kind == "gold":
        return gold
    if kind == "bare":
        return f"\\boxed{{{answer}}}"
    if kind == "wrong_answer":
        return re.sub(r"\\boxed\{[^{}]*\}", lambda m: f"\\boxed{{{int(answer) + 1}}}", gold)
    if kind == "wrong_step":
        key, value = facts["intermediate"][0]
        return gold.replace(f"{key} = {value}", f"{key} = {value + 1}", 1)
    raise ValueError(f"smol.judge_check.kinds: unknown kind {kind!r}; expected one of {KINDS}")


def check_requests(samples: list, kinds: list[str], rubrics: list[Rubric]) -> list[JudgeRequest]:
    return [
        JudgeRequest(f"{s.id}#{kind}", s.question, make_response(kind, s.facts, s.answer), list(rubrics),
                     facts=s.facts, answer=s.answer)
        for s in samples for kind in kinds
    ]


def _verdict_key(v) -> str:
    if v is None:
        return "missing"
    return "n/a" if not v.applicable else ("pass" if v.satisfied else "fail")


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of (reference, judge) verdict pairs; None when chance agreement is 1 (nothing to compare)."""
    n = len(pairs)
    if not n:
        return None
    po = sum(a == b for a, b in pairs) / n
    ra, rb = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    pe = sum(ra[k] * rb[k] for k in ra) / (n * n)
    return None if pe >= 1.0 else (po - pe) / (1.0 - pe)


def agreement(reference: list[Judgment], judged: list[Judgment], rubric_ids: list[str]) -> dict[str, dict]:
    """Per rubric: ``n`` (requests both judged), ``agree`` (fraction of equal verdicts), ``majority`` (the share of
    the reference's most frequent verdict over those requests), ``kappa`` and the confusion counts ``ref->judge``."""
    out: dict[str, dict] = {}
    for rid in rubric_ids:
        pairs = [(_verdict_key(r.verdicts.get(rid)), _verdict_key(j.verdicts.get(rid)))
                 for r, j in zip(reference, judged) if not r.failed and not j.failed
                 and j.verdicts.get(rid) is not None]
        n = len(pairs)
        same = sum(a == b for a, b in pairs)
        major = Counter(a for a, _ in pairs).most_common(1)
        out[rid] = {
            "n": n,
            "agree": same / n if n else None,
            "majority": major[0][1] / n if n else None,
            "kappa": cohen_kappa(pairs),
            "confusion": dict(Counter(f"{a}->{b}" for a, b in pairs)),
        }
    return out


def overall_agreement(table: dict[str, dict]) -> float | None:
    n = sum(r["n"] for r in table.values())
    return sum(r["agree"] * r["n"] for r in table.values() if r["n"]) / n if n else None


def judge_and_compare(judge, reference: list[Judgment], requests: list[JudgeRequest]) -> dict[str, Any]:
    """Run ``judge`` on ``requests``; return statuses, timing, failure reasons and the agreement table."""
    t0 = time.monotonic()
    judged = judge.judge(requests)
    wall = time.monotonic() - t0
    ids = [r.id for r in requests[0].rubrics] if requests else []
    table = agreement(reference, judged, ids)
    reasons = Counter((j.reason or "")[:120] for j in judged if j.failed).most_common(3)
    return {
        "n_requests": len(requests),
        "statuses": status_counts(judged),
        "wall_s": round(wall, 1),
        "s_per_judgment": round(wall / max(1, len(requests)), 2),
        "agreement": table,
        "agreement_overall": overall_agreement(table),
        "top_failure_reasons": [f"{c}x {r}" for r, c in reasons],
        "judgments": [{"sample_id": r.sample_id, **j.to_dict(), "raw": j.raw} for r, j in zip(requests, judged)],
    }


def require_within_budget(result: dict[str, Any], max_failed_frac: float, where: str) -> None:
    """Raise ``JudgeFailureBudgetExceeded`` when more than ``max_failed_frac`` of a ``judge_and_compare`` result's
    judgments failed: ``smol-judge`` must not write its outputs (or exit 0) from a judge that mostly failed."""
    n = result["n_requests"]
    failed = result["statuses"].get("failed", 0)
    if n and failed / n > max_failed_frac:
        reasons = "; ".join(result["top_failure_reasons"]) or "no reason given"
        raise JudgeFailureBudgetExceeded(
            f"{where}: {failed} of {n} judgments failed ({failed / n:.0%}), above judge.max_failed_frac="
            f"{max_failed_frac:g}; top reasons: {reasons}; no outputs written"
        )
