"""Tolerant JSON of model output: the one loader of the judge, RoRo's parsers and the rubric teacher.

A model asked for JSON may wrap it in a code fence, write prose before or after it, leave a trailing comma, use
single quotes or stop mid-object. ``candidates(text)`` lists the texts worth trying, most specific first:

* the body of every code fence (``code fence``);
* the span from the first ``{``/``[`` to the last ``}``/``]`` when text lies around it (``text around JSON``);
* everything from the first ``{``/``[`` when text comes before it (``text before JSON``);
* the whole text (no note).

Each candidate is read strictly (``json.loads``) and, failing that, with ``json-repair`` (note ``tolerant JSON
repair``). ``loads_candidates`` yields every candidate that gives a non-empty object or list, with its notes (the
judge keeps the one with the most verdicts); ``load_json`` returns the whole text's strict reading as ``ok``, else
the first usable candidate as ``repaired``, else ``failed`` with the reason.

``final_object(text)`` is what a judge's verdict is read from: the *last* top-level JSON object (or list of objects)
in the text, not any candidate anywhere in it. A judge that quotes or echoes text holding JSON (the judged response
ending in a verdict block of its own) and then answers has its answer last; reading "the best candidate anywhere"
would let the quoted block win. ``top_level_spans`` finds the spans: a ``{`` or ``[`` outside any bracket up to
the bracket that closes it (double-quoted strings skipped), or to the end of the text when it never closes (a
truncated answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Literal

import json_repair

Status = Literal["ok", "repaired", "failed"]

FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.S)
REPAIRED = "tolerant JSON repair"


def candidates(text: str) -> list[tuple[str, str]]:
    """(candidate JSON text, what was done to get it), most specific first; the whole text last, with no note."""
    out = [(m.group(1), "code fence") for m in FENCE_RE.finditer(text)]
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if starts:
        s = min(starts)
        e = max(text.rfind("}"), text.rfind("]"))
        if e > s and (s > 0 or e < len(text) - 1):
            out.append((text[s : e + 1], "text around JSON"))
        if s > 0:
            out.append((text[s:], "text before JSON"))
    out.append((text, ""))
    return out


def loads_tolerant(candidate: str) -> tuple[Any, list[str]] | None:
    """``(value, notes)``: strict ``json.loads`` (no note), else ``json-repair`` (note ``tolerant JSON repair``);
    None when json-repair gives up too."""
    try:
        return json.loads(candidate), []
    except (ValueError, RecursionError):
        pass
    try:
        return json_repair.loads(candidate), [REPAIRED]
    except Exception:  # noqa: BLE001 - json-repair gives up on some inputs with its own errors
        return None


def loads_candidates(text: str) -> Iterator[tuple[Any, list[str]]]:
    """``(object or list, notes)`` for every candidate of ``text`` that reads as a non-empty object or list, in
    the order of :func:`candidates`; ``notes``: how the candidate was cut out, then ``tolerant JSON repair`` if
    it needed it (a fresh list each time: callers may append to it)."""
    for candidate, how in candidates(text):
        loaded = loads_tolerant(candidate)
        if loaded is None:
            continue
        obj, repair = loaded
        if isinstance(obj, (dict, list)) and obj:
            yield obj, ([how] if how else []) + repair


def top_level_spans(text: str) -> list[tuple[int, int, bool]]:
    """``(start, end, closed)`` of every top-level bracketed span of ``text``, in order (see the module docstring);
    the last one is open (``closed`` False, ``end`` the text's length) when its brackets never close."""
    out: list[tuple[int, int, bool]] = []
    depth, start, in_str, esc = 0, 0, False, False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch in "{[":
                depth, start = 1, i
            continue
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                out.append((start, i + 1, True))
    if depth > 0:
        out.append((start, len(text), False))
    return out


def _structured(obj: Any) -> bool:
    """A non-empty object, or a list holding an object: what a verdict can be read from."""
    if isinstance(obj, dict):
        return bool(obj)
    return isinstance(obj, list) and any(isinstance(x, dict) for x in obj)


def final_object(text: str) -> tuple[Any, list[str], tuple[int, int]] | None:
    """``(value, notes, (start, end))`` of the last top-level span of ``text`` that reads (strictly, else with
    json-repair) as a non-empty object or a list of objects; None when there is none. Spans after it that read as
    anything else (``[1]``, a ``{6}`` in prose) are passed over; an earlier object never replaces a later one.
    ``notes``: ``code fence`` when it lies in a fence, ``text around JSON`` when other text is around it,
    ``truncated JSON`` when its brackets never close, ``tolerant JSON repair`` when it needed repair."""
    fences = [m.span(1) for m in FENCE_RE.finditer(text)]
    for start, end, closed in reversed(top_level_spans(text)):
        loaded = loads_tolerant(text[start:end])
        if loaded is None or not _structured(loaded[0]):
            continue
        obj, repair = loaded
        notes = []
        if any(a <= start and end <= b for a, b in fences):
            notes.append("code fence")
        elif text[:start].strip() or text[end:].strip():
            notes.append("text around JSON")
        if not closed:
            notes.append("truncated JSON")
        return obj, notes + repair, (start, end)
    return None


def load_json(text: str | None) -> tuple[Any, Status, list[str]]:
    """``(value, status, notes)``: the whole (stripped) text read strictly is ``ok``; else the first candidate of
    :func:`loads_candidates` is ``repaired``; else ``(None, "failed", [why])``."""
    if text is None or not str(text).strip():
        return None, "failed", ["empty output"]
    text = str(text).strip()
    try:
        return json.loads(text), "ok", []
    except (ValueError, RecursionError):
        pass
    for obj, notes in loads_candidates(text):
        return obj, "repaired", notes
    return None, "failed", ["no JSON object found"]
