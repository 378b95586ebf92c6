"""Exceptions shared across layers (no heavy imports, so any module can raise or catch them)."""

from __future__ import annotations


class RunFailed(RuntimeError):
    """A failure whose message says what failed (naming the file, URL, port or setting) and what to do: the CLI
    prints it as one line and exits non-zero, without a traceback."""


class BackendUnavailable(RunFailed):
    """A configured optional component (vLLM, a GPU, an optional client package) is missing; the message names it
    and how to get it. Nothing falls back to another backend silently."""
