"""An independent process metric: a strict full-trace verifier against every ground-truth fact.

RuCL's reward is computed by a judge over the kept rubric tiers. Measuring "correct final answer, flawed reasoning"
with that same judge would be circular (the policy is trained to satisfy exactly those verdicts). This verifier
shares no code with the judges (``rubricflow.judge``) beyond the trace parser, uses no rubric and no tier, and is
stricter than any kept rubric: a trace is flawless only if it states **every** perception and intermediate fact
of the problem with its true value, never states a different value for a quantity, states no quantity the
problem does not have, and ends in exactly one boxed answer. The RuCL evaluation (``rubricflow.methods.rucl.evaluate``)
reports ``correct_but_flawed`` from it; the judge-based rate is ``correct_but_flawed_rubric``.
"""

from __future__ import annotations

from typing import Any

from rubricflow.data.traces import BOXED_RE, parse_claims, values_equal


def trace_flaws(facts: dict[str, Any], response: str) -> list[str]:
    """Every way ``response`` departs from the facts (empty: a flawless trace)."""
    truth: dict[str, Any] = {k: v for k, v in facts.get("perception", [])}
    truth.update({k: v for k, v in facts.get("intermediate", [])})
    claims = parse_claims(response or "")
    flaws = []
    for key, value in truth.items():
        stated = [v for k, v in claims if k == key]
        if not stated:
            flaws.append(f"{key} not stated")
        elif not all(values_equal(v, value) for v in stated):
            flaws.append(f"{key} stated as {', '.join(stated)}, true {value}")
    unknown = sorted({k for k, _ in claims if k not in truth})
    if unknown:
        flaws.append(f"unknown quantities {unknown}")
    n_boxed = len(BOXED_RE.findall(response or ""))
    if n_boxed != 1:
        flaws.append(f"{n_boxed} boxed answers")
    return flaws
