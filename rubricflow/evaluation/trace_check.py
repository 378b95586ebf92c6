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


# -- the answer-relevant readout --------------------------------------------------------------------------------
# The full-trace verifier above also counts misreads of quantities the answer does not use (a counting trace that
# misreads a colour nobody asked about). The readout below is restricted to the values the answer *depends on*, so
# a flaw it finds is a flaw in the reasoning that produced this answer:
#   counting  the asked colour's count (read, and repeated in "so <colour> = n");
#   tallest   the tallest bar's height and ``max``;
#   diff      the tallest and the shortest bar's heights, ``max``, ``min`` and ``diff``;
#   other     every perception and intermediate fact (geometry, arith: each one feeds the answer).
# A value the answer depends on that the trace never states is a flaw: a bare answer shows no reasoning, so no
# shortcut (bare answer, empty trace, a template of zeros) passes it. It shares the trace parser with the judge and
# checks the same ground-truth facts as some reward rubrics (C01/C05/C06 read values, C14 intermediate values): a
# policy trained on those rubrics is rewarded for a superset of what it checks, so it is independent of the reward's
# judge and tiers but not of the facts they check.


def answer_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """The ground-truth values the answer depends on, ``{key: value}`` (see the table above)."""
    perception = {k: v for k, v in facts.get("perception", [])}
    intermediate = {k: v for k, v in facts.get("intermediate", [])}
    task, qtype = facts.get("task"), facts.get("question_type")
    if task == "counting" and facts.get("target") in perception:
        t = facts["target"]
        return {t: perception[t]}
    if task == "barchart" and perception:
        hi = max(perception, key=lambda k: perception[k])
        lo = min(perception, key=lambda k: perception[k])
        if qtype == "tallest":
            return {hi: perception[hi], **{k: v for k, v in intermediate.items() if k == "max"}}
        if qtype == "diff":
            return {hi: perception[hi], lo: perception[lo], **intermediate}
    return {**perception, **intermediate}


def answer_relevant_flaws(facts: dict[str, Any], response: str) -> list[str]:
    """Every way ``response`` gets a value the answer depends on wrong, or leaves it out (empty: the answer's own
    reasoning is sound)."""
    claims = parse_claims(response or "")
    flaws = []
    for key, value in answer_facts(facts).items():
        stated = [v for k, v in claims if k == key]
        if not stated:
            flaws.append(f"{key} not stated")
        elif not all(values_equal(v, value) for v in stated):
            flaws.append(f"{key} stated as {', '.join(stated)}, true {value}")
    return flaws
