"""A seed that covers the whole chain: the start a study's units train from (a warm start, its tiers, ...) built once
per seed, shared by that seed's variants so per-seed differences stay paired.

With ``study.<name>.per_seed_start``, the method's ``StudyMethod.seed_start`` says how: ``overrides`` point a unit's
config at ``<out_dir>/_start/seed<k>/`` (``<out_dir>/_start/<group>/seed<k>/`` for the variants of a start group,
``study.<name>.start_groups``: e.g. one warm-start recipe each), ``inputs`` are what the start depends on, ``build``
makes it. The first unit of a seed to need the start builds it under a lock (units of one seed may run side by side,
in threads, processes or on Ray workers sharing the folder); the others wait and reuse it. A start is rebuilt when
its inputs changed, never reused half-written: it is built in a temporary folder, its ``start.json`` (the inputs'
hashes and the build's summary) written last, and renamed into place. A resumable start (``SeedStart.resumable``)
checkpoints into ``<parent>/.seed<k>.partial/`` (``partial_dir``), which records the inputs it was made on: a build
that finds it on the same inputs goes on from it, one on other inputs empties it first; it is removed once the start
is in place.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rubricflow.study.adapter import SeedStart
from rubricflow.util.hashing import code_hash, part_hashes
from rubricflow.util.io import write_json

START_FILE = "start.json"


def start_dir(out_dir: str | Path, seed: int, group: str | None = None) -> Path:
    """``<out_dir>/_start/seed<k>``, or ``<out_dir>/_start/<group>/seed<k>`` for a start group (``start_groups``)."""
    root = Path(out_dir) / "_start"
    return (root if group is None else root / group) / f"seed{seed}"


@contextlib.contextmanager
def _locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on ``path``, yielding True; with ``wait`` False, yield False at once where another
    process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            # released when the file closes, also if this process dies
            fcntl.flock(fh, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _lock_path(directory: Path) -> Path:
    return directory.parent / f".{directory.name}.lock"


def start_lock(directory: Path) -> contextlib.AbstractContextManager[bool]:
    """The lock held while the start in ``directory`` is read, built or put in place (``<parent>/.seed<k>.lock``)."""
    return _locked(_lock_path(directory))


def start_lock_now(directory: Path) -> contextlib.AbstractContextManager[bool]:
    """``start_lock`` if it is free now (yields True, held until the block ends), else yields False at once: a build
    holds it (e.g. a study still running on this machine)."""
    return _locked(_lock_path(directory), wait=False)


def partial_dir(directory: Path) -> Path:
    """Where a resumable start in ``directory`` keeps its progress while it is built (``<parent>/.seed<k>.partial``)."""
    return directory.parent / f".{directory.name}.partial"


PARTIAL_INPUTS = "inputs.json"  # in a partial folder: the inputs its progress was made on


def read_partial_inputs(partial: Path) -> dict | None:
    try:
        return json.loads((partial / PARTIAL_INPUTS).read_text()).get("inputs")
    except (OSError, ValueError, AttributeError):
        return None


def _partial_for(partial: Path, seed: int, inputs: dict[str, str]) -> Path:
    """``partial`` ready for a build on ``inputs``: kept where it was made on them, else emptied (and said so)."""
    if partial.exists() and read_partial_inputs(partial) != inputs:
        print(f"study: the partial start of seed {seed} in {partial} was made on other inputs; starting it over",
              flush=True)
        shutil.rmtree(partial)
    partial.mkdir(parents=True, exist_ok=True)
    if not (partial / PARTIAL_INPUTS).exists():
        write_json(partial / PARTIAL_INPUTS, {"seed": seed, "inputs": inputs})
    return partial


def start_inputs(ss: SeedStart, ucfg: Any, seed: int) -> dict[str, str]:
    return part_hashes({**ss.inputs(ucfg, seed), "code": code_hash(*ss.code)})


def read_start(directory: Path) -> dict | None:
    try:
        return json.loads((directory / START_FILE).read_text())
    except (OSError, ValueError):
        return None


def ensure_start(ss: SeedStart, ucfg: Any, seed: int, directory: Path) -> dict:
    """The start of ``seed`` in ``directory``: reused when built on the same inputs, else (re)built; returns its
    ``start.json``."""
    inputs = start_inputs(ss, ucfg, seed)
    with start_lock(directory):
        done = read_start(directory)
        if done is not None and done.get("inputs") == inputs:
            return done
        if done is not None:
            changed = sorted(k for k in set(inputs) | set(done.get("inputs") or {})
                             if (done.get("inputs") or {}).get(k) != inputs.get(k))
            print(f"study: the start of seed {seed} was built on other inputs ({', '.join(changed)} changed); "
                  "rebuilding it", flush=True)
        tmp = directory.parent / f".tmp-seed{seed}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        partial = _partial_for(partial_dir(directory), seed, inputs) if ss.resumable else None
        try:
            summary = (ss.build(ucfg, seed, tmp, directory, partial) if partial is not None
                       else ss.build(ucfg, seed, tmp, directory))
            record = {"seed": seed, "inputs": inputs, "summary": summary}
            write_json(tmp / START_FILE, record)
            if directory.exists():
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        return record


def seed_starts(out_dir: str | Path, seeds: list[int], group: str | None = None) -> dict[int, dict]:
    """``seed -> start.json`` of the starts built so far (for the report), of the default start or of ``group``."""
    out = {}
    for s in seeds:
        rec = read_start(start_dir(out_dir, s, group))
        if rec is not None:
            out[s] = rec
    return out
