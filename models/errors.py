"""Exceptions shared across layers (no heavy imports, so any module can raise or catch them)."""

from __future__ import annotations


class BackendUnavailable(RuntimeError):
    """A configured optional component (vLLM, a GPU, an optional client package) is missing; the message names it
    and how to get it. Nothing falls back to another backend silently."""
