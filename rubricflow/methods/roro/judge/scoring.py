"""The Judge's side: judgments of (question, rubric, trajectory) items and the process score read from them.

A trajectory's process score (``process_scores``) is read in one of two ways (``roro.rubricor_judge.score_mode``):

* ``sampled`` (default; the paper): ``samples`` judgments are sampled at ``temperature``, each is parsed (scores
  as numbers in [0, 1], verdicts as booleans) and scored by code, ``sum weight * score * 1[satisfied]``
  (``rubric.process_score``); the process score is their mean. Failed parses are left out; all failed = missing.
* ``expected`` (probability-weighted): one greedy judgment; each criterion counts ``weight * score *
  P(satisfied = true)``, with ``score`` the number the judgment wrote and ``P`` read from the Judge's next-token
  distribution at the verdict (``expected_scores``). It is the paper's formula in expectation over the verdicts
  only, with no sampling noise.
"""

from __future__ import annotations

import torch

from rubricflow.methods.roro.judge.prompts import chat, judge_input
from rubricflow.methods.roro.env.routing import Trajectory
from rubricflow.judge.protocol import Judgment, Rubric
from rubricflow.methods.roro.judge.rubric import parse_criterion_judgments, render_judgment_json
from rubricflow.methods.roro.judge.lm import RubricLM
from rubricflow.training.sft import encode_pairs


def judge_scores(judge: RubricLM, items: list[tuple[str, list[Rubric], Trajectory]], n: int = 1,
                 temperature: float = 0.0, seed: int | None = None) -> list[list[Judgment]]:
    """Judgments (parsed, with process scores) of each (question, rubric, trajectory)."""
    if not items:
        return []
    texts = judge.generate([judge_input(q, r, t, judge.reads) for q, r, t in items], n=n,
                           temperature=temperature, seed=seed)
    return [[parse_criterion_judgments(x, r) for x in row] for (q, r, t), row in zip(items, texts)]


def mean_score(row: list[Judgment]) -> float | None:
    """Mean process score of the parsed judgments of one trajectory (None when every one failed)."""
    vals = [j.score for j in row if j.score is not None]
    return sum(vals) / len(vals) if vals else None


def sampled_scores(judge: RubricLM, items: list[tuple[str, list[Rubric], Trajectory]], n: int, temperature: float,
                   seed: int) -> list[float | None]:
    """Expected process score per item: the mean over ``n`` sampled judgments (greedy when temperature is 0)."""
    return [mean_score(row) for row in judge_scores(judge, items, n=n, temperature=temperature, seed=seed)]


def criterion_expected(weight: float, score: float, p_true: float, p_false: float) -> float:
    """One criterion's share of the probability-weighted process score: ``weight * score * P(satisfied = true)``,
    with ``P`` renormalised over the two verdict tokens (``score`` is the number the judgment wrote)."""
    return weight * score * p_true / max(p_true + p_false, 1e-12)


@torch.no_grad()
def expected_scores(judge: RubricLM, items: list[tuple[str, list[Rubric], Trajectory]]) -> list[float | None]:
    """Probability-weighted process score per item (``score_mode: expected``), read off one teacher-forced pass.

    The greedy judgment is generated and parsed (a failed parse or a missing criterion: None, missing). Each
    criterion's ``score`` is the number it wrote (parsed in [0, 1]: ``0.25`` counts 0.25); its verdict is taken in
    expectation: the canonical JSON of the judgment is scored by the Judge and, at each ``satisfied`` slot, the
    next-token distribution gives ``P(true)`` against ``P(false)`` (first token of each word), conditioned on the
    greedy judgment before it. The score is ``sum weight * score * P(satisfied)`` (``criterion_expected``): the
    paper's formula in expectation over the verdicts. (The score itself is not taken in expectation: a number is
    several tokens, with no single next-token distribution over its value.)
    """
    if not items:
        return []
    tok = judge.tokenizer
    texts = [row[0] for row in judge.generate([judge_input(q, r, t, judge.reads) for q, r, t in items])]
    parsed = [parse_criterion_judgments(x, r) for x, (q, r, t) in zip(texts, items)]
    first = lambda w: tok(w, add_special_tokens=False)["input_ids"][0]  # noqa: E731
    t_id, f_id = first("true"), first("false")
    verdict_slot = tok(', "satisfied": ', add_special_tokens=False)["input_ids"][-1]
    out: list[float | None] = [None] * len(items)
    todo = [i for i, pj in enumerate(parsed) if not pj.failed and not pj.missing]
    model = judge.model
    for b in range(0, len(todo), judge.gen.batch_size):
        idx = todo[b : b + judge.gen.batch_size]
        prompts = [chat(tok, judge_input(*items[i], judge.reads)) for i in idx]
        targets = [tok(render_judgment_json(parsed[i].verdicts), add_special_tokens=False)["input_ids"] for i in idx]
        batch = encode_pairs(tok, prompts, None, targets)
        comp = batch.pop("completion_mask")
        logp = torch.log_softmax(model(**batch).logits.float(), dim=-1)
        for row, i in enumerate(idx):
            pos = comp[row].nonzero().flatten().tolist()
            ids = batch["input_ids"][row].tolist()
            weights = {c.id: c.weight for c in items[i][1]}
            judged = list(parsed[i].verdicts.items())
            total, k = 0.0, 0
            for p in pos:
                if ids[p] == verdict_slot and k < len(judged):  # next token: first token of true / false
                    lp = logp[row, p]
                    name, v = judged[k]
                    total += criterion_expected(weights[name], v.score, lp[t_id].exp().item(),
                                                lp[f_id].exp().item())
                    k += 1
            out[i] = total if k == len(judged) else None
    return out


def process_scores(judge: RubricLM, items: list[tuple[str, list[Rubric], Trajectory]], mode: str, samples: int,
                   temperature: float, seed: int) -> list[float | None]:
    """Process score per (question, rubric, trajectory) as ``mode`` says (module docstring): ``sampled`` or
    ``expected``."""
    if mode == "sampled":
        return sampled_scores(judge, items, samples, temperature, seed)
    if mode == "expected":
        return expected_scores(judge, items)
    raise ValueError(f"roro.rubricor_judge.score_mode: unknown mode {mode!r}; expected 'sampled' or 'expected'")
