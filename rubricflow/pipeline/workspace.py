"""The project's DVC workspace, shared by the CLI's ``repro`` (flows.repro) and the Prefect pipeline tasks (tasks):
one writer at a time (:class:`ProjectLock`), and the opt-in pipelines DVC sees only when asked (:func:`opt_in`).
Prefect-free, so both layers above import it from here."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path


class ReproBusy(RuntimeError):
    """Another ``rubricflow repro`` runs in this project."""


# Opt-in pipelines: hidden from DVC by the root .dvcignore until an untracked <dir>/.dvcignore re-includes them.
OPT_IN = {"studies": "studies/dvc.yaml", "smol": "smol/dvc.yaml"}
OPT_IN_TEXT = ("# Written by `rubricflow opt-in {name}` (untracked): DVC sees this opt-in pipeline "
               "(the root .dvcignore hides it). `rubricflow opt-in {name} --off` hides it again.\n"
               "!dvc.yaml\n!dvc.lock\n")


def opt_in(name: str, on: bool = True, root: Path | None = None) -> bool:
    """Make DVC see (``on``) or no longer see the opt-in pipeline ``name`` (a key of ``OPT_IN``) in the project at
    ``root`` (default: the current directory, where DVC runs); True if changed."""
    if name not in OPT_IN:
        raise ValueError(f"{name!r} is not an opt-in pipeline (one of: {', '.join(sorted(OPT_IN))})")
    marker = (root or Path.cwd()) / Path(OPT_IN[name]).parent / ".dvcignore"
    if on:
        if marker.exists():
            return False
        marker.write_text(OPT_IN_TEXT.format(name=name))
        return True
    if not marker.exists():
        return False
    marker.unlink()
    return True


def opt_in_targets(targets: list[str], report: Callable[[str], None] = print, root: Path | None = None) -> None:
    """Opt in to every opt-in pipeline a target names (``smol/dvc.yaml``, ``studies/dvc.yaml:rucl_study``)."""
    for t in targets:
        for name, dvc_file in OPT_IN.items():
            if (t == Path(dvc_file).parent.as_posix() or t.split(":")[0] == dvc_file) and opt_in(name, root=root):
                report(f"opted in to the {name} pipeline ({Path(dvc_file).parent / '.dvcignore'}): DVC sees {dvc_file}")


class ProjectLock:
    """An exclusive, non-blocking lock on ``path`` holding the owner's pid; ``ReproBusy`` when another holds it."""

    def __init__(self, path: Path):
        self.path = path
        self.fh = None

    def __enter__(self) -> "ProjectLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            owner = fh.read().strip() or "unknown"
            fh.close()
            raise ReproBusy(f"another rubricflow repro is running in this project (pid {owner}; lock {self.path}); "
                            "wait for it to finish or stop it, then run again") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self.fh = fh
        return self

    def __exit__(self, *exc) -> None:
        assert self.fh is not None
        self.fh.seek(0)
        self.fh.truncate()
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
