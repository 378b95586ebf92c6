"""Choose on ``val``, report on ``test``: a guard that keeps the ``test`` split away from every stage but the final
evaluations.

The stage framework (``rubricflow.pipeline.stage``) runs every stage not declared ``@stage(reads_test=True)`` inside
:func:`forbid_test_split`; the readers of held-out rows (``rubricflow.data.schema.read_dataset``,
``rubricflow.data.pairs.read_pairs``, RoRo's problem sets) call :func:`check_split` and raise
:class:`TestSplitAccess` naming the stage when a guarded stage asks for ``test`` rows, or for all rows at once.
So a training or selection stage cannot look at ``test``, by construction, not by review.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

HELD_OUT = "test"
_guarded_stage: ContextVar[str | None] = ContextVar("rubricflow_test_guard", default=None)


class TestSplitAccess(RuntimeError):
    """A stage that trains or selects asked for the test split (only final evaluation stages may read it)."""

    __test__ = False  # not a pytest test class


@contextmanager
def forbid_test_split(stage: str) -> Iterator[None]:
    """Within this block, reading ``test`` rows (or every split at once) raises ``TestSplitAccess``."""
    token = _guarded_stage.set(stage)
    try:
        yield
    finally:
        _guarded_stage.reset(token)


def guarded_stage() -> str | None:
    return _guarded_stage.get()


def check_split(split: str | None, what: str) -> None:
    """Raise if the running stage may not read ``split`` of ``what`` (``None`` = all splits, test included)."""
    stage = _guarded_stage.get()
    if stage is not None and (split is None or split == HELD_OUT):
        asked = "every split (test included)" if split is None else "the test split"
        raise TestSplitAccess(
            f"stage {stage}: read {asked} of {what}; only the final evaluation stages read test "
            "(choose on val, report on test; see rubricflow/pipeline/splits.py)"
        )
