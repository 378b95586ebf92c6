"""Raw judge text -> ``Judgment``: strict schema first, then tolerant repair.

The strict schema (what ``prompt.judgment_schema`` asks for and schema-constrained servers return)::

    {"verdicts": {"R01": {"rationale": "...", "applicable": true, "satisfied": false}, ...}}

with exactly the requested rubric ids, ``applicable`` a JSON boolean and ``satisfied`` a boolean when applicable
and ``null`` when not, or its compact form ``{"verdicts": {"R01": "pass" | "fail" | "n/a", ...}}`` (exactly those
three strings). Such text is ``ok``.

Anything else goes through tolerant extraction and, if it yields at least one verdict, is ``repaired`` (the
reason lists what was repaired and which rubrics are missing):

* code fences and prose around the JSON, trailing commas, single quotes, truncation (``tolerant_json``: the
  verdict is read from the judge's *final* object only, ``final_object``: never from an earlier one, which may be
  text the judge quotes);
* per-rubric lists ``[{"id"|"rubric_id": ..., ...}]`` or dicts keyed by id (case-insensitive), optionally
  under a container key (``verdicts``, ``rubrics``, ``results``, ``scores``, ...);
* spellings: ``true``/``"yes"``/``1``/``"pass"`` and ``false``/``"no"``/``0``/``"fail"``; ``null``/``"N/A"``
  for not applicable;
* bare scores per id (``{"R01": 1, "R02": 0}`` as in the RuCL case studies): applicable, satisfied = score.

Nothing is guessed: a value that is none of these (``0.5``, ``"partly"``, a truncated ``"tr"``) leaves that rubric
*absent* from ``verdicts`` (never unsatisfied, and listed in ``Judgment.missing``), and text with no usable verdict
is ``failed`` with a reason.

**A verdict is read only from the judge's own answer.** The judged response is text the policy wrote: it may end in
a verdict block of any shape above, and a judge may echo the prompt or quote the response before (or instead of)
answering. The backends enclose the response in a per-call boundary (``prompt.new_boundary``: a random nonce the
policy cannot predict) and pass it with the response text (``boundary=``, ``quoted=``); then

* everything up to the end of the last region the answer quotes is cut away: a region between the boundary's
  opening and closing tags (an echoed prompt, or a quoted response), or a verbatim copy of the response without
  them (unless the copy lies inside one of the judge's own JSON objects: a rationale quoting the response); an
  answer that ends inside an opened region (a cut-off echo) has no answer of its own;
* the verdict is read from the final object of what is left, and an object that is a copy of text in the response
  (whitespace aside: a judge answering with the policy's own block) is refused.

A refused answer is ``failed`` (its rubrics missing, counted by the failure budget), never a pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rubricflow.judge.protocol import Judgment, Verdict
from rubricflow.judge.tolerant_json import final_object, top_level_spans

_NA = object()  # "not applicable" marker
_BAD = object()  # unreadable value
_MISSING = object()

TRUE_WORDS = {"true", "yes", "y", "1", "1.0", "pass", "passed", "satisfied", "met", "correct", "ok"}
FALSE_WORDS = {"false", "no", "n", "0", "0.0", "fail", "failed", "unsatisfied", "not satisfied", "not met", "incorrect"}
NA_WORDS = {"n/a", "na", "not applicable", "not_applicable", "none", "null", "inapplicable", "-", ""}
CONTAINER_KEYS = (
    "verdicts",
    "rubrics",
    "results",
    "judgments",
    "judgements",
    "evaluations",
    "evaluation",
    "assessment",
    "scores",
    "rubric_scores",
    "rubric_results",
)
ID_KEYS = ("id", "rubric_id", "rubricid", "rubric")
APPLICABLE_KEYS = ("applicable", "is_applicable", "applies")
SATISFIED_KEYS = ("satisfied", "is_satisfied", "pass", "passed", "met", "score", "result", "verdict")
RATIONALE_KEYS = ("rationale", "reason", "explanation", "justification", "comment")


def _norm(key: Any) -> str:
    return str(key).strip().lower()


def _truth(v: Any) -> Any:
    """bool -> itself; None/"N/A" -> _NA; 1/0 and yes/no spellings -> bool; anything else -> _BAD."""
    if isinstance(v, bool):
        return v
    if v is None:
        return _NA
    if isinstance(v, (int, float)):
        return True if v == 1 else False if v == 0 else _BAD
    if isinstance(v, str):
        w = v.strip().strip(".!").lower()
        if w in TRUE_WORDS:
            return True
        if w in FALSE_WORDS:
            return False
        if w in NA_WORDS:
            return _NA
    return _BAD


def _first(d: dict, keys: tuple[str, ...]) -> Any:
    low = {_norm(k): v for k, v in d.items()}
    for k in keys:
        if k in low:
            return low[k]
    return _MISSING


def _verdict(v: Any) -> Verdict | None:
    """One rubric's value (an object or a bare score) -> Verdict, or None when unreadable."""
    if isinstance(v, dict):
        a_raw, s_raw = _first(v, APPLICABLE_KEYS), _first(v, SATISFIED_KEYS)
        r = _first(v, RATIONALE_KEYS)
        rationale = "" if r is _MISSING or r is None else str(r)
        s = _BAD if s_raw is _MISSING else _truth(s_raw)
        if a_raw is not _MISSING:
            a = _truth(a_raw)
            if a is False or a is _NA:
                return Verdict(False, None, rationale)
            if a is True and isinstance(s, bool):
                return Verdict(True, s, rationale)
            return None  # applicable but no readable satisfaction, or unreadable applicability
        if s is _NA:
            return Verdict(False, None, rationale)
        return Verdict(True, s, rationale) if isinstance(s, bool) else None
    t = _truth(v)
    if t is _NA:
        return Verdict(False, None, "")
    return Verdict(True, t, "") if isinstance(t, bool) else None


def _collect(obj: Any, want: dict[str, str], notes: list[str], depth: int = 0) -> dict[str, Verdict]:
    """Find verdicts for the wanted ids (normalised id -> requested id) anywhere sensible in ``obj``."""
    if depth > 5:
        return {}
    out: dict[str, Verdict] = {}
    if isinstance(obj, list):
        for item in obj:
            if not isinstance(item, dict):
                continue
            rid_raw = _first(item, ID_KEYS)
            if rid_raw is not _MISSING and _norm(rid_raw) in want:
                rid = want[_norm(rid_raw)]
                v = _verdict({k: x for k, x in item.items() if _norm(k) not in ID_KEYS})
                if v is None:
                    notes.append(f"{rid}: unreadable verdict")
                else:
                    out[rid] = v
            else:
                out.update(_collect(item, want, notes, depth + 1))
        return out
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        rid = want.get(_norm(k))
        if rid is not None:
            verdict = _verdict(v)
            if verdict is None:
                notes.append(f"{rid}: unreadable verdict {json.dumps(v, default=str)[:60]}")
            else:
                out[rid] = verdict
    if out:
        return out
    rid_raw = _first(obj, ID_KEYS)
    if rid_raw is not _MISSING and isinstance(rid_raw, str) and _norm(rid_raw) in want:
        return _collect([obj], want, notes, depth + 1)  # a single per-rubric object
    for k, v in obj.items():  # container keys first, then any nested value
        if _norm(k) in CONTAINER_KEYS:
            found = _collect(v, want, notes, depth + 1)
            if found:
                return found
    for v in obj.values():
        if isinstance(v, (dict, list)):
            found = _collect(v, want, notes, depth + 1)
            if found:
                return found
    return out


def _strict(obj: Any, rubric_ids: list[str]) -> dict[str, Verdict] | None:
    """The verdicts if ``obj`` follows the strict schema exactly, else None."""
    if not isinstance(obj, dict) or set(obj) != {"verdicts"} or not isinstance(obj["verdicts"], dict):
        return None
    v = obj["verdicts"]
    if set(v) != set(rubric_ids):
        return None
    out = {}
    if all(isinstance(v[rid], str) for rid in rubric_ids):  # the compact form
        compact = {"pass": Verdict(True, True), "fail": Verdict(True, False), "n/a": Verdict(False, None)}
        if not all(v[rid] in compact for rid in rubric_ids):
            return None
        return {rid: compact[v[rid]] for rid in rubric_ids}
    for rid in rubric_ids:
        item = v[rid]
        if not isinstance(item, dict) or not {"applicable", "satisfied"} <= set(item):
            return None
        if not set(item) <= {"applicable", "satisfied", "rationale"}:
            return None
        a, s, r = item["applicable"], item["satisfied"], item.get("rationale", "")
        if not isinstance(a, bool) or not isinstance(r, str):
            return None
        if (a and not isinstance(s, bool)) or (not a and s is not None):
            return None
        out[rid] = Verdict(a, s if a else None, r)
    return out


_WS = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _WS.sub("", text)


def own_answer(text: str, boundary: str | None = None, quoted: Sequence[str] = ()) -> tuple[str, list[str], str | None]:
    """``(the judge's own text, notes, refusal)``: ``text`` after the last region it quotes (see the module
    docstring); ``refusal`` says why there is no own text (an answer ending inside an opened boundary region)."""
    notes: list[str] = []
    own_from = 0
    if boundary:
        inside = False
        for m in re.finditer(rf"<\s*(/?)\s*{re.escape(boundary)}\s*>", text, re.I):
            if m.group(1):  # a closing tag ends the quoted region (one opened before the answer began, too)
                inside, own_from = False, m.end()
            else:
                inside = True
        if own_from or inside:
            notes.append("quoted the delimited response")
        if inside:
            return "", notes, "the judge's answer ends inside the delimited response it echoes (no answer of its own)"
    own = text[own_from:]
    for q in quoted:
        q = q.strip()
        if not q:
            continue
        spans = top_level_spans(own)
        at = own.rfind(q)
        while at >= 0:
            # a copy inside the judge's own object (a rationale quoting the response) is part of the answer
            if not any(s < at and at + len(q) <= e for s, e, _ in spans):
                own = own[at + len(q):]
                notes.append("quoted the judged response")
                break
            at = own.rfind(q, 0, at + len(q) - 1) if at > 0 else -1
    return own, list(dict.fromkeys(notes)), None


def _copied(span: str, quoted: Sequence[str]) -> bool:
    """True when ``span`` (whitespace aside) is text of one of ``quoted``."""
    s = _squash(span)
    return bool(s) and any(s in _squash(q) for q in quoted if q)


COPY_REFUSAL = ("refused: the judge's final JSON object is a copy of text in the judged response (the policy's own "
                "block, never a verdict)")


def parse_judgment(text: str | None, rubric_ids: list[str], *, boundary: str | None = None,
                   quoted: Sequence[str] = ()) -> Judgment:
    """Parse raw judge output into a Judgment for ``rubric_ids`` (see the module docstring). ``boundary``: the tag
    name that enclosed the judged response in this call's prompt; ``quoted``: the response text as written and as
    the prompt showed it. Both are given by the backends; without them only the final-object rule applies."""
    raw = text
    if text is None or not str(text).strip():
        return Judgment("failed", {}, reason="empty judge output", raw=raw)
    ids = list(dict.fromkeys(rubric_ids))
    own, cut, refusal = own_answer(str(text), boundary, quoted)
    if refusal is not None:
        return Judgment("failed", {}, reason=f"refused: {refusal}", raw=raw)
    own = own.strip()
    try:
        strict = _strict(json.loads(own), ids) if own else None
    except (ValueError, RecursionError):
        strict = None
    if strict is not None:
        if _copied(own, quoted):
            return Judgment("failed", {}, reason=COPY_REFUSAL, raw=raw)
        if not cut:
            return Judgment("ok", strict, reason=None, raw=raw)

    want = {_norm(r): r for r in ids}
    found_obj = final_object(own) if own else None
    if found_obj is None:
        why = "no JSON object found" + (" after the quoted response" if cut else "")
        return Judgment("failed", {}, reason=f"{why} (requested {', '.join(ids)})", raw=raw)
    obj, notes, (start, end) = found_obj
    if _copied(own[start:end], quoted):
        return Judgment("failed", {}, reason=COPY_REFUSAL, raw=raw)
    notes = cut + notes
    verdicts = _collect(obj, want, notes)
    if not verdicts:
        detail = "; ".join(dict.fromkeys(n for n in notes if "unreadable" in n))
        reason = f"no verdict for any requested rubric (requested {', '.join(ids)})" + (f": {detail}" if detail else "")
        return Judgment("failed", {}, reason=reason, raw=raw)
    notes = notes or ["not the strict schema"]
    missing = [r for r in ids if r not in verdicts]
    if missing:
        notes.append(f"missing: {', '.join(missing)}")
    ordered = {r: verdicts[r] for r in ids if r in verdicts}
    return Judgment("repaired", ordered, reason="; ".join(dict.fromkeys(notes)), raw=raw, missing=tuple(missing))
