"""RoRo's query-specific rubrics and their judgments on the kernel's rubric contract, the process score, and tolerant
parsing of LM output.

Rubricor output (a query-specific rubric)::

    {"criteria": [{"criterion": "...", "weight": 0.5, "score_guidance": "..."}, ...]}

parses to a ``Parsed[list[Rubric]]``: each criterion a kernel ``Rubric`` (``id`` and ``text`` the criterion name,
``weight`` normalised to sum 1, ``guidance`` its score guidance). Judge output::

    {"criterion_judgments": [{"criterion": "...", "score": 0.5, "satisfied": true}, ...]}

parses to a kernel ``Judgment``: a ``Verdict`` per judged criterion (``satisfied``, graded ``score``), the rubric's
criteria without one in ``missing``, and the process score in ``Judgment.score``.

The process score is computed by code from the verdicts, never taken from the Judge:
``final_score = sum over the rubric's criteria of weight * score * 1[satisfied]`` (the kernel's ``weighted_score``).
A rubric criterion without a judgment counts 0 and is reported (``missing``).

Parsing follows the judge layer's statuses: ``ok`` (strict JSON of the expected shape), ``repaired`` (needed
tolerant repair, or some entries were unusable and dropped: the reason says which), ``failed`` (nothing usable;
the score is then *missing*, never 0). All LM text goes through the judge layer's tolerant loader
(``rubricflow.judge.tolerant_json.load_json``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rubricflow.judge.parse import FALSE_WORDS, TRUE_WORDS
from rubricflow.judge.protocol import Judgment, Parsed, Rubric, Verdict, weighted_score
from rubricflow.judge.tolerant_json import load_json

ParsedRubric = Parsed[list[Rubric]]


def norm_criterion(text: str) -> str:
    """Criteria are matched case-insensitively with whitespace collapsed."""
    return re.sub(r"\s+", " ", str(text)).strip().lower()


def criterion(name: str, weight: float, guidance: str = "") -> Rubric:
    """One criterion of a query-specific rubric (its name is its id and its text)."""
    return Rubric(id=name, text=name, weight=weight, guidance=guidance)


def criterion_rows(rubric: list[Rubric]) -> list[dict]:
    """The Rubricor's JSON shape of ``rubric`` (how rubrics are stored)."""
    return [{"criterion": c.id, "weight": c.weight, "score_guidance": c.guidance} for c in rubric]


def from_criterion_rows(rows: list[dict]) -> list[Rubric]:
    return [criterion(r["criterion"], r["weight"], r.get("score_guidance", "")) for r in rows]


# ----------------------------------------------------------------------------------------------------------------
# Reading parsed JSON


def _items(obj: Any, keys: tuple[str, ...]) -> list | None:
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict):
        low = {str(k).strip().lower(): v for k, v in obj.items()}
        for k in keys:
            if isinstance(low.get(k), list):
                return low[k]
    return None


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            return None
        return x if math.isfinite(x) else None
    return None


def _truth(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        w = v.strip().strip(".!").lower()
        return True if w in TRUE_WORDS else False if w in FALSE_WORDS else None
    return None


# ----------------------------------------------------------------------------------------------------------------
# Rubricor output


def parse_rubric(text: str | None) -> ParsedRubric:
    obj, status, notes = load_json(text)
    if status == "failed":
        return Parsed("failed", reason="; ".join(notes), raw=text)
    items = _items(obj, ("criteria", "rubric", "rubrics"))
    if items is None:
        return Parsed("failed", reason="no `criteria` list", raw=text)
    out: list[tuple[str, float, str]] = []
    seen: set[str] = set()
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            notes.append(f"criteria[{i}] is not an object")
            continue
        crit, w = it.get("criterion"), _number(it.get("weight"))
        if not isinstance(crit, str) or not crit.strip():
            notes.append(f"criteria[{i}]: no `criterion` text")
            continue
        if w is None or w < 0:
            notes.append(f"criteria[{i}]: `weight` {it.get('weight')!r} is not a number >= 0")
            continue
        if norm_criterion(crit) in seen:
            notes.append(f"criteria[{i}]: duplicate criterion")
            continue
        seen.add(norm_criterion(crit))
        guide = it.get("score_guidance")
        if not isinstance(guide, str):
            notes.append(f"criteria[{i}]: no `score_guidance`")
            guide = ""
        if not isinstance(it.get("weight"), (int, float)):
            notes.append(f"criteria[{i}]: `weight` given as text")
        out.append((crit.strip(), w, guide))
    total = sum(w for _, w, _ in out)
    if not out or total <= 0:
        return Parsed("failed", reason="; ".join(notes + ["no usable weighted criterion"]), raw=text)
    rubric = [criterion(name, w / total, guide) for name, w, guide in out]
    return Parsed("repaired" if (status != "ok" or notes) else "ok", rubric, "; ".join(notes) or None, text)


# ----------------------------------------------------------------------------------------------------------------
# Judge output


def parse_criterion_judgments(text: str | None, rubric: list[Rubric]) -> Judgment:
    """Judge text -> verdicts on ``rubric``'s criteria and the process score (see the module docstring)."""
    obj, status, notes = load_json(text)
    if status == "failed":
        return Judgment("failed", reason="; ".join(notes), raw=text)
    items = _items(obj, ("criterion_judgments", "judgments", "judgements", "criteria"))
    if items is None:
        return Judgment("failed", reason="no `criterion_judgments` list", raw=text)
    wanted = {norm_criterion(c.id): c.id for c in rubric}
    verdicts: dict[str, Verdict] = {}
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            notes.append(f"judgments[{i}] is not an object")
            continue
        key = norm_criterion(it.get("criterion", ""))
        if key not in wanted:
            notes.append(f"judgments[{i}]: criterion not in the rubric")
            continue
        if wanted[key] in verdicts:
            notes.append(f"judgments[{i}]: duplicate criterion")
            continue
        score, sat = _number(it.get("score")), _truth(it.get("satisfied"))
        if score is None or not 0.0 <= score <= 1.0:
            notes.append(f"judgments[{i}]: `score` {it.get('score')!r} is not a number in [0, 1]")
            continue
        if sat is None:
            notes.append(f"judgments[{i}]: `satisfied` {it.get('satisfied')!r} is not a boolean")
            continue
        if not isinstance(it.get("satisfied"), bool) or not isinstance(it.get("score"), (int, float)):
            notes.append(f"judgments[{i}]: value spelled as text")
        verdicts[wanted[key]] = Verdict(True, sat, score=score)
    if not verdicts:
        return Judgment("failed", reason="; ".join(notes + ["no usable judgment"]), raw=text)
    score, missing = weighted_score(rubric, verdicts)
    if missing:
        notes.append(f"missing: {len(missing)} criteria")
    return Judgment("repaired" if (status != "ok" or notes) else "ok", verdicts, "; ".join(notes) or None, text,
                    tuple(missing), score)


def process_score(rubric: list[Rubric], verdicts: dict[str, Verdict]) -> float:
    """The process score: ``sum weight * score * satisfied`` (missing criteria count 0)."""
    return weighted_score(rubric, verdicts)[0]


def render_rubric_json(rubric: list[Rubric]) -> str:
    return json.dumps({"criteria": [{"criterion": c.id, "weight": round(float(c.weight), 2),
                                     "score_guidance": c.guidance} for c in rubric]})


def render_judgment_json(verdicts: dict[str, Verdict]) -> str:
    return json.dumps({"criterion_judgments": [{"criterion": k, "score": float(v.score if v.score is not None else 1.0),
                                                "satisfied": bool(v.satisfied)} for k, v in verdicts.items()]})
