"""Greedy held-out evaluation of a policy on dataset samples (accuracy per task and overall)."""

from __future__ import annotations

from pathlib import Path

from rubricflow.generation import generator_for
from rubricflow.sections import GenerationConfig


def policy_requests(processor, data_dir: str | Path, samples) -> list:
    from models.generation import GenRequest
    from models.processor import chat_prompt
    from rubricflow.data.arith import task_demo
    from rubricflow.data.schema import load_images

    return [
        GenRequest(chat_prompt(processor, s.question, n_images=len(s.images), demo=task_demo(s.task)),
                   load_images(data_dir, s))
        for s in samples
    ]


def greedy_responses(model, processor, data_dir: str | Path, samples, gen: GenerationConfig) -> list[str]:
    """Greedy answers of ``model`` itself: ``generation.backend`` when it generates in memory (transformers,
    cached), else transformers (``rubricflow.generation.generator_for(..., in_memory=True)``)."""
    g = generator_for(gen, model, processor, in_memory=True)
    outs = g.generate(policy_requests(processor, data_dir, samples), n=1, max_new_tokens=gen.max_new_tokens, temperature=0)
    return [o[0].text for o in outs]


def accuracy_by_task(samples, responses: list[str]) -> dict[str, float]:
    from rubricflow.answers import outcome_score

    hits: dict[str, list[bool]] = {}
    for s, r in zip(samples, responses):
        hits.setdefault(s.task, []).append(outcome_score(r, s.answer, s.answer_type) == 1.0)
    out = {t: sum(v) / len(v) for t, v in sorted(hits.items())}
    allv = [x for v in hits.values() for x in v]
    out["overall"] = sum(allv) / len(allv) if allv else 0.0
    return out


def evaluate_policy(model, processor, data_dir: str | Path, samples, gen: GenerationConfig,
                    engine=None) -> dict[str, float]:
    """Greedy accuracy per task and overall.

    With an ``engine`` of several ranks every rank takes part: rank r answers samples r, r + W, ... (under ZeRO-3
    its generation joins the others' parameter all-gathers: ``TransformersGenerator`` runs synced, the cached
    backend refuses) and the answers
    are gathered, so every rank returns the same accuracy over all ``samples``. Call it on every rank.
    """
    world = getattr(engine, "world_size", 1) if engine is not None else 1
    if world == 1:
        return accuracy_by_task(samples, greedy_responses(model, processor, data_dir, samples, gen))
    rank = engine.rank
    mine = list(range(rank, len(samples), world))
    answers = greedy_responses(model, processor, data_dir, [samples[i] for i in mine], gen)
    responses: list[str] = [""] * len(samples)
    for part in engine.all_gather_object(list(zip(mine, answers))):
        for i, text in part:
            responses[i] = text
    return accuracy_by_task(samples, responses)


def majority_baseline(train, test) -> dict[str, float]:
    """Accuracy of always answering a task's most frequent training answer: the 'chance' line to beat."""
    from collections import Counter

    best = {}
    for task in {s.task for s in train}:
        best[task] = Counter(s.answer for s in train if s.task == task).most_common(1)[0][0]
    hits: dict[str, list[bool]] = {}
    for s in test:
        hits.setdefault(s.task, []).append(best.get(s.task) == s.answer)
    out = {t: sum(v) / len(v) for t, v in sorted(hits.items())}
    allv = [x for v in hits.values() for x in v]
    out["overall"] = sum(allv) / len(allv) if allv else 0.0
    return out
