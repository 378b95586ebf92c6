"""Atomic file writes shared by every stage and module of the core package, and the one JSONL reader.

Each writer goes to a temporary file in the destination's directory (``.<name>.tmp``), flushes and fsyncs it and
``os.replace``-s it into place, so a reader sees either the previous file or the complete new one. If anything
fails on the way (serialising, writing, syncing) the temporary file is removed and the exception propagates; the
previous file is left untouched. Parent directories are created as needed.

``staged_dir`` does the same for a whole directory of outputs.

A full disk is named: a write that fails with ENOSPC raises :class:`DiskFull` (an ``OSError``, errno ENOSPC) whose
message names the file (or output folder) and the free space, and the CLI prints it as one line.
:func:`require_writable` checks an output folder before a stage starts its work.

The keyword arguments of ``write_json`` / ``write_jsonl`` / ``write_parquet`` exist so each call site keeps its
file format byte for byte (indent, key order, ASCII escaping, trailing newline). Text is encoded as UTF-8 and
written without newline translation.

:func:`iter_jsonl` / :func:`read_jsonl` read JSONL back with one error style: a line that is not JSON raises the
caller's error class with ``<file>:<line>: not valid JSON (<why>)``; blank lines are skipped. A caller checking
the fields of a row names the same ``<file>:<line>`` (the line number comes with each row).

:func:`save_figure` is the one way a matplotlib figure reaches a file (laid out, written atomically, closed);
:func:`figure_bytes` renders one in memory.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "DiskFull",
    "NotWritable",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "staged_dir",
    "write_json",
    "write_jsonl",
    "write_parquet",
    "iter_jsonl",
    "read_jsonl",
    "save_figure",
    "figure_bytes",
    "require_writable",
]


class DiskFull(OSError):
    """A write failed for lack of space (errno ENOSPC); the message names what was being written."""

    def __init__(self, path: str | Path, what: str = "nothing was written; the previous file is untouched"):
        path = Path(path)
        super().__init__(errno.ENOSPC, f"{path}: the disk is full (ENOSPC, {free_space(path)}); {what}")
        self.filename = str(path)

    def __str__(self) -> str:
        return self.strerror


class NotWritable(PermissionError):
    """An output folder that cannot be written (checked before a stage does its work)."""


def free_space(path: str | Path) -> str:
    """``"<n> MiB free"`` on the filesystem of ``path`` (its nearest existing parent), or ``"free space unknown"``."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return f"{shutil.disk_usage(p).free / 2**20:.0f} MiB free"
    except OSError:
        return "free space unknown"


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno == errno.ENOSPC


def require_writable(folder: str | Path, what: str) -> Path:
    """Check that a file can be written in ``folder`` (or, while it does not exist yet, in its nearest existing
    parent, where it will be created); nothing is created. Raises :class:`NotWritable` naming ``what`` (the setting)
    and the folder, or :class:`DiskFull`, so a stage fails before its work rather than after it."""
    folder = Path(folder)
    target = folder
    while not target.exists() and target != target.parent:
        target = target.parent
    try:
        if not target.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{target} is not a folder")
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=target)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if is_disk_full(e):
            raise DiskFull(folder, "no output can be written") from None
        where = "" if target == folder else f" (its parent {target} cannot take it)"
        raise NotWritable(f"{what}: {folder} is not a writable folder{where}: {e.strerror or e}") from None
    return folder


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
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e) and not isinstance(e, DiskFull):
            raise DiskFull(path) from e
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


JSON_TOO_DEEP = "JSON nested too deeply to be read (a record is an object of a few levels)"


def iter_jsonl(path: str | Path, *, error: Callable[[str], Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of the JSONL file ``path`` (UTF-8), streamed; a line that is
    not JSON (or nests too deeply to parse) raises ``error("<path>:<line>: not valid JSON (<why>)")``."""
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise error(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            except RecursionError:
                raise error(f"{path}:{lineno}: {JSON_TOO_DEEP}") from None
            yield lineno, value


def read_jsonl(path: str | Path, *, error: Callable[[str], Exception] = ValueError) -> list[Any]:
    """Every value of the JSONL file ``path`` (see :func:`iter_jsonl` for blank lines and errors)."""
    return [value for _, value in iter_jsonl(path, error=error)]


def save_figure(fig: Any, path: str | Path, *, dpi: float | None = None) -> Path:
    """Lay out the matplotlib figure ``fig`` (``tight_layout``), write it atomically to ``path`` (the format from
    the suffix, which the temporary name keeps) at ``dpi`` (None: matplotlib's default) and close it, also when
    writing fails."""
    import matplotlib.pyplot as plt  # only where a figure exists, so pyplot is loaded already

    path = Path(path)
    try:
        fig.tight_layout()
        with atomic_path(path, suffix=path.suffix) as tmp:
            fig.savefig(tmp, **({} if dpi is None else {"dpi": dpi}))
    finally:
        plt.close(fig)
    return path


def figure_bytes(fig: Any, fmt: str = "png") -> bytes:
    """The matplotlib figure ``fig``, laid out and rendered as ``fmt`` in memory; the figure is closed."""

    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        return buf.getvalue()
    finally:
        plt.close(fig)


def write_parquet(path: str | Path, table_or_df: Any, **kw: Any) -> Path:
    """Write a ``pyarrow.Table`` (or a pandas DataFrame, converted with ``pa.Table.from_pandas``) as Parquet,
    atomically; ``kw`` goes to ``pyarrow.parquet.write_table``. The file is built in memory and written in one go."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = table_or_df if isinstance(table_or_df, pa.Table) else pa.Table.from_pandas(table_or_df)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **kw)
    return atomic_write_bytes(path, sink.getvalue().to_pybytes())


def _own_sibling(final: Path, kind: str) -> Path:
    """A new, empty folder next to ``final`` created by this call: ``.<name>.<kind>`` when that name is free, else
    ``.<name>.<kind>-<random>``. A folder already there is never reused or removed: it may be someone else's."""
    preferred = final.with_name(f".{final.name}.{kind}")
    try:
        preferred.mkdir()
        return preferred
    except FileExistsError:
        return Path(tempfile.mkdtemp(prefix=f".{final.name}.{kind}-", dir=final.parent))


@contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """Yield a staging directory ``.<name>.staging`` next to ``final``; on success it replaces ``final`` (the old
    directory is moved aside, the staging one renamed into place, the old one removed). On an exception the
    staging directory is removed and ``final`` is untouched. Only folders this call created are removed: a
    ``.<name>.staging`` or ``.<name>.old`` already there (another tool's, or left by a killed run) is left alone and
    a fresh uniquely named one is used instead."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = _own_sibling(final, "staging")
    try:
        yield staging
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(e) and not isinstance(e, DiskFull):
            raise DiskFull(final, "nothing was written; the previous outputs are untouched") from e
        raise
    if final.exists():
        old = _own_sibling(final, "old")  # empty and ours: the old outputs are renamed onto it
        final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(final)
