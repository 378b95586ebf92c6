"""Pairwise accuracy of process scores on preference pairs: the measure every alternation phase is selected by
(val pairs) and the kept Judge is reported with (test pairs, ``roro_eval``).

A pair counts 1 when the chosen trajectory scores higher, 0.5 on a tie, 0 when lower or when a score is missing;
the accuracy is given overall and per pair category (outcome, cost, process; ``pairs.category``).
"""

from __future__ import annotations

from collections import defaultdict

from rubricflow.methods.roro.judge.scoring import process_scores
from rubricflow.methods.roro.judge.pairs import Pair, category
from rubricflow.methods.roro.env.routing import Trajectory
from rubricflow.methods.roro.judge.rubric import ParsedRubric
from rubricflow.methods.roro.judge.lm import RubricLM
from rubricflow.methods.roro.judge.rubricor import ProblemView


def pair_credit(s_chosen: float | None, s_rejected: float | None) -> float:
    """1 if the chosen trajectory scores higher, 0.5 on a tie, 0 if lower or a score is missing."""
    if s_chosen is None or s_rejected is None:
        return 0.0
    if s_chosen > s_rejected:
        return 1.0
    return 0.5 if s_chosen == s_rejected else 0.0


def pair_accuracy(
    pairs: list[Pair], trajectories: list[Trajectory], scores: dict[int, float | None]
) -> dict[str, float]:
    """Pairwise accuracy (ties 0.5, a missing score 0) of ``scores`` (trajectory index -> score) on ``pairs``:
    overall (``pairwise_acc``), strict (ties 0), and per category (``acc_<category>``, with ``n_<category>``;
    ``acc_process`` pools both process categories)."""
    credits = [pair_credit(scores.get(p.chosen), scores.get(p.rejected)) for p in pairs]
    by_cat: dict[str, list[float]] = defaultdict(list)
    for p, c in zip(pairs, credits):
        cat = category(p, trajectories)
        by_cat[cat.replace("-", "_")].append(c)
        if cat.startswith("process"):
            by_cat["process"].append(c)
    out = {
        "pairwise_acc": sum(credits) / max(1, len(credits)),
        "strict_acc": sum(1.0 for c in credits if c == 1.0) / max(1, len(credits)),
        "n_pairs": float(len(pairs)),
    }
    for cat, cs in sorted(by_cat.items()):
        out[f"acc_{cat}"] = sum(cs) / len(cs)
        out[f"n_{cat}"] = float(len(cs))
    return out


def pairwise_accuracy(judge: RubricLM, rubrics: dict[str, ParsedRubric], views: dict[str, ProblemView],
                      trajectories: list[Trajectory], pairs: list[Pair], mode: str = "sampled", n: int = 4,
                      temperature: float = 1.0, seed: int = 0) -> dict[str, float]:
    """Judge scores under ``rubrics`` (``process_scores``); :func:`pair_accuracy` plus failure rates."""
    need = sorted({i for p in pairs for i in (p.chosen, p.rejected)
                   if not rubrics[trajectories[i].problem_id].failed})
    items = [(views[trajectories[i].problem_id].question, rubrics[trajectories[i].problem_id].value,
              trajectories[i]) for i in need]
    scores = dict(zip(need, process_scores(judge, items, mode, n, temperature, seed)))
    n_fail = sum(1 for i in need if scores[i] is None)
    return {
        **pair_accuracy(pairs, trajectories, scores),
        "judge_failed_frac": n_fail / max(1, len(need)),
        "rubric_failed_frac": sum(1 for r in rubrics.values() if r.failed) / max(1, len(rubrics)),
    }
