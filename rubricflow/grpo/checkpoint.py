"""Atomic, resumable training checkpoints.

A checkpoint is a directory ``<root>/step-00000010/`` holding the engine state (model, optimizer, LR schedule;
DeepSpeed writes its own ZeRO-partitioned files) under ``engine/``, one ``state-rank<r>.pt`` per process (RNG
states of python / numpy / torch, the data cursor, the updater's shuffle RNG and any extra state such as the
curriculum scheduler) and ``meta.json`` (step, world size, time).

Atomicity: everything is written into ``<root>/.tmp-step-00000010/`` and the directory is renamed into place only
when complete (a rename within one filesystem is atomic), so a ``kill -9`` at any moment leaves either the previous
checkpoints or the new one, never a half-written one that resume would pick up. ``.tmp-*`` leftovers are ignored
and cleared by the next save. Only the last ``keep_last`` checkpoints are kept. Every file is fsynced before the
rename, and ``meta.json`` records the md5 of each file: :meth:`CheckpointManager.load` verifies them (and a truncated
state file fails ``torch.load``), raising :class:`CorruptCheckpoint`, so the trainer falls back to the previous
checkpoint. A write that fails (a full disk above all) raises :class:`CheckpointSaveError` naming the checkpoint and
leaves the earlier checkpoints as they were.

What a checkpoint was trained on: a stage passes ``key_parts`` (``{name: JSON-able value}``: the config sections
it reads, content hashes of its input files from :func:`content_hash`, the code version from :func:`code_hash`).
The root holds ``key.json`` (:func:`resume_key` and one hash per part); resuming under a root whose ``key.json``
differs is refused: the old root is moved aside to ``<root>.stale`` (one generation kept), training starts fresh and
the warning names the parts that changed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rubricflow.grpo.engine import Engine
from rubricflow.util.hashing import code_hash, content_hash, part_hashes, resume_key  # noqa: F401  (re-exported)

_STEP_RE = re.compile(r"^step-(\d{8})$")
KEY_FILE = "key.json"

log = logging.getLogger("rubricflow.grpo.checkpoint")


class CorruptCheckpoint(Exception):
    """A checkpoint directory whose files do not match the checksums in its ``meta.json`` or do not load."""


class CheckpointSaveError(OSError):
    """A checkpoint could not be written (``errno`` is the cause's, e.g. ``errno.ENOSPC``)."""


# ----------------------------------------------------------------------------------------------------------------
# what a checkpoint was trained on


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


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
    def __init__(self, root: str | Path, keep_last: int = 2, engine: Engine | None = None,
                 key_parts: dict[str, Any] | None = None):
        if keep_last < 1:
            raise ValueError(f"keep_last: expected >= 1, got {keep_last}")
        self.root = Path(root)
        self.keep_last = keep_last
        self.engine = engine
        self.key_parts = key_parts
        self.rank = getattr(engine, "rank", 0)
        self.world_size = getattr(engine, "world_size", 1)

    def _barrier(self) -> None:
        if self.engine is not None and self.world_size > 1:
            self.engine.barrier()

    # -- what the checkpoints were trained on ------------------------------------------------------------------
    def check_key(self) -> str | None:
        """Collective: compare ``key_parts`` with the root's ``key.json``. On a mismatch move the old root aside
        to ``<root>.stale`` and warn naming the changed parts; record the current key. Returns ``"<parts> changed"``
        when resuming was refused, else None (also when no ``key_parts`` were given: nothing is checked)."""
        if self.key_parts is None:
            return None
        current = {"key": resume_key(self.key_parts), "parts": part_hashes(self.key_parts)}
        key_f = self.root / KEY_FILE
        refused, why = None, ""
        if key_f.exists():
            try:
                old = json.loads(key_f.read_text())
                old_key, old_parts = old["key"], dict(old["parts"])
            except (ValueError, KeyError, TypeError):
                refused, why = f"{KEY_FILE} unreadable", f"has an unreadable {KEY_FILE}"
            else:
                if old_key != current["key"]:
                    changed = sorted(k for k in current["parts"].keys() | old_parts.keys()
                                     if old_parts.get(k) != current["parts"].get(k)) or ["key"]
                    refused = f"{', '.join(changed)} changed"
                    why = f"was trained on a different {', '.join(changed)}"
        elif self.checkpoints():
            refused, why = f"no {KEY_FILE}", f"has no {KEY_FILE} (trained on unrecorded inputs)"
        self._barrier()  # every rank has read the old key before rank 0 moves it
        if self.rank == 0:
            if refused is not None:
                aside = self.root.with_name(self.root.name + ".stale")
                shutil.rmtree(aside, ignore_errors=True)
                os.rename(self.root, aside)
                log.warning("checkpoint %s %s; starting fresh (the old checkpoints were moved to %s)",
                            self.root, why, aside)
            from rubricflow.util.io import write_json

            self.root.mkdir(parents=True, exist_ok=True)
            write_json(key_f, current)
        self._barrier()
        return refused

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
        """Collective on all ranks: write engine state and this rank's ``state``; returns the final directory.

        Raises :class:`CheckpointSaveError` (naming the checkpoint; "the disk is full" on ENOSPC) when a write
        fails; the partial directory is removed and the earlier checkpoints are left as they were."""
        final = self.root / f"step-{step:08d}"
        tmp = self.root / f".tmp-step-{step:08d}"
        try:
            if self.rank == 0:
                self.root.mkdir(parents=True, exist_ok=True)
                for p in self.root.glob(".tmp-step-*"):
                    shutil.rmtree(p, ignore_errors=True)
                tmp.mkdir()
            self._barrier()
            t0 = time.perf_counter()
            if self.engine is not None:
                self.engine.save(tmp / "engine")
            state_f = tmp / f"state-rank{self.rank}.pt"
            torch.save(state, state_f)
            _fsync_file(state_f)
            for f in sorted((tmp / "engine").rglob("*")) if (tmp / "engine").is_dir() else []:
                if f.is_file():
                    _fsync_file(f)
            self._barrier()
            if self.rank == 0:
                files = {f.relative_to(tmp).as_posix(): _md5(f) for f in sorted(tmp.rglob("*")) if f.is_file()}
                meta = {"step": step, "world_size": self.world_size, "time": time.time(),
                        "engine": getattr(self.engine, "kind", None), "save_s": time.perf_counter() - t0,
                        "files": files}
                meta_f = tmp / "meta.json"
                meta_f.write_text(json.dumps(meta, indent=2))
                _fsync_file(meta_f)
                _fsync_dir(tmp)
                old = self.root / f".replaced-step-{step:08d}"
                if final.exists():  # the same step saved again after a resume: replace it
                    shutil.rmtree(old, ignore_errors=True)
                    os.rename(final, old)
                os.rename(tmp, final)
                _fsync_dir(self.root)
                shutil.rmtree(old, ignore_errors=True)
                for _, prev in self.checkpoints()[: -self.keep_last]:
                    shutil.rmtree(prev, ignore_errors=True)
        except (OSError, RuntimeError) as e:
            err = _save_error(final, e)  # before the partial files go: they may be what filled the disk
            shutil.rmtree(tmp, ignore_errors=True)
            raise err from e
        self._barrier()
        return final

    def verify(self, path: str | Path) -> dict:
        """``meta.json`` of ``path`` after checking each recorded file's md5; raises :class:`CorruptCheckpoint`."""
        p = Path(path)
        meta_f = p / "meta.json"
        if not meta_f.exists():
            raise FileNotFoundError(f"{p}: not a complete checkpoint (no meta.json)")
        try:
            meta = json.loads(meta_f.read_text())
            int(meta["step"])
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptCheckpoint(f"checkpoint {p} is corrupt: meta.json unreadable ({e})") from e
        for rel, md5 in (meta.get("files") or {}).items():  # checkpoints saved before checksums: no "files"
            f = p / rel
            if not f.is_file():
                raise CorruptCheckpoint(f"checkpoint {p} is corrupt: {rel} is missing")
            if _md5(f) != md5:
                raise CorruptCheckpoint(f"checkpoint {p} is corrupt: {rel} does not match its checksum")
        return meta

    def load(self, path: str | Path) -> tuple[int, dict[str, Any]]:
        """Restore the engine state from ``path`` and return ``(step, this rank's state)``. The files are verified
        (and the state read) before the engine is touched: :class:`CorruptCheckpoint` leaves the model as it was."""
        p = Path(path)
        meta = self.verify(p)
        if meta["world_size"] != self.world_size:
            raise RuntimeError(
                f"{p}: saved with world_size={meta['world_size']} but this run has {self.world_size} processes "
                "(per-rank RNG and data cursors cannot be remapped; resume with the same number of processes)"
            )
        state_f = p / f"state-rank{self.rank}.pt"
        try:
            state = torch.load(state_f, map_location="cpu", weights_only=False)
        except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
            raise CorruptCheckpoint(f"checkpoint {p} is corrupt: {state_f.name} does not load ({e})") from e
        if self.engine is not None:
            self.engine.load(p / "engine")
        return int(meta["step"]), state


def _disk_full(folder: Path, probe_bytes: int = 1 << 16) -> bool:
    """Whether ``probe_bytes`` more cannot be written in ``folder`` for lack of space (torch's zip writer reports a
    full disk as ``[enforce fail ...] unexpected pos``, without the errno)."""
    fd = None
    path = None
    try:
        fd, path = tempfile.mkstemp(prefix=".space-probe-", dir=folder)
        os.write(fd, b"\0" * probe_bytes)
        os.fsync(fd)
        return False
    except OSError as e:
        return e.errno == errno.ENOSPC
    finally:
        if fd is not None:
            os.close(fd)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _save_error(final: Path, e: BaseException) -> CheckpointSaveError:
    code = getattr(e, "errno", None)
    if code is None and isinstance(e, RuntimeError):
        probe_dir = final.with_name(f".tmp-{final.name}")
        if _disk_full(probe_dir if probe_dir.is_dir() else final.parent):
            code = errno.ENOSPC
    kept = "the earlier checkpoints are intact"
    try:
        free = f"{shutil.disk_usage(final.parent).free / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    if code == errno.ENOSPC:
        return CheckpointSaveError(errno.ENOSPC, f"checkpoint {final}: the disk is full (ENOSPC, {free}); "
                                                 f"nothing was saved and {kept}")
    return CheckpointSaveError(code or errno.EIO, f"checkpoint {final}: could not be written ({type(e).__name__}: "
                                                  f"{e}; {free}); {kept}")


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
