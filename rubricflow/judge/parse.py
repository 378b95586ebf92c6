"""Raw judge text -> ``Judgment``: strict schema first, then tolerant repair.

The strict schema (what ``prompt.judgment_schema`` asks for and schema-constrained servers return)::

    {"verdicts": {"R01": {"rationale": "...", "applicable": true, "satisfied": false}, ...}}

with exactly the requested rubric ids, ``applicable`` a JSON boolean and ``satisfied`` a boolean when applicable
and ``null`` when not, or its compact form ``{"verdicts": {"R01": "pass" | "fail" | "n/a", ...}}`` (exactly those
three strings). Such text is ``ok``.

Anything else goes through tolerant extraction and, if it yields at least one verdict, is ``repaired`` (the
reason lists what was repaired and which rubrics are missing):

* code fences and prose around the JSON, trailing commas, single quotes, truncation (``tolerant_json``: every
  candidate it finds is tried, the one with the most verdicts is kept);
* per-rubric lists ``[{"id"|"rubric_id": ..., ...}]`` or dicts keyed by id (case-insensitive), optionally
  under a container key (``verdicts``, ``rubrics``, ``results``, ``scores``, ...);
* spellings: ``true``/``"yes"``/``1``/``"pass"`` and ``false``/``"no"``/``0``/``"fail"``; ``null``/``"N/A"``
  for not applicable;
* bare scores per id (``{"R01": 1, "R02": 0}`` as in the RuCL case studies): applicable, satisfied = score.

Nothing is guessed: a value that is none of these (``0.5``, ``"partly"``, a truncated ``"tr"``) leaves that rubric
*absent* from ``verdicts`` (never unsatisfied), and text with no usable verdict is ``failed`` with a reason.
"""

from __future__ import annotations

import json
from typing import Any

from rubricflow.judge.protocol import Judgment, Verdict
from rubricflow.judge.tolerant_json import loads_candidates

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


def parse_judgment(text: str | None, rubric_ids: list[str]) -> Judgment:
    """Parse raw judge output into a Judgment for ``rubric_ids`` (see the module docstring)."""
    raw = text
    if text is None or not str(text).strip():
        return Judgment("failed", {}, reason="empty judge output", raw=raw)
    text = str(text).strip()
    ids = list(dict.fromkeys(rubric_ids))
    try:
        strict = _strict(json.loads(text), ids)
    except (ValueError, RecursionError):
        strict = None
    if strict is not None:
        return Judgment("ok", strict, reason=None, raw=raw)

    want = {_norm(r): r for r in ids}
    best: tuple[dict[str, Verdict], list[str]] = ({}, [])
    seen_json = False
    unreadable: list[str] = []
    for obj, notes in loads_candidates(text):  # code fence, text around / before the JSON, the whole text
        seen_json = True
        found = _collect(obj, want, notes)
        unreadable.extend(n for n in notes if "unreadable" in n)
        if len(found) > len(best[0]):
            best = (found, notes)
        if len(found) == len(ids):
            break
    verdicts, notes = best
    if not verdicts:
        why = "no verdict for any requested rubric" if seen_json else "no JSON object found"
        detail = "; ".join(dict.fromkeys(unreadable))
        reason = f"{why} (requested {', '.join(ids)})" + (f": {detail}" if detail else "")
        return Judgment("failed", {}, reason=reason, raw=raw)
    notes = notes or ["not the strict schema"]
    missing = [r for r in ids if r not in verdicts]
    if missing:
        notes.append(f"missing: {', '.join(missing)}")
    ordered = {r: verdicts[r] for r in ids if r in verdicts}
    return Judgment("repaired", ordered, reason="; ".join(dict.fromkeys(notes)), raw=raw)
