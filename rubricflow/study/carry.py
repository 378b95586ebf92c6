"""A study's progress carried between machines that share only the repository: its seeds' starts and its units'
verified results, saved under ``studies/carry/<study>/`` (committed) and restored into the study's ``out_dir``.

A study whose units need more time than one machine is held (a start per seed trained to a bar, then the seed's RL
units) runs in parts: ``save_progress`` after a part, ``restore_progress`` on the next machine, then the same
``rubricflow study`` command, which reuses what was restored exactly as it reuses what it finished itself: a start
only when built on the same inputs (``start.json``), a result only when its input hashes (code, config, data, the
start's content) match the current ones, else it runs again. Nothing is trusted for having been carried; the report
records every unit's machine and input hashes as always.

Layout under ``<root>/<study>/`` (paths relative to the study's ``out_dir``):

* ``_start/[<group>/]seed<k>.tar.gz``: a built start folder (with its ``start.json``), less the subfolders named in
  ``leave_out`` (what only the build reads, e.g. DeltaRubric's initial weights ``base``); the archive is
  byte-for-byte reproducible (sorted members, no times or owners), so saving an unchanged start rewrites nothing;
* ``_start/[<group>/]seed<k>.partial.tar.gz``: the progress of a resumable start not yet built (its
  ``.seed<k>.partial`` folder, ``seed_start.partial_dir``: a warm start's last checkpoint), so the next machine goes
  on from it instead of from the beginning; saved also beside a built start when it is a rebuild's on other
  inputs, and removed from the carry once the start built on its inputs is carried. The build uses it only where it
  was made on the start's current inputs;
* ``<variant>/seed<k>.json``: a unit's ``result.json`` as written (with its checksum).

Restoring never replaces what the machine has: a start folder with a ``start.json`` and a unit with a
``result.json`` are kept. A carried file that is damaged (an archive that does not open or holds a member outside
its folder, a result whose checksum fails) is an error naming the file, so a part of the study is never dropped
silently. A partial start is restored where the machine has no partial folder of its own and not the start it led to
(a start built on the partial's inputs).
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rubricflow.study.adapter import Unit
from rubricflow.study.harness import RESULT_FILE, plan, unit_dir, unit_start_dir
from rubricflow.study.seed_start import (
    PARTIAL_INPUTS,
    START_FILE,
    partial_dir,
    read_partial_inputs,
    read_start,
    start_lock,
    start_lock_now,
)
from rubricflow.study.spec import StudySpec
from rubricflow.study.units import locked, peek_result

CARRY_ROOT = Path("studies") / "carry"
ARCHIVE_SUFFIX = ".tar.gz"
PARTIAL_SUFFIX = ".partial" + ARCHIVE_SUFFIX


class CarryError(ValueError):
    """A carried file that cannot be restored (damaged, or not what it claims to be)."""


def _units(spec: StudySpec, units: Sequence[Unit] | None) -> list[Unit]:
    return list(units) if units is not None else plan(spec)


def _start_dirs(spec: StudySpec, units: Iterable[Unit]) -> list[Path]:
    """The start folders of ``units`` (once each, in order), relative to ``spec.out_dir``; none without starts."""
    if not spec.per_seed_start:
        return []
    out = Path(spec.out_dir)
    return list(dict.fromkeys(unit_start_dir(spec, u).relative_to(out) for u in units))


def _unit_rel(spec: StudySpec, unit: Unit) -> Path:
    return unit_dir(spec, unit).relative_to(spec.out_dir)


def archive_bytes(folder: Path, leave_out: Sequence[str] = ()) -> bytes:
    """A reproducible ``.tar.gz`` of the files under ``folder`` (paths relative to it, sorted; no times, owners or
    modes beyond 0644/0755), less the top-level subfolders ``leave_out``. Links and other special files are refused
    (a start holds plain files)."""
    members: list[Path] = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if rel.parts[0] in leave_out:
            continue
        if p.is_symlink() or not (p.is_file() or p.is_dir()):
            raise CarryError(f"{p}: not a plain file or folder; a start to carry holds plain files")
        members.append(rel)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in members:
                info = tarfile.TarInfo(rel.as_posix())
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                src = folder / rel
                if src.is_dir():
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    data = src.read_bytes()
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _write_if_changed(path: Path, data: bytes) -> bool:
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def save_progress(spec: StudySpec, name: str, root: str | Path = CARRY_ROOT, leave_out: Sequence[str] = (),
                  units: Sequence[Unit] | None = None) -> dict[str, Any]:
    """Save the built starts and the verified results of ``units`` (default: every unit of ``spec``) under
    ``root/name``; a file already there with the same bytes is left as it is. Returns what was written and what
    was already there (paths relative to ``root/name``), the units without a result (not finished, or a result
    that fails its checksum: not carried), the carried partial starts removed (their start is carried now) and the
    starts whose progress was not carried because a build is running on them (``building``: stop the study first)."""
    units = _units(spec, units)
    out, dest = Path(spec.out_dir), Path(root) / name
    written, same, unfinished = [], [], []
    removed: list[str] = []
    building: list[str] = []
    for rel in _start_dirs(spec, units):
        folder = out / rel
        target = dest / rel.with_name(rel.name + ARCHIVE_SUFFIX)
        carried_partial = dest / rel.with_name(rel.name + PARTIAL_SUFFIX)
        with start_lock_now(folder) as free:  # never while a build writes the start or its checkpoints
            if not free:
                building.append(rel.as_posix())
                continue
            start = read_start(folder)  # None: not built (start.json is written last)
            inputs = read_partial_inputs(partial_dir(folder))
            start_data = archive_bytes(folder, leave_out) if start is not None else None
            # the progress of a build not finished, also of a rebuild on other inputs than the start's
            partial_data = (archive_bytes(partial_dir(folder)) if inputs is not None
                            and (start is None or start.get("inputs") != inputs) else None)
        for data, path in ((start_data, target), (partial_data, carried_partial)):
            if data is not None:
                (written if _write_if_changed(path, data) else same).append(path.relative_to(dest).as_posix())
        if start is not None and partial_data is None and carried_partial.exists():  # the start's progress, done
            carried_partial.unlink()
            removed.append(carried_partial.relative_to(dest).as_posix())
    for u in units:
        src = out / _unit_rel(spec, u) / RESULT_FILE
        result, _ = peek_result(src)
        if result is None:
            unfinished.append(u.key)
            continue
        target = dest / _unit_rel(spec, u).with_suffix(".json")
        (written if _write_if_changed(target, src.read_bytes()) else same).append(target.relative_to(dest).as_posix())
    return {"study": name, "carry_dir": str(dest), "written": written, "unchanged": same, "removed": removed,
            "unfinished": unfinished, "building": building, "left_out": list(leave_out)}


def _extract(archive: Path, folder: Path, marker: str = START_FILE) -> None:
    """Unpack ``archive`` into a fresh sibling of ``folder``, check it holds ``marker`` (a start's ``start.json``, a
    partial start's ``inputs.json``), rename it into place."""
    tmp = folder.parent / f".carry-{folder.name.lstrip('.')}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        try:
            with tarfile.open(archive, mode="r:gz") as tar:
                tar.extractall(tmp, filter="data")  # refuses absolute paths, '..', links out of the folder
        except (tarfile.TarError, OSError, EOFError) as e:
            raise CarryError(f"{archive}: not a start archive that can be unpacked ({e})") from None
        if marker == START_FILE and read_start(tmp) is None:
            raise CarryError(f"{archive}: holds no readable {START_FILE}; expected a built start folder")
        if marker == PARTIAL_INPUTS and read_partial_inputs(tmp) is None:
            raise CarryError(f"{archive}: holds no readable {PARTIAL_INPUTS}; expected a partial start folder")
        if folder.exists():  # a half-built or unfinished folder without start.json: replaced
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def restore_progress(spec: StudySpec, name: str, root: str | Path = CARRY_ROOT,
                     units: Sequence[Unit] | None = None) -> dict[str, Any]:
    """Restore the starts and results saved under ``root/name`` for ``units`` (default: every unit of ``spec``)
    into ``spec.out_dir``, keeping every start and result this machine already has. Returns what was restored, what
    was kept, and the units with nothing carried. Raises ``CarryError`` naming a damaged carried file."""
    units = _units(spec, units)
    out, src = Path(spec.out_dir), Path(root) / name
    if not src.is_dir():
        raise CarryError(f"{src}: no carried progress of study {name} (save it with `rubricflow study-carry save "
                         f"{name}`)")
    restored, kept, absent = [], [], []
    for rel in _start_dirs(spec, units):
        archive = src / rel.with_name(rel.name + ARCHIVE_SUFFIX)
        folder = out / rel
        if archive.exists():
            with start_lock(folder):  # the lock ensure_start holds
                if read_start(folder) is not None:
                    kept.append(rel.as_posix())
                else:
                    _extract(archive, folder)
                    restored.append(rel.as_posix())
        partial = src / rel.with_name(rel.name + PARTIAL_SUFFIX)
        if not partial.exists():
            continue
        local = partial_dir(folder)
        with start_lock(folder):
            if local.exists():  # this machine's own progress
                kept.append(local.relative_to(out).as_posix())
                continue
            _extract(partial, local, PARTIAL_INPUTS)
            start = read_start(folder)
            if start is not None and start.get("inputs") == read_partial_inputs(local):
                shutil.rmtree(local)  # the start it led to is here: nothing to go on from
                continue
        restored.append(local.relative_to(out).as_posix())
    for u in units:
        carried = src / _unit_rel(spec, u).with_suffix(".json")
        if not carried.exists():
            absent.append(u.key)
            continue
        result, problem = peek_result(carried)
        if result is None:
            raise CarryError(f"{carried}: the carried result of {u.key} {problem}; restore it from git "
                             "(`git checkout -- <file>`) or delete it to run the unit again")
        udir = out / _unit_rel(spec, u)
        with locked(udir / ".lock", f"unit {u.key} of study {name}"):  # the lock run_unit holds
            if (udir / RESULT_FILE).exists():
                kept.append(u.key)
                continue
            _write_if_changed(udir / RESULT_FILE, carried.read_bytes())
        restored.append(u.key)
    return {"study": name, "carry_dir": str(src), "restored": restored, "kept": kept, "not_carried": absent}
