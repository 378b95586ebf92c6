"""Content hashes: what a checkpoint, a stage or a study unit was made from.

* :func:`path_hash` / :func:`content_hash`: md5 of a file, or of a directory's files, memoised by (path, size,
  mtime, inode) in ``.rubricflow/filehash.sqlite`` as DVC's state db does, so an unchanged large checkpoint is not
  re-read;
* :func:`code_hash`: the ``.py`` files of modules or packages (the version of the code, independent of git);
* :func:`part_hashes` / :func:`resume_key`: one short hash per named part, and one over all of them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from rubricflow.util.env import STATE_DIR

MISSING = "<missing>"


class HashMemo:
    """``(path, size, mtime_ns, inode) -> md5`` in a small SQLite file (safe across processes)."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path or STATE_DIR / "filehash.sqlite")
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            self._db.execute(
                "create table if not exists h (path text primary key, size int, mtime int, ino int, md5 text)"
            )
        return self._db

    def md5(self, path: Path) -> str:
        st = path.stat()
        key = str(path.resolve())
        with self._lock:
            db = self._conn()
            row = db.execute("select size, mtime, ino, md5 from h where path = ?", (key,)).fetchone()
            if row and tuple(row[:3]) == (st.st_size, st.st_mtime_ns, st.st_ino):
                return row[3]
        h = hashlib.md5()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        with self._lock:
            db = self._conn()
            db.execute(
                "insert or replace into h values (?, ?, ?, ?, ?)", (key, st.st_size, st.st_mtime_ns, st.st_ino, digest)
            )
            db.commit()
        return digest


_memo = HashMemo()


def path_hash(path: str | Path, memo: HashMemo | None = None) -> str:
    """md5 of a file, or of the sorted (relative path, md5) list of a directory's files; ``<missing>`` if absent."""
    memo = memo or _memo
    p = Path(path)
    if p.is_file():
        return memo.md5(p)
    if p.is_dir():
        h = hashlib.md5()
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            h.update(f"{f.relative_to(p).as_posix()}\0{memo.md5(f)}\n".encode())
        return h.hexdigest() + ".dir"
    return MISSING


def _hash_value(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def part_hashes(parts: dict[str, Any]) -> dict[str, str]:
    """One short hash per part (what ``key.json`` records)."""
    return {k: _hash_value(v) for k, v in sorted(parts.items())}


def resume_key(parts: dict[str, Any]) -> str:
    """Hash of every part that decides a training trajectory (see the module docstring)."""
    return _hash_value(part_hashes(parts))


def content_hash(path: str | Path) -> str:
    """md5 of a file or a directory's files (memoised by size, mtime and inode); ``<missing>`` if absent."""
    return path_hash(path)


def code_hash(*targets: str | Path) -> str:
    """Content hash of the ``.py`` files of modules or packages (dotted names) or of paths (files or folders):
    the version of the training code, independent of git. A target written ``-<module or path>`` leaves that file or
    folder out of the others (e.g. a package's study declarations, which reach a unit through its config, not its
    code)."""
    skip: set[Path] = set()
    for t in targets:
        if str(t).startswith("-"):
            p = _target_path(str(t)[1:])
            if not p.exists():  # a typo would exclude nothing, silently
                raise FileNotFoundError(f"code_hash: nothing to leave out at {t} ({p} does not exist)")
            skip |= {f.resolve() for f in _files(p)}
    h = hashlib.sha256()
    for t in targets:
        if str(t).startswith("-"):
            continue
        p = _target_path(t)
        for f in _files(p):
            if f.resolve() in skip:
                continue
            rel = f.relative_to(p).as_posix() if p.is_dir() else f.name
            h.update(f"{t}:{rel}\0".encode())
            h.update(f.read_bytes() if f.is_file() else b"<missing>")
    return h.hexdigest()[:16]


def _target_path(t: str | Path) -> Path:
    return Path(t) if isinstance(t, Path) or "/" in str(t) else _module_path(str(t))


def _files(p: Path) -> list[Path]:
    return sorted(p.rglob("*.py")) if p.is_dir() else [p]


def _module_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"code_hash: no module {name!r}")
    origin = Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin
