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
"""

from __future__ import annotations

from rubricflow.methods.deltarubric.targets import TEMPLATE_TASKS, check_text, claim_values


def _norm(text: str) -> str:
    return " ".join(text.strip().rstrip(".").strip().lower().split())


def key_of(check: str, keys: list[str]) -> str | None:
    """The claim key among ``keys`` whose check template (for some task) is ``check``; None when none is."""
    want = _norm(check)
    for k in keys:
        for task in TEMPLATE_TASKS:
            try:
                if _norm(check_text(task, k)) == want:
                    return k
            except ValueError:
                continue
    return None


def quote(key: str | None, image: dict[str, str], a: dict[str, str], b: dict[str, str]) -> str:
    """``image <key> = <v>, A <key> = <a>, B <key> = <b>`` (``?`` for a value the text does not state)."""
    if key is None:
        return "image ? = ?, A ? = ?, B ? = ?"
    return f"image {key} = {image.get(key, '?')}, A {key} = {a.get(key, '?')}, B {key} = {b.get(key, '?')}"


def lookup_quotes(checks: list[str], reading: str, response_a: str, response_b: str) -> list[str]:
    """One quote per check: the checked key's value in the policy's ``reading`` and in each response."""
    image, a, b = claim_values(reading), claim_values(response_a), claim_values(response_b)
    keys = list(dict.fromkeys([*image, *a, *b]))
    return [quote(key_of(c, keys), image, a, b) for c in checks]
