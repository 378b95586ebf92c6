"""Reasoning traces: the short, checkable response format of the synthetic tasks.

A response is a list of ``key = value`` claims followed by ``\\boxed{answer}``::

    counting  red = 2, green = 1, blue = 3. so red = 2. \\boxed{2}
    barchart  A = 3, B = 5, C = 1. max = 5, min = 1. diff = 4. \\boxed{4}
              A = 3, B = 5, C = 1. s = 3 + 5 = 8, total = 8 + 1 = 9. \\boxed{9}
    geometry  P = (1, 2), Q = (4, 0). dx = 3, dy = 2. area = 3. \\boxed{3}
    arith     a = 4, b = 3, c = 2. s = 3 * 2 = 6, t = 4 + 6 = 10. \\boxed{10}

A claim may show its working as a chain ``key = expression = ... = value``: the claim is the value after the last
``=`` (:func:`collapse_chains`), so ``s = 3 * 2 = 6`` states ``s = 6`` and ``s = 3 * 2 = 5`` states ``s = 5``.

The first sentence states what was read from the image (perception), the next ones the intermediate values, and
the box the answer. ``facts`` of a synthetic sample hold the ground truth for each claim
(``{"perception": [[key, value], ...], "intermediate": [[key, value], ...], "target": key}``; lists keep order),
so a rubric about the *reasoning* ("the counts stated match the image", "the intermediate value is right",
"the boxed answer follows from the last computed value") is checked exactly, not just the final answer.
"""

from __future__ import annotations

import re
from typing import Any

_NUM = r"-?\d+(?:\.\d+)?"
_VALUE = rf"\(\s*{_NUM}\s*,\s*{_NUM}\s*\)|{_NUM}|\b[A-Z]\b"
CLAIM_RE = re.compile(rf"(?P<key>\b[A-Za-z][A-Za-z_]*)\s*=\s*(?P<val>{_VALUE})")
BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")
# "= <expression with an operator> =" inside a chain; no comma, full stop, semicolon or newline, so it never spans
# two claims
_CHAIN_LINK = re.compile(r"=[^=,.;\n]*?[+\-*/\u00d7][^=,.;\n]*?=")


def collapse_chains(text: str) -> str:
    """``key = e1 = e2 = v`` -> ``key = v`` for links ``e`` that hold an arithmetic operator (a claim's working)."""
    prev = None
    while prev != text:
        prev, text = text, _CHAIN_LINK.sub("=", text)
    return text


def fmt(value: Any) -> str:
    """Canonical text of a fact value: 3, 4.5, (1, 2), B."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(fmt(v) for v in value) + ")"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:g}"
    return str(value)


def render_trace(facts: dict, answer: str) -> str:
    """The gold trace for a synthetic sample (used for SFT and as the reference for judges)."""
    perception = ", ".join(f"{k} = {fmt(v)}" for k, v in facts.get("perception", []))
    parts = [perception + "."] if perception else []
    inter = facts.get("intermediate", [])
    if facts.get("steps"):
        # each computed value with its working: s = 3 * 2 = 6 (a small real model computes better when it writes
        # the operands out; the claim is the value after the last "=")
        values = {k: v for k, v in facts.get("perception", [])} | {k: v for k, v in inter}
        parts.append(", ".join(f"{k} = {fmt(values[x])} {op} {fmt(values[y])} = {fmt(values[k])}"
                               for k, op, x, y in facts["steps"]) + ".")
    elif facts.get("task") == "counting":
        t = facts["target"]
        parts.append(f"so {t} = {fmt(dict(facts['perception'])[t])}.")
    elif inter:
        # group intermediate claims two per sentence, as in the examples above
        for i in range(0, len(inter), 2):
            parts.append(", ".join(f"{k} = {fmt(v)}" for k, v in inter[i : i + 2]) + ".")
    parts.append(f"\\boxed{{{answer}}}")
    return " ".join(parts)


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (stripped), or None."""
    found = BOXED_RE.findall(text or "")
    return found[-1].strip() if found else None


def parse_claims(text: str) -> list[tuple[str, str]]:
    """All ``key = value`` claims before the final box, in order."""
    body = text or ""
    cut = body.rfind("\\boxed{")
    if cut >= 0:
        body = body[:cut]
    return claims_in(body)


def claims_in(text: str) -> list[tuple[str, str]]:
    """Every ``key = value`` claim of ``text`` in order (a worked claim ``key = e = v`` counts as ``key = v``), with
    no cut at a box: the judge applies it to the sentences before the answer."""
    return [(m.group("key"), re.sub(r"\s+", " ", m.group("val")).strip())
            for m in CLAIM_RE.finditer(collapse_chains(text))]


def parse_value(text: str) -> Any:
    """Claim text -> python value (int/float/tuple/str)."""
    t = text.strip()
    if t.startswith("("):
        return tuple(parse_value(x) for x in t.strip("()").split(","))
    try:
        f = float(t)
    except ValueError:
        return t
    return int(f) if f.is_integer() else f


def values_equal(a: Any, b: Any, tol: float = 1e-6) -> bool:
    if isinstance(a, str):
        a = parse_value(a)
    if isinstance(b, str):
        b = parse_value(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) <= tol
    return str(a).strip().lower() == str(b).strip().lower()
