"""Which process of a multi-process run this is (no torch import: the CLI and the stage framework use it).

Under a launcher (``torchrun``, ``deepspeed``; ``infra/deepspeed/launch.sh``) every rank runs the same stage. The
ranks train together, and rank 0 alone writes what a stage publishes (reports, MLflow runs, saved models).
"""

from __future__ import annotations

import os
import sys


def process_rank() -> int:
    """This process's rank: torch.distributed's once initialised, else the launcher's ``RANK`` (0 without one)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))
