"""Atomic, resumable training checkpoints.

A checkpoint is a directory ``<root>/step-00000010/`` holding the engine state (model, optimizer, LR schedule;
DeepSpeed writes its own ZeRO-partitioned files) under ``engine/``, one ``state-rank<r>.pt`` per process (RNG
states of python / numpy / torch, the data cursor, the updater's shuffle RNG and any extra state such as the
curriculum scheduler) and ``meta.json`` (step, world size, time).

Atomicity: everything is written into ``<root>/.tmp-step-00000010/`` and the directory is renamed into place only
when complete (a rename within one filesystem is atomic), so a ``kill -9`` at any moment leaves either the previous
checkpoints or the new one, never a half-written one that resume would pick up. ``.tmp-*`` leftovers are ignored
and cleared by the next save. Only the last ``keep_last`` checkpoints are kept.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rubricflow.grpo.engine import Engine

_STEP_RE = re.compile(r"^step-(\d{8})$")


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class MetricsHistory:
    """Per-step metrics as checkpointed state (pass it in the trainer's ``stateful``), so the metrics and plots
    of a resumed run cover every step, not only those after the resume."""

    def __init__(self):
        self.rows: list[dict] = []

    def state_dict(self) -> dict:
        return {"rows": self.rows}

    def load_state_dict(self, state: dict) -> None:
        self.rows = list(state["rows"])


class CheckpointManager:
    def __init__(self, root: str | Path, keep_last: int = 2, engine: Engine | None = None):
        if keep_last < 1:
            raise ValueError(f"keep_last: expected >= 1, got {keep_last}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.engine = engine
        self.rank = getattr(engine, "rank", 0)
        self.world_size = getattr(engine, "world_size", 1)

    def _barrier(self) -> None:
        if self.engine is not None and self.world_size > 1:
            self.engine.barrier()

    # -- listing -----------------------------------------------------------------------------------------------
    def checkpoints(self) -> list[tuple[int, Path]]:
        """Complete checkpoints (with meta.json), oldest first."""
        if not self.root.is_dir():
            return []
        out = []
        for p in self.root.iterdir():
            m = _STEP_RE.match(p.name)
            if m and p.is_dir() and (p / "meta.json").exists():
                out.append((int(m.group(1)), p))
        return sorted(out)

    def latest(self) -> tuple[int, Path] | None:
        cps = self.checkpoints()
        return cps[-1] if cps else None

    # -- save / load -------------------------------------------------------------------------------------------
    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Collective on all ranks: write engine state and this rank's ``state``; returns the final directory."""
        final = self.root / f"step-{step:08d}"
        tmp = self.root / f".tmp-step-{step:08d}"
        if self.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for p in self.root.glob(".tmp-step-*"):
                shutil.rmtree(p, ignore_errors=True)
            tmp.mkdir()
        self._barrier()
        t0 = time.perf_counter()
        if self.engine is not None:
            self.engine.save(tmp / "engine")
        torch.save(state, tmp / f"state-rank{self.rank}.pt")
        self._barrier()
        if self.rank == 0:
            meta = {"step": step, "world_size": self.world_size, "time": time.time(),
                    "engine": getattr(self.engine, "kind", None), "save_s": time.perf_counter() - t0}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
            _fsync_dir(tmp)
            if final.exists():  # the same step saved again after a resume: replace it
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(self.root)
            for _, old in self.checkpoints()[: -self.keep_last]:
                shutil.rmtree(old, ignore_errors=True)
        self._barrier()
        return final

    def load(self, path: str | Path) -> tuple[int, dict[str, Any]]:
        """Restore the engine state from ``path`` and return ``(step, this rank's state)``."""
        p = Path(path)
        meta_f = p / "meta.json"
        if not meta_f.exists():
            raise FileNotFoundError(f"{p}: not a complete checkpoint (no meta.json)")
        meta = json.loads(meta_f.read_text())
        if meta["world_size"] != self.world_size:
            raise RuntimeError(
                f"{p}: saved with world_size={meta['world_size']} but this run has {self.world_size} processes "
                "(per-rank RNG and data cursors cannot be remapped; resume with the same number of processes)"
            )
        if self.engine is not None:
            self.engine.load(p / "engine")
        state = torch.load(p / f"state-rank{self.rank}.pt", map_location="cpu", weights_only=False)
        return int(meta["step"]), state


def _fsync_dir(p: Path) -> None:
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
