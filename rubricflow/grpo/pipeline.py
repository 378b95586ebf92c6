"""Generation for a pipelined step: completions handed out group by group as they are generated.

``generate_groups(backend, requests, n, ...)`` yields ``(request index, its n completions)`` in request order. A
backend with ``generate_groups`` (``models.generation``: transformers, cached) yields each group as soon as the
generation batch that completes it is done, from the very batches and samples of its ``generate``; any other backend
(vLLM) generates the whole call at once and its groups follow. A method's rollout sends each group to its reward
(e.g. a judge stream) while the next batches generate, and gathers the rewards when the batch is complete; what it
computes is the same as scoring after ``generate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def generate_groups(backend, requests: list, n: int = 1, **kw: Any) -> Iterator[tuple[int, list]]:
    """``(i, completions of requests[i])`` in order, as the backend finishes them (module docstring)."""
    stream = getattr(backend, "generate_groups", None)
    if callable(stream):
        yield from stream(requests, n=n, **kw)
        return
    for i, cs in enumerate(backend.generate(requests, n=n, **kw)):
        yield i, cs
