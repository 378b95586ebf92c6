"""Progress reporting for long work, independent of where it runs.

Code deep in rubricflow calls ``with progress("sft", total=steps) as bar: bar.advance()``. The default reporter
draws a tqdm bar on stderr (the terminal under ``dvc repro`` / the CLI); the Prefect tasks layer installs a
reporter that also updates a Prefect progress artifact, so the same code shows progress in the UI. rubricflow
itself never imports Prefect.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol


class Bar(Protocol):
    def advance(self, n: int = 1, **postfix) -> None: ...


class _TqdmBar:
    def __init__(self, desc: str, total: int | None):
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=desc, file=sys.stderr, dynamic_ncols=True, mininterval=0.5, leave=True)

    def advance(self, n: int = 1, **postfix) -> None:
        if postfix:
            self._bar.set_postfix({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items()},
                                  refresh=False)
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()


Listener = Callable[[str, int, int | None], None]  # (desc, done, total)
_listeners: list[Listener] = []


def add_listener(fn: Listener) -> None:
    """Receive (desc, done, total) updates at most every ~2 s and at the end (used for Prefect artifacts)."""
    _listeners.append(fn)


def remove_listener(fn: Listener) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


class _Tracked:
    def __init__(self, desc: str, total: int | None, bar: _TqdmBar | None):
        self.desc, self.total, self.bar, self.done = desc, total, bar, 0
        self._last = 0.0

    def advance(self, n: int = 1, **postfix) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.advance(n, **postfix)
        now = time.monotonic()
        if _listeners and (now - self._last > 2.0 or (self.total and self.done >= self.total)):
            self._last = now
            for fn in list(_listeners):
                fn(self.desc, self.done, self.total)


@contextmanager
def progress(desc: str, total: int | None = None, show: bool = True) -> Iterator[_Tracked]:
    bar = _TqdmBar(desc, total) if show else None
    tracked = _Tracked(desc, total, bar)
    try:
        yield tracked
    finally:
        if bar is not None:
            bar.close()
        for fn in list(_listeners):
            fn(desc, tracked.done, total)
