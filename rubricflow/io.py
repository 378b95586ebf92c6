"""Atomic file writes shared by every stage and module of the core package.

Each writer goes to a temporary file in the destination's directory (``.<name>.tmp``), flushes and fsyncs it and
``os.replace``-s it into place, so a reader sees either the previous file or the complete new one. If anything
fails on the way (serialising, writing, syncing) the temporary file is removed and the exception propagates; the
previous file is left untouched. Parent directories are created as needed.

``staged_dir`` does the same for a whole directory of outputs.

The keyword arguments of ``write_json`` / ``write_jsonl`` / ``write_parquet`` exist so each call site keeps its
file format byte for byte (indent, key order, ASCII escaping, trailing newline). Text is encoded as UTF-8 and
written without newline translation.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "staged_dir",
    "write_json",
    "write_jsonl",
    "write_parquet",
]


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path`` for a writer that wants a file name (pyarrow, matplotlib).

    When the block ends normally the temporary file is fsynced and renamed onto ``path``; when it raises, the
    temporary file is removed and ``path`` is untouched. ``suffix`` is appended to the temporary name for writers
    that infer the format from the extension (``suffix=".png"`` gives ``.<name>.tmp<pid>.png``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}{suffix}")  # per process: ranks may write the same file
    try:
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path`` as a ``Path``."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return path


def atomic_write_text(path: str | Path, text: str, *, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (encoded with ``encoding``, no newline translation)."""
    return atomic_write_bytes(path, text.encode(encoding))


def write_json(
    path: str | Path,
    obj: Any,
    *,
    indent: int | None = 2,
    sort_keys: bool = True,
    default: Callable[[Any], Any] | None = str,
    ensure_ascii: bool = True,
    trailing_newline: bool = False,
) -> Path:
    """``json.dumps(obj, ...)`` written atomically. The defaults are the format of the stage reports
    (``indent=2, sort_keys=True, default=str``, no trailing newline); ``default=None`` makes objects JSON cannot
    encode an error instead of their ``str``. ``obj`` is serialised before anything touches the disk."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, default=default, ensure_ascii=ensure_ascii)
    return atomic_write_text(path, text + "\n" if trailing_newline else text)


def write_jsonl(path: str | Path, rows: Iterable[Any], **dumps_kw: Any) -> Path:
    """One ``json.dumps(row, **dumps_kw)`` per line, each ending in ``\\n``, written atomically (streamed: the rows
    are not held in memory as one string)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            for row in rows:
                f.write(json.dumps(row, **dumps_kw) + "\n")
    return path


def write_parquet(path: str | Path, table_or_df: Any, **kw: Any) -> Path:
    """Write a ``pyarrow.Table`` (or a pandas DataFrame, converted with ``pa.Table.from_pandas``) as Parquet,
    atomically; ``kw`` goes to ``pyarrow.parquet.write_table``. The file is built in memory and written in one go."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = table_or_df if isinstance(table_or_df, pa.Table) else pa.Table.from_pandas(table_or_df)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **kw)
    return atomic_write_bytes(path, sink.getvalue().to_pybytes())


@contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """Yield a staging directory ``.<name>.staging`` next to ``final``; on success it replaces ``final`` (the old
    directory is moved aside, the staging one renamed into place, the old one removed). On an exception the
    staging directory is removed and ``final`` is untouched."""
    final = Path(final)
    staging = final.with_name(f".{final.name}.staging")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
