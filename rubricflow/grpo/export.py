"""A trained policy as one consolidated model, from any engine (ZeRO-3 partitions included).

Under ZeRO-3 a rank's module holds empty placeholders, so saving ``module`` on every rank writes empty tensors.
``full_state_dict`` gathers the parameters one at a time (``models.generation.zero3.full_parameters``: a collective,
every rank calls it) and only the receiving rank keeps a copy; ``save_policy`` writes it once, from rank 0, in Hugging
Face format (``save_pretrained`` with that state dict), into a staged folder that appears complete or not at all.
The engine's own checkpoints (``rubricflow.grpo.checkpoint``) stay partitioned: they are what resume reads.
"""

from __future__ import annotations

from pathlib import Path

import torch


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1




def full_state_dict(module: torch.nn.Module, all_ranks: bool = False) -> dict[str, torch.Tensor] | None:
    """``module.state_dict()`` with every parameter's full value (CPU copies), on rank 0, or on every rank with
    ``all_ranks``; None on the others. Collective under ZeRO-3: call it on every rank."""
    from models.generation.zero3 import full_parameters

    rank, _ = _rank_world()
    keep = all_ranks or rank == 0
    full: dict[str, torch.Tensor] = {}
    for name, t in full_parameters(module):
        if keep:
            full[name] = t.detach().to("cpu").clone()
    if not keep:
        return None
    canonical = {id(p): name for name, p in module.named_parameters()}
    out: dict[str, torch.Tensor] = {}
    for name, p in module.named_parameters(remove_duplicate=False):  # tied aliases share the canonical tensor
        out[name] = full[canonical[id(p)]]
    for name, v in module.state_dict().items():  # persistent buffers (never partitioned)
        if name not in out:
            out[name] = v.detach().to("cpu").clone()
    return out


def save_policy(module: torch.nn.Module, processor, out_dir: str | Path) -> Path | None:
    """Collective: write ``module`` (consolidated) and ``processor`` to ``out_dir`` from rank 0 only; the other ranks
    wait until it is there. Returns the folder on rank 0, None elsewhere."""
    from models.tiny import save
    from rubricflow.util.io import staged_dir

    sd = full_state_dict(module)
    rank, world = _rank_world()
    out = None
    if rank == 0:
        with staged_dir(out_dir) as tmp:
            save(module, processor, tmp, state_dict=sd)
        out = Path(out_dir)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()
    return out
