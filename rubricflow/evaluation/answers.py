"""Outcome correctness: is the boxed answer of a response the reference answer?

* ``int`` / ``float``: math-verify (``parse`` + ``verify``: ``4`` = ``4.0`` = ``8/2``, ``0.5`` = ``1/2``), with an
  exact (normalised) string match as the fallback when math-verify cannot parse the prediction;
* ``choice``: exact match of the option letter (``B``, ``(B)``, ``b.`` and ``Option B`` all read as ``B``);
* ``text``: normalised exact match (case, spacing, trailing period), then math-verify when both sides parse.

A response without a ``\\boxed{...}`` is incorrect (the format is part of the task). math-verify's timeouts use
``signal.alarm``, which only works in the main thread; elsewhere (Prefect task threads) it runs without them (the
answers here are a few characters long).
"""

from __future__ import annotations

import re
import threading

from rubricflow.data.traces import extract_boxed

ANSWER_TYPES = ("int", "float", "choice", "text")
_CHOICE_RE = re.compile(r"^(?:option|answer|choice)?\s*[\(\[]?\s*([A-Za-z])\s*[\)\]]?\s*[.:]?$", re.IGNORECASE)


def _norm(s: str) -> str:
    s = re.sub(r"\s+", " ", str(s)).strip()
    s = s.strip("$").strip()
    return s.rstrip(".").strip().lower()


def normalize_choice(s: str) -> str | None:
    """The option letter of ``s`` in upper case, or None when ``s`` is not a single option."""
    m = _CHOICE_RE.match(str(s).strip())
    return m.group(1).upper() if m else None


def _timeouts() -> dict:
    if threading.current_thread() is threading.main_thread():
        return {}
    return {"parsing_timeout": None}


def _mv_parse(s: str):
    from math_verify import parse

    return parse(f"${s}$", **_timeouts())


def _mv_verify(gold, pred) -> bool:
    from math_verify import verify

    kw = {} if threading.current_thread() is threading.main_thread() else {"timeout_seconds": None}
    return bool(verify(gold, pred, **kw))


def answers_match(pred: str | None, gold: str, answer_type: str) -> bool:
    """Whether the extracted answer ``pred`` equals the reference ``gold`` for ``answer_type``."""
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"answer_type: expected one of {ANSWER_TYPES}, got {answer_type!r}")
    if pred is None or not str(pred).strip():
        return False
    if answer_type == "choice":
        p, g = normalize_choice(pred), normalize_choice(gold)
        if g is None:
            raise ValueError(f"answer_type 'choice' but the reference answer {gold!r} is not an option letter")
        return p == g
    if _norm(pred) == _norm(gold):
        return True
    gold_p, pred_p = _mv_parse(gold), _mv_parse(pred)
    if not gold_p or not pred_p:
        return False  # the exact-match fallback above already failed
    return _mv_verify(gold_p, pred_p)


def outcome_score(response: str, gold: str, answer_type: str) -> float:
    """1.0 when the last ``\\boxed{}`` of ``response`` matches ``gold``, else 0.0 (also when there is no box)."""
    return 1.0 if answers_match(extract_boxed(response), gold, answer_type) else 0.0
