"""DeepSpeed ZeRO-3 and generation: which ranks must join a forward, and the full parameter stream.

A ZeRO-3 partitioned model all-gathers its parameters in every forward (a collective), so every rank must run the
same forwards (``models.generation.hf`` runs filler batches for that) and a weight sync gathers the parameters on
every rank (``full_parameters``, used by the vLLM backends and ``rubricflow.grpo.export``).
"""

from __future__ import annotations

import torch


def zero3_world(model: torch.nn.Module) -> int:
    """Number of ranks that must join this model's forwards: the world size when its parameters are ZeRO-3
    partitioned (DeepSpeed tags them with ``ds_id``) over several ranks, else 1."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return 1
    return dist.get_world_size() if any(hasattr(p, "ds_id") for p in model.parameters()) else 1


def full_parameters(model: torch.nn.Module):
    """``(name, tensor)`` for every parameter with its full value, in ``named_parameters`` order.

    Under ZeRO-3 each parameter is gathered on its own (``GatheredParameters``; a collective, so every rank must
    iterate the whole stream in the same order) and cloned, so peak memory is one parameter beyond the shards.
    """
    for name, p in model.named_parameters():
        if hasattr(p, "ds_id"):
            import deepspeed

            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                yield name, p.data.detach().clone()
        else:
            yield name, p.data.detach()
