"""GRPO math: group-relative advantages, token log-probs, the clipped surrogate, the k3 KL and loss aggregation.

Pure tensor functions with no model, engine or config in sight, so each one has a hand-computed test
(tests/grpo/test_core.py). Conventions:

* Rewards are a 1-D float tensor; ``NaN`` means *missing* (the judge failed). Missing rewards are left out of every
  statistic and their advantage is 0: a failure is never read as a 0 reward.
* Per-token tensors are ``[B, T]`` with a ``mask`` (1 = a real action token, 0 = padding).
* Advantages are per sequence ``[B]``; they are broadcast over the tokens of the sequence.

The objective (per token, to *minimise*)::

    ratio = exp(logp - old_logp)
    loss  = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + beta * KL_k3(ref || policy)

with separate low/high clip bounds (DAPO "clip-higher": clip_high > clip_low keeps low-probability tokens able to
grow) and three ways of turning token losses into one number (``aggregate``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Scale = Literal["group", "batch", "none"]
LossAgg = Literal["grpo", "dr_grpo", "dapo"]

# ----------------------------------------------------------------------------------------------------------------
# Advantages


def _index(keys: Sequence[Hashable]) -> tuple[torch.Tensor, list[Hashable]]:
    """Map keys to dense ids 0..K-1 in order of first appearance."""
    ids: dict[Hashable, int] = {}
    out = [ids.setdefault(k, len(ids)) for k in keys]
    return torch.tensor(out, dtype=torch.long), list(ids)


def _segment_mean_std(
    r: torch.Tensor, seg: torch.Tensor, n_seg: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per segment: count of valid (non-NaN) values, their mean and sample (unbiased, n-1) std.

    Segments with fewer than 2 valid values get std NaN (and mean NaN when empty); callers decide what that means.
    """
    valid = ~torch.isnan(r)
    x = torch.where(valid, r, torch.zeros_like(r)).double()
    n = torch.zeros(n_seg, dtype=torch.float64).index_add_(0, seg, valid.double())
    s = torch.zeros(n_seg, dtype=torch.float64).index_add_(0, seg, x)
    mean = s / n  # NaN for empty segments (0/0)
    dev = torch.where(valid, x - mean[seg], torch.zeros_like(x))
    ss = torch.zeros(n_seg, dtype=torch.float64).index_add_(0, seg, dev * dev)
    std = torch.sqrt(ss / (n - 1))  # n=1 -> 0/0 = NaN, n=0 -> NaN
    std = torch.where(n >= 2, std, torch.full_like(std, float("nan")))
    return n, mean, std


def grouped_advantages(
    rewards: torch.Tensor,
    group_ids: Sequence[Hashable],
    roles: Sequence[Hashable] | None = None,
    scale: Scale = "group",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Group-relative advantages for arbitrary (variable-size) groups, normalised separately per role.

    A group is the set of episodes sharing ``(role, group_id)``; each reward is centred on its group's mean over
    valid rewards. ``scale`` then divides by:

    * ``"group"``: the sample std of the group's valid rewards, plus ``eps`` (TRL / verl default);
    * ``"batch"``: the sample std of all valid rewards *of the same role*, plus ``eps``;
    * ``"none"``: nothing (Dr. GRPO).

    Roles are decoupled (DeltaRubric's planner and verifier): a role's advantages depend only on that role's rewards,
    also under ``"batch"``. Missing rewards (NaN) get advantage 0 and are excluded from every mean/std; a group with
    fewer than two valid rewards gets advantage 0 everywhere (nothing to compare against).
    """
    r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    if len(group_ids) != r.numel():
        raise ValueError(f"group_ids has {len(group_ids)} entries but rewards has {r.numel()}")
    if roles is not None and len(roles) != r.numel():
        raise ValueError(f"roles has {len(roles)} entries but rewards has {r.numel()}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale: expected 'group', 'batch' or 'none', got {scale!r}")
    role_keys = list(roles) if roles is not None else [None] * r.numel()
    gid, _ = _index(list(zip(role_keys, group_ids)))
    n_groups = int(gid.max()) + 1 if r.numel() else 0
    n, mean, std = _segment_mean_std(r, gid, n_groups)
    valid = ~torch.isnan(r)
    centred = r - mean[gid]
    if scale == "group":
        adv = centred / (std[gid] + eps)
    elif scale == "batch":
        rid, _ = _index(role_keys)
        _, _, rstd = _segment_mean_std(r, rid, int(rid.max()) + 1 if r.numel() else 0)
        adv = centred / (rstd[rid] + eps)
    else:
        adv = centred
    keep = valid & (n[gid] >= 2)
    # a role whose batch std is undefined (one valid reward in total) also yields NaN: zero it like the rest
    adv = torch.where(keep & ~torch.isnan(adv), adv, torch.zeros_like(adv))
    return adv.to(torch.float32)


def group_advantages(rewards: torch.Tensor, group_size: int, scale: Scale = "group", eps: float = 1e-4) -> torch.Tensor:
    """Advantages for ``rewards`` laid out as consecutive groups of ``group_size`` (one role).

    ``(r - group mean) / (std + eps)`` with the sample std over the group (``"group"``) or the whole batch
    (``"batch"``), or ``r - group mean`` (``"none"``). NaN rewards are missing: excluded, advantage 0.
    """
    r = torch.as_tensor(rewards).reshape(-1)
    if group_size < 1 or r.numel() % group_size:
        raise ValueError(f"rewards has {r.numel()} entries, not a multiple of group_size={group_size}")
    groups = (torch.arange(r.numel()) // group_size).tolist()
    return grouped_advantages(r, groups, None, scale, eps)


# ----------------------------------------------------------------------------------------------------------------
# Log-probs and entropy


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log softmax(logits / temperature)[targets]`` per position: ``[B, T, V], [B, T] -> [B, T]`` (float32).

    Computed as ``logit[target] - logsumexp(logits)`` so the full log-softmax is never materialised twice.
    """
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    picked = x.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(x, dim=-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of the (temperature-scaled) categorical distribution at each position: ``[B, T, V] -> [B, T]``."""
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    logp = torch.log_softmax(x, dim=-1)
    return -(logp.exp() * logp).sum(-1)


# ----------------------------------------------------------------------------------------------------------------
# Loss pieces


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || ref) per token: ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO/GRPO clipped objective per token, as a loss to minimise.

    Returns ``(loss, ratio, low_clipped, high_clipped)``; ``advantages`` is ``[B]`` or ``[B, T]``. A token is
    *low-clipped* when ``ratio < 1 - clip_low`` with a negative advantage and *high-clipped* when
    ``ratio > 1 + clip_high`` with a positive advantage: exactly the cases where the clip is active and the token
    contributes no gradient.
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == logp.dim() - 1 else advantages
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.min(unclipped, clipped)
    low = (ratio < 1.0 - clip_low) & (adv < 0)
    high = (ratio > 1.0 + clip_high) & (adv > 0)
    return loss, ratio, low, high


def aggregate(token_loss: torch.Tensor, mask: torch.Tensor, mode: LossAgg, max_completion_length: int | None = None,
              n_seqs: int | None = None, n_tokens: float | None = None) -> torch.Tensor:
    """Reduce ``[B, T]`` token losses to a scalar.

    * ``"grpo"``: mean over each sequence's tokens, then mean over sequences (``/ n_seqs``);
    * ``"dr_grpo"``: sum over all tokens / ``(max_completion_length * n_seqs)`` (a constant: no length bias);
    * ``"dapo"``: sum over all tokens / number of tokens (``n_tokens``).

    ``n_seqs`` / ``n_tokens`` default to this batch's; pass the whole minibatch's values when ``token_loss`` is one
    micro-batch of it, so that summing the micro-batch losses gives exactly the minibatch loss.
    """
    m = mask.to(token_loss.dtype)
    b = token_loss.shape[0]
    n_seqs = b if n_seqs is None else n_seqs
    if mode == "grpo":
        per_seq = (token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)
        return per_seq.sum() / n_seqs
    if mode == "dr_grpo":
        if not max_completion_length:
            raise ValueError("loss_agg='dr_grpo' needs max_completion_length (the constant normaliser)")
        return (token_loss * m).sum() / (max_completion_length * n_seqs)
    if mode == "dapo":
        n_tokens = float(m.sum()) if n_tokens is None else n_tokens
        return (token_loss * m).sum() / (n_tokens if n_tokens > 0 else 1.0)
    raise ValueError(f"loss_agg: expected 'grpo', 'dr_grpo' or 'dapo', got {mode!r}")


@dataclass
class LossOutput:
    """The scalar loss and per-batch statistics (python floats, means over valid tokens)."""

    loss: torch.Tensor
    stats: dict[str, float]


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    loss_agg: LossAgg = "grpo",
    max_completion_length: int | None = None,
    n_seqs: int | None = None,
    n_tokens: float | None = None,
    entropy: torch.Tensor | None = None,
) -> LossOutput:
    """The full GRPO token loss (clipped surrogate + ``beta`` * k3 KL) aggregated by ``loss_agg``, with stats:
    ``clip_low_frac``, ``clip_high_frac`` (fractions of valid tokens), ``kl``, ``ratio_mean/min/max``,
    ``entropy`` (when given)."""
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (log-probs of the frozen reference model)")
    tok, ratio, low, high = clipped_surrogate(logp, old_logp, advantages, clip_low, clip_high)
    kl = None
    if beta > 0:
        kl = kl_k3(logp, ref_logp)
        tok = tok + beta * kl
    loss = aggregate(tok, mask, loss_agg, max_completion_length, n_seqs, n_tokens)
    with torch.no_grad():
        m = mask.bool()
        n = max(int(m.sum()), 1)
        r = ratio[m]
        stats = {
            "clip_low_frac": float(low[m].sum()) / n,
            "clip_high_frac": float(high[m].sum()) / n,
            "ratio_mean": float(r.mean()) if r.numel() else 1.0,
            "ratio_min": float(r.min()) if r.numel() else 1.0,
            "ratio_max": float(r.max()) if r.numel() else 1.0,
            "n_tokens": float(m.sum()),
        }
        if kl is not None:
            stats["kl"] = float(kl[m].sum()) / n
        if entropy is not None:
            stats["entropy"] = float(entropy[m].sum()) / n
    return LossOutput(loss, stats)
