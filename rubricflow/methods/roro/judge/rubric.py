"""Rubrics and judgments in the paper's shapes, the process score, and tolerant parsing of LM output.

Rubricor output (a query-specific rubric)::

    {"criteria": [{"criterion": "...", "weight": 0.5, "score_guidance": "..."}, ...]}

Judge output::

    {"criterion_judgments": [{"criterion": "...", "score": 0.5, "satisfied": true}, ...]}

The process score is computed by code from the judgments, never taken from the Judge:
``final_score = sum over the rubric's criteria of weight * score * 1[satisfied]`` (``process_score``). A rubric
criterion without a judgment counts 0 and is reported (``score_judgments(...).missing``).

Parsing follows the judge layer's statuses: ``ok`` (strict JSON of the expected shape), ``repaired`` (needed
tolerant repair, or some entries were unusable and dropped: the reason says which), ``failed`` (nothing usable;
the score is then *missing*, never 0). All LM text goes through the judge layer's tolerant loader
(``rubricflow.judge.tolerant_json.load_json``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from rubricflow.judge.parse import FALSE_WORDS, TRUE_WORDS
from rubricflow.judge.tolerant_json import Status, load_json


def norm_criterion(text: str) -> str:
    """Criteria are matched case-insensitively with whitespace collapsed."""
    return re.sub(r"\s+", " ", str(text)).strip().lower()


# ----------------------------------------------------------------------------------------------------------------
# The process score (pure)


@dataclass
class ProcessScore:
    score: float
    missing: list[str] = field(default_factory=list)  # rubric criteria with no usable judgment (counted 0)
    extra: list[str] = field(default_factory=list)  # judged criteria that are not in the rubric (ignored)


def score_judgments(rubric: list[dict], judgments: list[dict]) -> ProcessScore:
    """``sum weight * score * 1[satisfied]`` over ``rubric`` (``[{"criterion", "weight"}]``) with ``judgments``
    (``[{"criterion", "score", "satisfied"}]``). A criterion's first judgment counts; a judgment whose ``score`` is
    not a finite number or whose ``satisfied`` is not a boolean is unusable, so its criterion is *missing*."""
    judged: dict[str, dict] = {}
    extra: list[str] = []
    wanted = {norm_criterion(c["criterion"]) for c in rubric}
    for j in judgments:
        key = norm_criterion(j.get("criterion", ""))
        if key not in wanted:
            extra.append(str(j.get("criterion", "")))
            continue
        judged.setdefault(key, j)
    total, missing = 0.0, []
    for c in rubric:
        j = judged.get(norm_criterion(c["criterion"]))
        score = j.get("score") if j is not None else None
        sat = j.get("satisfied") if j is not None else None
        usable = (
            isinstance(sat, bool)
            and isinstance(score, (int, float))
            and not isinstance(score, bool)
            and math.isfinite(score)
        )
        if not usable:
            missing.append(c["criterion"])
            continue
        total += float(c["weight"]) * float(score) * (1.0 if sat else 0.0)
    return ProcessScore(total, missing, extra)


def process_score(rubric: list[dict], judgments: list[dict]) -> float:
    """The Judge's process score: ``sum weight * score * satisfied`` (missing criteria count 0; see
    ``score_judgments`` for the list of missing ones)."""
    return score_judgments(rubric, judgments).score


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


@dataclass
class ParsedRubric:
    status: Status
    # {"criterion", "weight" (normalised to sum 1), "score_guidance"}
    criteria: list[dict] = field(default_factory=list)
    reason: str | None = None
    raw: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def parse_rubric(text: str | None) -> ParsedRubric:
    obj, status, notes = load_json(text)
    if status == "failed":
        return ParsedRubric("failed", reason="; ".join(notes), raw=text)
    items = _items(obj, ("criteria", "rubric", "rubrics"))
    if items is None:
        return ParsedRubric("failed", reason="no `criteria` list", raw=text)
    out, seen = [], set()
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
        out.append({"criterion": crit.strip(), "weight": w, "score_guidance": guide})
    total = sum(c["weight"] for c in out)
    if not out or total <= 0:
        return ParsedRubric("failed", reason="; ".join(notes + ["no usable weighted criterion"]), raw=text)
    for c in out:
        c["weight"] = c["weight"] / total
    return ParsedRubric("repaired" if (status != "ok" or notes) else "ok", out, "; ".join(notes) or None, text)


# ----------------------------------------------------------------------------------------------------------------
# Judge output


@dataclass
class ParsedJudgment:
    status: Status
    judgments: list[dict] = field(default_factory=list)  # {"criterion", "score", "satisfied"}, rubric criteria only
    score: float | None = None  # process score under the rubric (None when failed: missing, never 0)
    missing: list[str] = field(default_factory=list)
    reason: str | None = None
    raw: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"


def parse_criterion_judgments(text: str | None, rubric: list[dict]) -> ParsedJudgment:
    """Judge text -> judgments of ``rubric``'s criteria and the process score (see the module docstring)."""
    obj, status, notes = load_json(text)
    if status == "failed":
        return ParsedJudgment("failed", reason="; ".join(notes), raw=text)
    items = _items(obj, ("criterion_judgments", "judgments", "judgements", "criteria"))
    if items is None:
        return ParsedJudgment("failed", reason="no `criterion_judgments` list", raw=text)
    wanted = {norm_criterion(c["criterion"]): c["criterion"] for c in rubric}
    out, seen = [], set()
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            notes.append(f"judgments[{i}] is not an object")
            continue
        key = norm_criterion(it.get("criterion", ""))
        if key not in wanted:
            notes.append(f"judgments[{i}]: criterion not in the rubric")
            continue
        if key in seen:
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
        seen.add(key)
        out.append({"criterion": wanted[key], "score": score, "satisfied": sat})
    if not out:
        return ParsedJudgment("failed", reason="; ".join(notes + ["no usable judgment"]), raw=text)
    ps = score_judgments(rubric, out)
    if ps.missing:
        notes.append(f"missing: {len(ps.missing)} criteria")
    return ParsedJudgment("repaired" if (status != "ok" or notes) else "ok", out, ps.score, ps.missing,
                          "; ".join(notes) or None, text)


def render_rubric_json(criteria: list[dict]) -> str:
    return json.dumps({"criteria": [{"criterion": c["criterion"], "weight": round(float(c["weight"]), 2),
                                     "score_guidance": c.get("score_guidance", "")} for c in criteria]})


def render_judgment_json(judgments: list[dict]) -> str:
    return json.dumps({"criterion_judgments": [{"criterion": j["criterion"], "score": float(j["score"]),
                                                "satisfied": bool(j["satisfied"])} for j in judgments]})
