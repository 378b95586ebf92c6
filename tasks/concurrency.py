"""The global concurrency limit on judge calls.

Every task of a judge-calling stage (rubric stratification, RuCL training with rubric rewards, judge-based
evaluation: the stages declared with ``@stage(judge=True)``) holds one slot of the Prefect global concurrency limit
``judge-calls`` while it runs, so N flow runs on the same judge server queue instead of overloading it (a
vLLM judge serves a bounded number of concurrent requests; the judge backends bound the requests *within* one
process themselves). The slot count is ``$RUBRICFLOW_JUDGE_CONCURRENCY`` (default 2) when the limit is created;
afterwards change it in the UI (Concurrency -> Global) or with ``prefect gcl update judge-calls --limit N``.

The limit is created if missing by every flow run that has a judge stage, by ``make ui`` and by
``rubricflow deploy``; the tasks acquire it with ``strict=True``, so a deleted limit fails loudly instead of
silently not limiting.
"""

from __future__ import annotations

import os

JUDGE_LIMIT = "judge-calls"


def judge_slots() -> int:
    raw = os.environ.get("RUBRICFLOW_JUDGE_CONCURRENCY", "2")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"RUBRICFLOW_JUDGE_CONCURRENCY={raw!r}: expected a positive integer")
    return int(raw)


def ensure_judge_limit(slots: int | None = None) -> tuple[int, bool]:
    """Create the ``judge-calls`` limit if missing; returns (its limit, created now)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            return client.read_global_concurrency_limit_by_name(JUDGE_LIMIT).limit, False
        except ObjectNotFound:
            pass
        try:
            n = slots or judge_slots()
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=JUDGE_LIMIT, limit=n))
            return n, True
        except ObjectAlreadyExists:  # another flow run created it meanwhile
            return client.read_global_concurrency_limit_by_name(JUDGE_LIMIT).limit, False
