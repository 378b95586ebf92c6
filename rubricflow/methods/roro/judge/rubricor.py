"""The Rubricor's side: what it reads about a problem (``ProblemView``: the question and the SLM's uncertainty
profile), the rubrics it writes (greedy, parsed by ``rubric.parse_rubric``) and their storage (one JSON row per
problem)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rubricflow.util.io import iter_jsonl, write_jsonl
from rubricflow.methods.roro.judge.prompts import rubricor_input
from rubricflow.judge.protocol import Parsed
from rubricflow.methods.roro.judge.rubric import ParsedRubric, criterion_rows, from_criterion_rows, parse_rubric
from rubricflow.methods.roro.judge.lm import RubricLM
from rubricflow.methods.roro.env.routing import SLM, Trajectory


@dataclass
class ProblemView:
    """What the Rubricor and the Judge know about a problem: its text and the SLM's uncertainty profile (all-SLM
    route)."""

    question: str
    slm_uncertainties: list[float]


def problem_views(trajectories: list[Trajectory]) -> dict[str, ProblemView]:
    """The view of each problem, from its all-SLM route (the ``all-slm`` policy's, or the enumerated route with no
    LRM call)."""
    views: dict[str, ProblemView] = {}
    for t in trajectories:
        if t.problem_id not in views and t.steps and all(s.writer == SLM for s in t.steps):
            views[t.problem_id] = ProblemView(t.question, [s.slm_uncertainty for s in t.steps])
    missing = sorted({t.problem_id for t in trajectories} - set(views))
    if missing:
        raise ValueError(f"no all-slm trajectory for problems {missing[:5]} (the Rubricor's input needs it)")
    return views


def write_rubrics(rubricor: RubricLM, views: dict[str, ProblemView], pids: list[str]) -> dict[str, ParsedRubric]:
    """The Rubricor's greedy rubric for each problem of ``pids``, parsed."""
    texts = rubricor.generate([rubricor_input(views[p].question, views[p].slm_uncertainties) for p in pids])
    return {p: parse_rubric(t[0]) for p, t in zip(pids, texts)}


def save_rubrics(path: str | Path, rubrics: dict[str, ParsedRubric]) -> Path:
    return write_jsonl(path, ({"problem_id": pid, "status": rubrics[pid].status,
                               "criteria": criterion_rows(rubrics[pid].value or []),
                               "reason": rubrics[pid].reason, "raw": rubrics[pid].raw} for pid in sorted(rubrics)))


def load_rubrics(path: str | Path) -> dict[str, ParsedRubric]:
    out = {}
    for lineno, row in iter_jsonl(path):
        try:
            value = from_criterion_rows(row["criteria"]) if row["status"] != "failed" else None
            out[row["problem_id"]] = Parsed(row["status"], value, row.get("reason"), row.get("raw"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}:{lineno}: not a rubric row ({e})") from None
    return out
