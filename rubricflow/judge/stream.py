"""Judging off the critical path: ``JudgeStream`` sends judge requests while the caller goes on (generating).

``stream.submit(requests)`` returns at once with a ``concurrent.futures.Future`` of the judgments (one per request,
in order, as ``judge.judge(requests)`` returns them); the calls run on the stream's own event loop in a background
thread (``judge.ajudge``, or ``judge.judge`` in a worker thread for a backend without it). A trainer submits each
group of completions as soon as it is generated and collects the futures when the batch is complete, so the judge
works while the policy generates instead of after it.

Bounds: at most ``max_in_flight`` requests are in flight over all submitted calls together (the judge section's
``judge.openai.concurrency`` by default), so streaming never asks the server for more concurrency than one batched
call would. A backend that shares slots (``shares_slots``: the openai backend, through
``rubricflow.judge.transport.SHARED_SLOTS``) holds one slot per request while it is in flight and frees it with its
answer, so a call's fast answers make room for the next call's requests at once; any other backend's call of ``k``
requests waits for ``min(k, max_in_flight)`` free slots and holds them until the call returns. Everything the
wrapped judge does per call is unchanged (cache, failure budget, deadlines, retries); an exception of a call (the
failure budget, the stage deadline) is raised by its future's ``result()``. ``close()`` cancels what is still queued
or in flight and stops the thread.

Only a server-backed judge (:func:`server_backed`) gains from this: an in-process judge (programmatic checks, a
local model) runs on the same CPU as generation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Sequence

from rubricflow.judge.protocol import JudgeRequest, Judgment
from rubricflow.judge.transport import SHARED_SLOTS

SERVER_BACKENDS = frozenset({"openai"})  # backends whose judgments are computed elsewhere (a server)


def server_backed(judge) -> bool:
    """True when ``judge`` (or the backend it wraps: wrappers copy ``name``) sends its requests to a server."""
    return getattr(judge, "name", None) in SERVER_BACKENDS


def default_concurrency(judge, fallback: int = 16) -> int:
    """The judge's configured concurrency (``judge.openai.concurrency`` through the wrappers), else ``fallback``."""
    try:
        c = getattr(getattr(judge, "cfg", None), "concurrency", None)
    except Exception:  # a wrapper's __getattr__ may raise anything for an attribute its backend lacks
        c = None
    return int(c) if isinstance(c, int) and c > 0 else fallback


class _CountingSlots(asyncio.Semaphore):
    """A semaphore that records how many slots are held, and the most held at once."""

    def __init__(self, n: int):
        super().__init__(n)
        self.held = 0
        self.peak = 0

    async def acquire(self) -> bool:
        await super().acquire()
        self.held += 1
        self.peak = max(self.peak, self.held)
        return True

    def release(self) -> None:
        self.held -= 1
        super().release()


class JudgeStream:
    """``with JudgeStream(judge) as s: fut = s.submit(requests); ...; judgments = fut.result()``."""

    def __init__(self, judge, max_in_flight: int | None = None):
        self.judge = judge
        self.max_in_flight = max(1, int(max_in_flight or default_concurrency(judge)))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._free = self.max_in_flight
        self._cond: asyncio.Condition | None = None
        self._slots: _CountingSlots | None = None
        self._futures: set[concurrent.futures.Future] = set()
        self.shares_slots = getattr(judge, "shares_slots", False) is True  # through the wrappers
        self.submitted = 0  # requests submitted
        self._peak_reserved = 0

    @property
    def peak_in_flight(self) -> int:
        """Most requests in flight at once (slots held) so far (for tests)."""
        return max(self._peak_reserved, self._slots.peak if self._slots is not None else 0)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    self._cond = asyncio.Condition()
                    self._slots = _CountingSlots(self.max_in_flight)
                    ready.set()
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="judge-stream", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Cancel the calls still queued or in flight and stop the thread (idempotent)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
            self._futures = set()
        if loop is None:
            return

        async def drain() -> None:  # one cancellation per call, so each closes its HTTP client on the way out
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                if not t.cancelling():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(drain(), loop).result(30)
        except Exception:  # a call that does not finish cancelling: the thread is a daemon
            pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(30)
        if not loop.is_running():
            loop.close()

    def __enter__(self) -> "JudgeStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- calls -----------------------------------------------------------------------------------------------
    def submit(self, requests: Sequence[JudgeRequest]) -> "concurrent.futures.Future[list[Judgment]]":
        """Start judging ``requests`` (one call of the wrapped judge); returns the future of its judgments."""
        requests = list(requests)
        if not requests:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result([])
            return done
        loop = self._ensure_started()
        self.submitted += len(requests)
        fut = asyncio.run_coroutine_threadsafe(self._call(requests), loop)
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(self._forget)
        return fut

    def _forget(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            self._futures.discard(fut)

    async def _call(self, requests: list[JudgeRequest]) -> list[Judgment]:
        if self.shares_slots and hasattr(self.judge, "ajudge"):
            token = SHARED_SLOTS.set(self._slots)  # this task's context (and the tasks it starts) only
            try:
                out = await self.judge.ajudge(requests)
            finally:
                SHARED_SLOTS.reset(token)
        else:
            out = await self._reserved_call(requests)
        if len(out) != len(requests):
            raise RuntimeError(f"judge returned {len(out)} judgments for {len(requests)} requests")
        return list(out)

    async def _reserved_call(self, requests: list[JudgeRequest]) -> list[Judgment]:
        """A call of a backend that does not share slots: ``min(k, max_in_flight)`` slots for the whole call."""
        need = min(len(requests), self.max_in_flight)
        cond = self._cond
        assert cond is not None
        async with cond:
            await cond.wait_for(lambda: self._free >= need)
            self._free -= need
            self._peak_reserved = max(self._peak_reserved, self.max_in_flight - self._free)
        try:
            if hasattr(self.judge, "ajudge"):
                return await self.judge.ajudge(requests)
            return await asyncio.get_running_loop().run_in_executor(None, self.judge.judge, requests)
        finally:
            async with cond:
                self._free += need
                cond.notify_all()
