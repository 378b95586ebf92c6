"""The verifier's lookup tool (``deltarubric.sft.evidence_form: quoted``).

A tiny verifier does not learn to find a checked key inside its own reading or inside one of two responses that state
the same keys and copy the value that follows it (docs/deltarubric_planning.md, "A warm start on the wide pairs: what
stops it"). Under the ``quoted`` reading a lookup tool does that copy, as a real verifier's tool call would: for each
check of the checklist it finds the claim key the check names and quotes the value three sources give it, the
policy's own reading of the image (its answer to the ``READ`` prompt, made in a call of its own before the verifier)
and each response's claim. The verifier still decides: it marks each claim ``yes`` / ``no`` against the image's value
beside it, names the response the check favours and gives the verdict; the planner still chooses what is looked up.

The tool reads text only (the reading and the two responses), never the pair's facts: ``key_of`` matches a check to a
claim key by the check templates (``targets.check_text``) of the keys the three texts state, as the templates write
them for any task, so a check in other words finds nothing (its quote is all ``?``).

The generative no-rubric judge gets the same tool (issue 39, item 3b: the control differs from DeltaRubric in the
planner role only, not in the tool): in its own output it names 2 to 4 claim keys to look up (the planner's budget)
(``look up: C, F, answer``, the tool call, ``lookup_call`` / ``parse_lookup``), the tool appends its quote of each
(``tool_result``: the same quotes as the verifier's, by key rather than by check text), and the judge goes on with its
marks, the favours and the verdict. No planner prompt, no planner reward: the keys are its own, chosen in the same
output as the verdict and rewarded by it.
"""

from __future__ import annotations

import re

from rubricflow.judge.protocol import Parsed
from rubricflow.methods.deltarubric.parsing import MAX_CHECKS, MIN_CHECKS
from rubricflow.methods.deltarubric.targets import TEMPLATE_TASKS, check_text, claim_values, norm_check

LOOKUP = "look up:"
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,15}$")


def key_of(check: str, keys: list[str]) -> str | None:
    """The claim key among ``keys`` whose check template (for some task) is ``check``; None when none is."""
    want = norm_check(check)
    for k in keys:
        for task in TEMPLATE_TASKS:
            try:
                if norm_check(check_text(task, k)) == want:
                    return k
            except ValueError:
                continue
    return None


def quote(key: str | None, image: dict[str, str], a: dict[str, str], b: dict[str, str]) -> str:
    """``image <key> = <v>, A <key> = <a>, B <key> = <b>`` (``?`` for a value the text does not state)."""
    if key is None:
        return "image ? = ?, A ? = ?, B ? = ?"
    return f"image {key} = {image.get(key, '?')}, A {key} = {a.get(key, '?')}, B {key} = {b.get(key, '?')}"


def _quotes(pick, reading: str, response_a: str, response_b: str) -> list[str]:
    """One quote per key that ``pick`` returns from the claim keys the three texts state (in their order)."""
    image, a, b = claim_values(reading), claim_values(response_a), claim_values(response_b)
    return [quote(k, image, a, b) for k in pick(list(dict.fromkeys([*image, *a, *b])))]


def lookup_quotes(checks: list[str], reading: str, response_a: str, response_b: str) -> list[str]:
    """One quote per check: the checked key's value in the policy's ``reading`` and in each response."""
    return _quotes(lambda stated: [key_of(c, stated) for c in checks], reading, response_a, response_b)


def lookup_call(keys: list[str]) -> str:
    """The generative judge's tool call: ``look up: <key>, <key>, ...``."""
    return f"{LOOKUP} {', '.join(keys)}"


def parse_lookup(text: str) -> Parsed:
    """The keys of a tool call (``MIN_CHECKS`` to ``MAX_CHECKS`` distinct claim-key names on one ``look up:`` line,
    nothing else: the planner's budget), or a failure naming what broke the contract."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    if len(lines) != 1 or not lines[0].lower().startswith(LOOKUP):
        return Parsed("failed", reason=f"expected one line '{LOOKUP} <key>, <key>, ...'", raw=text)
    keys = [k.strip() for k in lines[0][len(LOOKUP):].split(",")]
    bad = [k for k in keys if not _KEY.match(k)]
    if bad:
        return Parsed("failed", reason=f"look up: {bad[0]!r} is not a claim key name", raw=text)
    if len(set(keys)) != len(keys):
        return Parsed("failed", reason="look up: a key named twice", raw=text)
    if not MIN_CHECKS <= len(keys) <= MAX_CHECKS:
        return Parsed("failed", reason=f"look up: {len(keys)} key(s); expected {MIN_CHECKS}-{MAX_CHECKS}", raw=text)
    return Parsed("ok", keys, raw=text)


def tool_result(keys: list[str], reading: str, response_a: str, response_b: str) -> str:
    """The tool's answer to a call: one numbered quote per key (``<i>. image <key> = <v>, A <key> = <a>, B <key> =
    <b>``; ``?`` where a text states no value), the verifier's quotes by key rather than by check."""
    quotes = _quotes(lambda _stated: keys, reading, response_a, response_b)
    return "\n".join(f"{i}. {q}" for i, q in enumerate(quotes, 1))
