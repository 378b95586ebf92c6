"""What keeps a study's units whole when runs overlap or files are damaged: locks, verified results, checked plans.

* :func:`locked` holds an exclusive ``fcntl`` lock on a file for the block (released when the file closes, also
  when the process dies). The harness holds one per unit (``<unit dir>/.lock``) while it reads, runs and writes
  the unit, so two ``study`` processes never run one unit at once (the second waits, then reuses the result),
  and one per study report while it is written.
* :func:`write_result` writes ``result.json`` atomically with a SHA-256 checksum of its content (``sha256``);
  :func:`load_result` verifies it: a file that is truncated, not a JSON object, without a checksum, or whose
  content does not match it (a hand edit) is renamed ``result.corrupt.json``, named in a one-line warning, and
  the unit runs again. The checksum detects damage and naive edits, not a deliberate edit that recomputes it: it is
  not a signature. What a report's numbers were computed from is pinned by the unit's input hashes and the report's
  commit (:mod:`rubricflow.study.provenance`), and a result file is a local artifact, not evidence by itself.
* :func:`check_selection` refuses, at planning, an empty, repeated, unknown or out-of-range seed or variant
  (``--seeds ,`` used to run every default seed); seeds must lie in ``[0, 2**32 - 1]`` (numpy's range).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rubricflow.sections import ConfigError
from rubricflow.study.spec import MAX_SEED
from rubricflow.util.io import write_json

CHECKSUM_KEY = "sha256"
CORRUPT_FILE = "result.corrupt.json"


@contextlib.contextmanager
def locked(path: str | Path, what: str) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing) for the block; waits, saying so once, while another
    process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"study: {what} is in use by another process (lock {path}); waiting for it", file=sys.stderr,
                  flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _digest(result: dict[str, Any]) -> str:
    body = {k: v for k, v in result.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def write_result(path: str | Path, result: dict[str, Any]) -> Path:
    """``result`` (JSON-safe) written atomically with its checksum."""
    body = {k: v for k, v in result.items() if k != CHECKSUM_KEY}
    body = json.loads(json.dumps(body, default=str))  # the checksum covers what a reader will load
    return write_json(path, {**body, CHECKSUM_KEY: _digest(body)})


def _problem(path: Path) -> tuple[dict | None, str | None]:
    try:
        text = path.read_text()
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})"
    try:
        obj = json.loads(text)
    except ValueError as e:
        return None, f"is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}; truncated?)"
    if not isinstance(obj, dict):
        return None, f"holds a JSON {type(obj).__name__}, not a result object"
    if CHECKSUM_KEY not in obj:
        return None, "has no checksum"
    if obj[CHECKSUM_KEY] != _digest(obj):
        return None, "does not match its checksum (edited or damaged)"
    return obj, None


def peek_result(path: str | Path) -> tuple[dict | None, str | None]:
    """The verified result at ``path`` (without its checksum) or None with the reason; moves nothing (for
    ``report_only``)."""
    path = Path(path)
    if not path.exists():
        return None, "has not finished"
    obj, problem = _problem(path)
    return ({k: v for k, v in obj.items() if k != CHECKSUM_KEY}, None) if problem is None else (None, problem)


def load_result(path: str | Path) -> dict | None:
    """The verified result at ``path`` without its checksum, or None (no file; or a bad one, moved aside to
    ``result.corrupt.json`` with a one-line warning, so the unit runs again)."""
    path = Path(path)
    if not path.exists():
        return None
    obj, problem = _problem(path)
    if problem is None:
        return {k: v for k, v in obj.items() if k != CHECKSUM_KEY}
    aside = path.with_name(CORRUPT_FILE)
    os.replace(path, aside)
    print(f"study: warning: {path} {problem}; moved to {aside.name}, the unit runs again", file=sys.stderr,
          flush=True)
    return None


def check_selection(name: str, seeds: Sequence[int] | None, variants: Sequence[str] | None,
                    known_variants: Sequence[str]) -> None:
    """Refuse a selection naming no seed or variant, repeating one, naming an unknown variant or a seed out of
    ``[0, MAX_SEED]`` (``None``: the section's defaults)."""
    for what, items in (("seeds", seeds), ("variants", variants)):
        if items is None:
            continue
        if len(items) == 0:
            raise ConfigError(f"study {name}: the {what} given name no {what[:-1]} (omit the option for the "
                              f"section's {what})")
        repeated = sorted({x for x in items if list(items).count(x) > 1}, key=str)
        if repeated:
            raise ConfigError(f"study {name}: {what} {list(items)} repeat {repeated}")
    if seeds is not None:
        bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED]
        if bad:
            raise ConfigError(f"study {name}: seeds must be integers from 0 to {MAX_SEED}, got {bad}")
    if variants is not None:
        unknown = [v for v in variants if v not in known_variants]
        if unknown:
            raise ConfigError(f"study {name}: variants {unknown} are not defined; known: {sorted(known_variants)}")
