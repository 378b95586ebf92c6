"""Output parsers of the roles: the planner's checklist (strict) and verdicts (tolerant).

``parse_checklist(text) -> list[str]`` enforces the planner's contract and raises ``ValueError`` with the
reason otherwise (a violation earns the planner format reward 0):

* checks are numbered (``1.`` / ``1)``) or bulleted (``-`` / ``*`` / ``•``), one per line or inline
  (``1. x 2. y``); a wrapped line continues the previous check;
* no preamble (text before the first check, except an optional ``Checks:`` label);
* 2 to 4 checks, none empty, no duplicates;
* no check names a response (``Response A``, ``answer B``, ``the first response``, ``[[A]]`` ...) or a winner
  (``better``, ``winner``, ``prefer`` ...). A bare ``A``/``B`` is allowed: it is a bar label in the bar charts.

``parse_verdict(text) -> VerdictParse`` is tolerant: the *last* verdict marker wins (``verdict: A``,
``Final verdict - [[B]]``, ``[[A]]``, ``Response B is better``), per-check lines ``<evidence> -> A|B|both|neither``
are collected when present, and a missing verdict is a format failure (``ok=False`` with the reason), never a
guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_MARK = r"(?:\d{1,2}\s*[.)]|[-*\u2022])"
_LINE_MARK = re.compile(rf"^\s*{_MARK}\s+")
_INLINE_NUM = re.compile(r"(?:^|(?<=\s))(\d{1,2})\s*[.)]\s+")
_LABEL = re.compile(r"^\s*(?:checks?|checklist)\s*:?\s*$", re.I)

_NAMES_RESPONSE = re.compile(
    r"\b(?:response|candidate|assistant)\s*[-_#]?\s*(?:a|b|1|2|one|two)\b"
    r"|\b(?:answer|output|option|model|reply)\s*[-_#]?\s*(?:a|b)\b"
    r"|\b(?:first|second|former|latter|other)\s+(?:response|answer|candidate|reply|one)\b"
    r"|\[\[\s*[ab]\s*\]\]",
    re.I,
)
_NAMES_WINNER = re.compile(
    r"\b(?:winner|wins?|winning|better|worse|best|worst|prefer(?:s|red|able|ence)?|superior|inferior|verdict"
    r"|should\s+(?:be\s+)?(?:chosen|picked|selected))\b",
    re.I,
)

MIN_CHECKS, MAX_CHECKS = 2, 4


def _split_items(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        raise ValueError("checklist: empty output")
    if _LABEL.match(lines[0]):
        lines = lines[1:]
    if not lines:
        raise ValueError("checklist: only a label, no checks")
    if len(lines) > 1:
        if not _LINE_MARK.match(lines[0]):
            raise ValueError(f"checklist: preamble before the first check: {lines[0]!r}")
        items: list[str] = []
        for ln in lines:
            if _LINE_MARK.match(ln):
                items.append(_LINE_MARK.sub("", ln, count=1))
            else:  # a wrapped line continues the previous check
                items[-1] += " " + ln.strip()
        return items
    # one line: inline numbering "1. x 2. y" (or a single bulleted check)
    line = lines[0]
    marks = list(_INLINE_NUM.finditer(line))
    if not marks:
        if _LINE_MARK.match(line):
            return [_LINE_MARK.sub("", line, count=1)]
        raise ValueError("checklist: no numbered or bulleted checks found")
    if line[: marks[0].start()].strip():
        raise ValueError(f"checklist: preamble before the first check: {line[: marks[0].start()].strip()!r}")
    return [line[m.end() : (marks[i + 1].start() if i + 1 < len(marks) else len(line))] for i, m in enumerate(marks)]


def parse_checklist(text: str) -> list[str]:
    """The planner's checks (2-4, neutral); ``ValueError`` naming the violation otherwise."""
    items = [" ".join(it.split()) for it in _split_items(text or "")]
    for i, it in enumerate(items, 1):
        if not it.strip(" .;:-"):
            raise ValueError(f"checklist: check {i} is empty")
    if len(items) < MIN_CHECKS:
        raise ValueError(f"checklist: {len(items)} check(s); expected {MIN_CHECKS}-{MAX_CHECKS}")
    if len(items) > MAX_CHECKS:
        raise ValueError(f"checklist: {len(items)} checks; expected {MIN_CHECKS}-{MAX_CHECKS}")
    seen: set[str] = set()
    for i, it in enumerate(items, 1):
        m = _NAMES_RESPONSE.search(it)
        if m:
            raise ValueError(f"checklist: check {i} names a response ({m.group(0)!r}): {it!r}")
        m = _NAMES_WINNER.search(it)
        if m:
            raise ValueError(f"checklist: check {i} names a winner ({m.group(0)!r}): {it!r}")
        key = it.lower().strip(" .;")
        if key in seen:
            raise ValueError(f"checklist: check {i} duplicates an earlier check: {it!r}")
        seen.add(key)
    return items


# ----------------------------------------------------------------------------------------------------------------
# Verdicts

_VERDICT_PATTERNS = [
    re.compile(r"(?i:verdict)\s*[:=\-]?\s*(?i:is\s*)?\[*\s*(?i:response\s+)?([AB])\b\s*\]*"),
    re.compile(r"\[\[\s*([AB])\s*\]\]"),
    re.compile(r"\b(?i:response|answer)\s+([AB])\s+(?i:is\s+(?:better|preferred|the\s+winner))"),
]
_CHECK_LINE = re.compile(
    r"^\s*(?:\d{1,2}\s*[.)]|[-*\u2022])?\s*(?P<evidence>.*?)\s*(?:->|=>|favou?rs?:?)\s*(?P<fav>A|B|both|neither|none|tie)\b",
    re.I,
)


@dataclass
class VerdictParse:
    verdict: str | None  # "A" | "B" | None (format failure)
    checks: list[tuple[str, str]] = field(default_factory=list)  # (evidence, favours: A|B|both|neither)
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.verdict is not None


def parse_verdict(text: str) -> VerdictParse:
    """Final verdict (the last marker in the text) and any per-check ``evidence -> favours`` lines."""
    body = text or ""
    if not body.strip():
        return VerdictParse(None, [], "empty output")
    found: list[tuple[int, str]] = []
    for pat in _VERDICT_PATTERNS:
        found += [(m.start(), m.group(1).upper()) for m in pat.finditer(body)]
    checks = []
    for ln in body.splitlines():
        if re.search(r"verdict", ln, re.I):
            continue
        m = _CHECK_LINE.match(ln)
        if m:
            fav = m.group("fav")
            fav = (fav.upper() if fav.upper() in ("A", "B")
                   else {"tie": "both", "none": "neither"}.get(fav.lower(), fav.lower()))
            checks.append((m.group("evidence").strip(), fav))
    if not found:
        return VerdictParse(None, checks, "no verdict (expected 'verdict: A' or 'verdict: B')")
    return VerdictParse(max(found)[1], checks)
