"""Induction pretraining of a fresh tiny base: copy a span of a random token sequence found by its content.

A judge that executes a check has to find a key inside one of two responses that state the same keys and copy the
value after it. A fresh tiny transformer trained on the judge's targets alone did not learn that look-up within a few
thousand steps (``bench/copy_probe.py``; docs/deltarubric_planning.md): the circuit it needs, a previous-token head
feeding a head that matches content (an induction head), forms late, and the targets hold few copy tokens among many
easy ones. Pretrained models bring it from pretraining; a tiny base gets it here, before any task data.

One example is a random sequence of ``min_len``-``max_len`` tokens drawn from ``pool`` tokens of the tokenizer's
ordinary vocabulary, a separator, then ``prefix`` consecutive tokens of the sequence from a random start; the target
is the ``copy`` tokens that follow them in the sequence. The start varies, so no fixed offset finds them: only
matching the prefix's content does. Loss on the target only; AdamW, the learning rate a linear warmup times one cosine
over all the steps (``train_sft``'s cosine starts after its warmup), the update itself ``sft.optimizer_step``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from models.processor import text_tokenizer


@dataclass(frozen=True)
class InductionTask:
    min_len: int = 8
    max_len: int = 40
    prefix: int = 2
    copy: int = 6
    pool: int = 32  # distinct tokens the sequences are drawn from (a seeded sample of the ordinary vocabulary)

    def __post_init__(self):
        if self.min_len < self.prefix + self.copy:
            raise ValueError(f"induction task: min_len ({self.min_len}) must hold prefix + copy "
                             f"({self.prefix} + {self.copy})")
        if self.pool < 2:
            raise ValueError(f"induction task: pool must be >= 2, got {self.pool}")
        if self.max_len < self.min_len:
            raise ValueError(f"induction task: max_len ({self.max_len}) < min_len ({self.min_len})")


def token_pool(tokenizer, size: int, seed: int = 0) -> tuple[list[int], int]:
    """A seeded sample of ``size`` ordinary (non-special) token ids, and one more set aside as the separator."""
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    if len(ids) < size + 1:
        raise ValueError(f"induction pretraining: the tokenizer has {len(ids)} ordinary tokens; the pool needs "
                         f"{size} + 1 (the separator)")
    picked = random.Random(seed).sample(ids, size + 1)
    return sorted(picked[1:]), picked[0]


def text_pool(tokenizer, texts, seed: int = 0, size: int | None = None) -> tuple[list[int], int]:
    """The distinct ordinary token ids of ``texts`` (a task's own vocabulary, so the circuit forms on the embeddings
    the task uses; with ``size``, its ``size`` most frequent ones, ties to the lower id), and a seeded ordinary token
    outside them as the separator."""
    special = set(tokenizer.all_special_ids)
    counts: dict[int, int] = {}
    for t in texts:
        for i in tokenizer(t, add_special_tokens=False)["input_ids"]:
            if i not in special:
                counts[i] = counts.get(i, 0) + 1
    ranked = sorted(counts, key=lambda i: (-counts[i], i))
    pool = sorted(ranked[:size] if size else ranked)
    taken = special | set(pool)
    rest = [i for i in range(len(tokenizer)) if i not in taken]
    if len(pool) < 2 or not rest:
        raise ValueError(f"induction pretraining: the texts hold {len(pool)} distinct ordinary tokens and leave "
                         f"{len(rest)} for the separator; the pool needs >= 2 and the separator 1")
    return pool, random.Random(seed).choice(rest)


def example(rng: random.Random, pool: list[int], sep: int, task: InductionTask = InductionTask()):
    """``(prompt ids, target ids)``: a random sequence, the separator, ``prefix`` tokens of it; then what follows."""
    n = rng.randint(task.min_len, task.max_len)
    seq = [rng.choice(pool) for _ in range(n)]
    start = rng.randint(0, n - task.prefix - task.copy)
    cut = start + task.prefix
    return seq + [sep] + seq[start:cut], seq[cut:cut + task.copy]


def _batch(examples, pad: int):
    import torch

    width = max(len(p) + len(t) for p, t in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for r, (p, t) in enumerate(examples):
        row = p + t
        ids[r, :len(row)] = torch.tensor(row)
        mask[r, :len(row)] = 1
        labels[r, len(p):len(row)] = torch.tensor(t)
    return ids, mask, labels


def copy_accuracy(model, processor, n: int = 64, seed: int = 7, task: InductionTask = InductionTask(),
                  pool_seed: int = 0, pool: tuple[list[int], int] | None = None) -> float:
    """Held-out (examples drawn with ``seed``), teacher-forced: the share of target tokens predicted right (chance:
    1 / pool size). ``pool``: ``(ids, separator)`` to draw from instead of ``token_pool``'s sample."""
    import torch

    tok = text_tokenizer(processor)
    pool, sep = pool or token_pool(tok, task.pool, pool_seed)
    rng = random.Random(seed)
    ids, mask, labels = _batch([example(rng, pool, sep, task) for _ in range(n)], tok.pad_token_id or 0)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        pred = model(input_ids=ids, attention_mask=mask).logits[:, :-1].argmax(-1)
    model.train(was_training)
    gold, keep = labels[:, 1:], labels[:, 1:] != -100
    return float(((pred == gold) & keep).sum() / keep.sum())


def pretrain_induction(model, processor, steps: int, batch_size: int, lr: float, seed: int = 0,
                       task: InductionTask = InductionTask(), warmup_steps: int = 20,
                       log_fn: Callable[[int, dict], None] | None = None,
                       pool: tuple[list[int], int] | None = None, clip: float | None = 1.0) -> dict:
    """Train ``model`` in place for ``steps`` steps on the induction task; returns the loss curve's last value and
    the held-out copy accuracy before and after (``copy_accuracy``). ``pool``: ``(ids, separator)`` to draw the
    sequences from (e.g. ``text_pool`` of the task's texts) instead of ``token_pool``'s seeded sample; ``clip``: the
    gradient norm clip of ``optimizer_step`` (None: not clipped)."""
    import torch

    from rubricflow.training.sft import optimizer_step

    if steps <= 0:
        raise ValueError(f"induction pretraining: steps must be > 0, got {steps}")
    tok = text_tokenizer(processor)
    pool, sep = pool or token_pool(tok, task.pool, seed)
    pad = tok.pad_token_id or 0
    before = copy_accuracy(model, processor, seed=seed + 1, task=task, pool=(pool, sep))
    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def factor(s: int) -> float:
        warm = min(1.0, (s + 1) / max(1, warmup_steps))
        return warm * 0.5 * (1 + math.cos(math.pi * s / steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        ids, mask, labels = _batch([example(rng, pool, sep, task) for _ in range(batch_size)], pad)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss_value = optimizer_step(model, opt, sched, loss, "induction pretraining:", step, clip)
        if log_fn is not None:
            log_fn(step, {"induction/loss": loss_value})
    model.eval()
    after = copy_accuracy(model, processor, seed=seed + 1, task=task, pool=(pool, sep))
    return {"steps": steps, "final_loss": loss_value, "copy_acc_before": before, "copy_acc_after": after,
            "chance": 1 / len(pool)}
