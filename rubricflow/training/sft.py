"""Supervised fine-tuning on (prompt, target) pairs: the warm start before RL.

Used by every method: RuCL's policy learns the reasoning-trace format (facts, then ``\\boxed{answer}``) so that
RL starts above chance; DeltaRubric's shared model learns templated plans and verdicts; RoRo's small and large
step models learn the step-by-step arithmetic format.

Sequences are built exactly as at rollout time: the chat prompt is encoded by the processor (image placeholders
expanded), the target's token ids are appended, then ``<|im_end|>``. Loss is on target tokens only.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from models.processor import text_tokenizer
from rubricflow.sections import SFTSchedule


@dataclass
class SFTExample:
    prompt: str  # chat-formatted generation prompt (ends with the assistant header)
    target: str  # the assistant's reply, without the end-of-turn token
    images: list[Any] = field(default_factory=list)


def encode_pairs(processor, prompts: list[str], images: list[list] | None, targets: list[list[int]]):
    """Right-padded batch of prompt+completion ids with a mask of completion positions.

    Returns a dict with model inputs (input_ids, attention_mask, [mm_token_type_ids, pixel_values,
    image_grid_thw]) plus ``completion_mask`` (1 on completion tokens) — shared by SFT and GRPO log-prob code.
    """
    tok = text_tokenizer(processor)
    is_vl = hasattr(processor, "image_processor")
    if is_vl and images is not None and any(images):
        enc = processor(prompts, images, padding_side="right")
        prompt_ids = [row[m.bool()].tolist() for row, m in zip(enc["input_ids"], enc["attention_mask"])]
        extra = {k: enc[k] for k in ("pixel_values", "image_grid_thw") if k in enc}
    else:
        prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        extra = {}
    seqs = [p + t for p, t in zip(prompt_ids, targets)]
    width = max(len(s) for s in seqs)
    pad = tok.pad_token_id
    input_ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    comp = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (p, s) in enumerate(zip(prompt_ids, seqs)):
        input_ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        comp[i, len(p) : len(s)] = 1
    out = {"input_ids": input_ids, "attention_mask": attn, "completion_mask": comp, **extra}
    if is_vl:
        image_id = processor.image_token_id
        out["mm_token_type_ids"] = (input_ids == image_id).long()
    return out


def target_ids(processor, text: str) -> list[int]:
    tok = text_tokenizer(processor)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    return tok(text, add_special_tokens=False)["input_ids"] + [eos]


def completion_logprobs(model, batch: dict) -> torch.Tensor:
    """Per-position log-prob of the next token, aligned with ``batch['input_ids']`` (position 0 is 0)."""
    inputs = {k: v for k, v in batch.items() if k != "completion_mask"}
    logits = model(**inputs).logits[:, :-1].float()
    ids = batch["input_ids"][:, 1:]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(logp, (1, 0))


def sft_loss(model, batch: dict, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean negative log-likelihood of the completion tokens; with ``weights`` (aligned with ``input_ids``), each
    token's term multiplied by its weight, still divided by the number of completion tokens (a weight above 1 adds
    gradient to its tokens and leaves the others' as they were)."""
    logp = completion_logprobs(model, batch)
    mask = batch["completion_mask"].float()
    weighted = mask if weights is None else mask * weights
    return -(logp * weighted).sum() / mask.sum().clamp(min=1)


TokenWeights = Callable[[str, list[int]], "list[float] | None"]  # (target text, its ids) -> a weight per id, or None


def batch_weights(batch: dict, targets: list[str], ids: list[list[int]], weight_fn: TokenWeights) -> torch.Tensor:
    """Loss weights aligned with ``batch['input_ids']``: 1 everywhere but on the completion tokens of a target whose
    ``weight_fn(target, ids)`` gives weights (one per target id)."""
    w = torch.ones(batch["input_ids"].shape, dtype=torch.float32)
    for r, (text, tid) in enumerate(zip(targets, ids)):
        row = weight_fn(text, tid)
        if row is None:
            continue
        if len(row) != len(tid):
            raise ValueError(f"SFT token weights: {len(row)} weights for a target of {len(tid)} tokens")
        start = int(batch["completion_mask"][r].nonzero()[0])
        w[r, start:start + len(tid)] = torch.tensor(row, dtype=torch.float32)
    return w


def lr_factor(step: int, steps: int, warmup_steps: int, schedule: str = "constant") -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based): linear warmup to 1 over
    ``warmup_steps``, then 1 (``constant``) or a cosine from 1 at the first step after warmup towards 0 at step
    ``steps`` (``cosine``; the last step ``steps - 1`` runs just above 0)."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"SFT lr schedule {schedule!r}: expected 'constant' or 'cosine'")
    warm = min(1.0, (step + 1) / max(1, warmup_steps))
    if schedule == "constant" or step < warmup_steps:
        return warm
    span = max(1, steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup_steps) / span)))


def optimizer_step(model, opt, sched, loss, what: str, step: int, clip: float | None = 1.0) -> float:
    """One update from ``loss``: backward, the gradient's global norm clipped to ``clip`` (None: not clipped), AdamW
    and scheduler steps; returns the loss value, and raises FloatingPointError naming ``what`` and ``step`` when it
    is not finite."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    sched.step()
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"{what} loss became {value} at step {step}")
    return value


def train_sft(
    model,
    processor,
    examples: list[SFTExample],
    settings: SFTSchedule,
    seed: int = 0,
    log_fn: Callable[[int, dict], None] | None = None,
    progress: Callable[[int], None] | None = None,
    weight_fn: TokenWeights | None = None,
) -> list[float]:
    """Train ``model`` in place on ``examples`` for ``settings.steps`` AdamW steps; returns the loss curve. The
    learning rate warms up linearly for ``warmup_steps``, then ``schedule``: ``constant``, or ``cosine`` decay to 0 at
    the last step (:func:`lr_factor`). ``settings`` is a method's SFT section or one phase of its recipe.
    ``weight_fn(target, ids)``: per-token loss weights of a target (:func:`sft_loss`); None, every token 1."""
    if not examples:
        raise ValueError("train_sft: no training examples")
    steps, batch_size, lr = settings.steps, settings.batch_size, settings.lr
    warmup_steps, schedule, weight_decay = settings.warmup_steps, settings.schedule, settings.weight_decay
    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, warmup_steps, schedule))
    # Targets are tokenised when first drawn (a block of a warm start to a bar draws a small share of its examples).
    @functools.cache
    def tids(i: int) -> list[int]:
        return target_ids(processor, examples[i].target)

    order: list[int] = []
    losses: list[float] = []
    model.train()
    for step in range(steps):
        if len(order) < batch_size:
            perm = list(range(len(examples)))
            rng.shuffle(perm)
            order.extend(perm)
        idx, order = order[:batch_size], order[batch_size:]
        t0 = time.perf_counter()
        batch = encode_pairs(
            processor,
            [examples[i].prompt for i in idx],
            [examples[i].images for i in idx],
            [tids(i) for i in idx],
        )
        weights = None if weight_fn is None else batch_weights(
            batch, [examples[i].target for i in idx], [tids(i) for i in idx], weight_fn)
        value = optimizer_step(model, opt, sched, sft_loss(model, batch, weights), "SFT", step, settings.grad_clip)
        losses.append(value)
        if log_fn is not None:
            log_fn(step, {"sft/loss": value, "sft/lr": sched.get_last_lr()[0], "sft/step_s": time.perf_counter() - t0})
        if progress is not None:
            progress(1)
    model.eval()
    return losses
