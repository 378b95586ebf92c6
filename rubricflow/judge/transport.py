"""HTTP transport to an OpenAI-compatible ``/v1/chat/completions`` server (the ``openai`` judge and teacher).

Uses the official async client (``openai.AsyncOpenAI``) with its own retries off; retries are ours (tenacity):

* bounded concurrency: a semaphore held only while a request is in flight (not during backoff sleeps);
* a deadline per attempt (``asyncio.wait_for``), which also catches slow streams that never trip a read timeout;
* retried (``rubricflow.judge.retry``): timeouts, connection errors, truncated or non-JSON bodies, empty ``choices``,
  408/409/429 and 5xx.
  The wait is exponential with jitter, or exactly the server's ``Retry-After`` (seconds or HTTP date;
  ``retry-after-ms`` too) when it sends one; a ``Retry-After`` above ``retry_after_max_s`` ends the retries.
  400/401/403/404/422 and the other 4xx are not retried;
* a deadline per request including its retries (``request_deadline_s``; time spent attempting and waiting to
  retry, not time queued for a concurrency slot): an attempt never runs past it, and a retry whose wait would
  pass it is not made, so a hanging server fails every request in bounded time;
* a cap on the size of an answer (``max_response_bytes``): a body announced or streamed beyond it is not read
  further and the request fails at once (not retried);
* ``preflight()``: one 1-token completion before a stage starts, so a closed port, a rejected key or an unknown
  model stops the stage at once with the server's answer (``JudgeUnavailable`` / ``JudgeConfigError``).

A request without a usable answer raises ``RequestFailed`` with a reason (the caller says what that means). The
API key (a callable, resolved at the first call) is kept in a ``SecretStr`` and scrubbed from every reason and log.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from models.errors import BackendUnavailable
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeConfigError, JudgeUnavailable
from rubricflow.judge.retry import (
    REJECTED_HINTS,
    RequestFailed,
    ResponseTooLarge,
    RetryAfterTooLong,
    TransientResponseError,
    connection_refused,
    http_status,
    is_retryable,
    retry_after_seconds,
    too_large,
)

log = logging.getLogger("rubricflow.judge.openai")

_SSL: dict[str, Any] = {}
_SSL_LOCK = threading.Lock()


def shared_ssl_context():
    """One default SSL context per process (certifi CAs, SSL_CERT_FILE/DIR honoured), as the openai client builds."""
    with _SSL_LOCK:
        if "ctx" not in _SSL:
            try:
                import httpx2 as hx  # the HTTP library of openai >= 2.x here
            except ImportError:  # older openai releases use httpx
                import httpx as hx
            _SSL["ctx"] = hx.create_ssl_context()
        return _SSL["ctx"]


def run_sync(coro_fn: Callable[[], Any]) -> Any:
    """Run ``coro_fn()`` to completion from sync code, also when an event loop is already running here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_fn())
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = asyncio.run(coro_fn())
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=worker, name="judge-sync")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


SHARED_SLOTS: ContextVar[asyncio.Semaphore | None] = ContextVar("rubricflow_judge_shared_slots", default=None)
"""Concurrency slots shared by every judge call made in this context (``rubricflow.judge.stream.JudgeStream`` sets
it): a backend that honours it (``OpenAIJudge``: ``shares_slots``) takes one slot per request attempt in flight from
this semaphore instead of a semaphore of its own per call, so calls that overlap stay within one bound together
and a slot is free again as soon as its answer is in (not when the slowest answer of its call is)."""

_FREEZE_LOCK = threading.Lock()
_FREEZE = {"active": 0, "ours": False}  # fan-outs inside frozen_heap now; whether the freeze in force is theirs


@contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects alive now (imports, models, the requests) frozen for a fan-out of calls: a full collection over
    a heap with torch/openai/pydantic loaded stalls the event loop, and every in-flight call with it (measured in
    docs/bench/README.md). Young collections still run. A heap the process froze itself is kept as it was.

    Fan-outs that overlap (judge calls streamed from several threads or tasks) share one freeze: the first to enter
    freezes, the last to leave unfreezes. ``gc.get_freeze_count()`` walks the whole frozen heap holding the GIL
    (tens of ms with torch loaded, stalling every other thread: generation, the update), so it is asked only when
    no fan-out of ours is active, when the heap is unfrozen or frozen by the process itself."""
    with _FREEZE_LOCK:
        if _FREEZE["active"] == 0:
            _FREEZE["ours"] = gc.get_freeze_count() == 0
            if _FREEZE["ours"]:
                gc.freeze()
        _FREEZE["active"] += 1
    try:
        yield
    finally:
        with _FREEZE_LOCK:
            _FREEZE["active"] -= 1
            if _FREEZE["active"] == 0 and _FREEZE["ours"]:
                gc.unfreeze()
                _FREEZE["ours"] = False


# -- secrets in echoed text -------------------------------------------------------------------------------------
KEY_FORM_MIN_CHARS = 8  # shortest letter/digit run a transformed form of the key is searched for with


def _b64_forms(key: bytes) -> list[str]:
    """The stretches of base64 text that encode ``key`` wherever it starts in a longer base64-encoded text (three
    alignments): the characters determined by the key's bytes alone."""
    import base64

    forms = []
    for lead in range(3):
        enc = base64.b64encode(b"\0" * lead + key).decode()
        n = lead + len(key)
        full_chars = n // 3 * 4  # characters of complete 3-byte groups: not changed by what follows
        first = (8 * lead + 5) // 6  # characters touched by the leading bytes
        forms.append(enc[first:full_chars])
        forms.append(base64.urlsafe_b64encode(b"\0" * lead + key).decode()[first:full_chars])
    return forms


def _spread(form: str) -> re.Pattern | None:
    """``form``'s letters and digits in order, any case, with any run of other characters between them (spaces,
    newlines, dashes, quotes, and the escapes ``\\n``, ``\\t``, ``\\uXXXX`` of a JSON string): the form echoed
    spaced out, split over lines or case-changed, also inside the JSON text of an answer."""
    chars = [c for c in form if c.isalnum()]
    if len(chars) < KEY_FORM_MIN_CHARS:
        return None
    return re.compile(_SEPARATORS.join(re.escape(c) for c in chars), re.IGNORECASE)


_SEPARATORS = r"(?:\\(?:[nrt]|u[0-9A-Fa-f]{4})|[^0-9A-Za-z])*"


def key_patterns(key: str) -> list[re.Pattern]:
    """Patterns that find ``key`` in text that echoes it transformed: as is, reversed, base64 (standard or URL-safe,
    at any alignment inside a longer encoded text) or hex, each in any case, spaced or split over lines. A key too
    short to search for without matching ordinary text (fewer than ``KEY_FORM_MIN_CHARS`` letters and digits) gets
    none: it is still replaced where it appears verbatim."""
    raw = key.encode()
    forms = [key, key[::-1], raw.hex(), *_b64_forms(raw), *_b64_forms(key[::-1].encode())]
    out, seen = [], set()
    for f in forms:
        p = _spread(f)
        if p is not None and p.pattern not in seen:
            seen.add(p.pattern)
            out.append(p)
    return out


@dataclass
class _Budget:
    """What one request may still spend: ``deadline_s`` minus the time of its attempts and backoff waits."""

    deadline_s: float
    spent: float = 0.0
    last_timeout: float | None = None  # the last attempt's timeout (for the reason)

    def remaining(self) -> float:
        return self.deadline_s - self.spent


@dataclass
class AttemptStats:
    attempts: int = 0  # HTTP attempts made
    errors: dict[str, int] = field(default_factory=dict)  # error kind -> count (per attempt)
    failed_streak: int = 0  # attempts failed since the last answered one (a server that stopped answering)

    def error(self, kind: str, answered: bool = False) -> None:
        """Count a failed attempt; ``answered``: the server answered it with an HTTP status (an error status, or a
        429/503 asking to wait), which ends a streak of attempts without an answer instead of extending it."""
        self.errors[kind] = self.errors.get(kind, 0) + 1
        self.failed_streak = 0 if answered else self.failed_streak + 1


def _body_cap_message(cap: int) -> str:
    return f"response body larger than judge.openai.max_response_bytes={cap} (not read further)"


def capped_transport(inner, cap: int):
    """``inner`` (an httpx2 async transport) whose response bodies may hold at most ``cap`` bytes: a larger
    Content-Length, or a stream passing it, raises ``ResponseTooLarge`` before more is read."""
    try:
        import httpx2 as hx
    except ImportError:  # older openai releases use httpx
        import httpx as hx

    class CappedStream(hx.AsyncByteStream):
        def __init__(self, stream):
            self.stream = stream

        async def __aiter__(self):
            got = 0
            async for chunk in self.stream:
                got += len(chunk)
                if got > cap:
                    raise ResponseTooLarge(_body_cap_message(cap))
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class CappedTransport(hx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            resp = await inner.handle_async_request(request)
            length = resp.headers.get("content-length", "")
            if length.isdigit() and int(length) > cap:
                await resp.aclose()
                raise ResponseTooLarge(_body_cap_message(cap))
            resp.stream = CappedStream(resp.stream)
            return resp

        async def aclose(self) -> None:
            await inner.aclose()

    return CappedTransport()


class ChatTransport:
    """Chat completions from the server of a ``judge.openai`` section, with the retries and deadlines above."""

    def __init__(
        self,
        cfg: OpenAIJudgeConfig,
        api_key: Callable[[], str | None] | str | None = None,
        stats: AttemptStats | None = None,
    ):
        """``cfg``: the ``judge.openai`` section (used as given: the caller keeps a private copy); ``api_key``: a
        value or a callable resolved at the first call; ``stats``: where attempts and errors are counted."""
        self.cfg = cfg
        self._key_source = api_key
        self._key: SecretStr | None = None
        self._key_patterns: list[re.Pattern] | None = None
        self.stats = stats if stats is not None else AttemptStats()

    # -- secrets ---------------------------------------------------------------------------------------------
    def _api_key(self) -> str:
        if self._key is None:
            src = self._key_source
            value = src() if callable(src) else src
            self._key = SecretStr(value or "EMPTY")
        return self._key.get_secret_value()

    @property
    def key_resolved(self) -> bool:
        return self._key is not None

    def scrub(self, text: str) -> str:
        """``text`` with the API key (if resolved and non-trivial) replaced by ***, also where it is echoed
        transformed (``key_patterns``: any case, reversed, base64 or hex, spaced or split over lines)."""
        if self._key is not None:
            k = self._key.get_secret_value()
            if len(k) >= 4 and k != "EMPTY":
                text = text.replace(k, "***")
                if self._key_patterns is None:
                    self._key_patterns = key_patterns(k)
                for pattern in self._key_patterns:
                    text = pattern.sub("***", text)
        return text

    # -- retries ---------------------------------------------------------------------------------------------
    def _delay(self, exc: BaseException | None, attempt_number: int) -> float:
        """The wait before the next attempt: the server's Retry-After, else exponential backoff with jitter."""
        ra = retry_after_seconds(exc) if exc is not None else None
        if ra is not None:
            return ra
        n = attempt_number - 1
        c = self.cfg
        return min(c.backoff_max_s, c.backoff_initial_s * 2**n) + random.uniform(0, c.backoff_jitter_s)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return self._delay(exc, state.attempt_number)

    def describe(self, e: BaseException, timeout: float | None = None) -> str:
        """A scrubbed one-line reason for ``e``."""
        big = too_large(e)
        if big is not None:
            msg = str(big)
        elif connection_refused(e):  # openai's aiohttp client reports a closed port as "Request timed out"
            msg = f"connection refused: nothing listens at {self.cfg.base_url}"
        elif isinstance(e, asyncio.TimeoutError):
            msg = f"timeout: no complete answer within {self.cfg.timeout_s if timeout is None else timeout:.3g}s"
        elif http_status(e):
            msg = f"http {http_status(e)}: {getattr(e, 'message', str(e))}"
        else:
            msg = f"{type(e).__name__}: {e}"
        return self.scrub(msg)[:300]

    # -- requests --------------------------------------------------------------------------------------------
    def client(self):
        """A fresh ``openai.AsyncOpenAI`` (close it with ``await client.close()``); resolves the API key."""
        import openai

        c = self.cfg
        # The client's own retries are off (ours honour Retry-After and count attempts). Its HTTP layer is
        # openai's aiohttp client (DefaultAioHttpClient, less CPU per request than httpx; see docs/bench/README.md)
        # or its httpx default; both get a process-wide SSL context (building one per client is slow).
        if c.http_client == "aiohttp":
            cls = getattr(openai, "DefaultAioHttpClient", None)
            if cls is None:
                raise BackendUnavailable(
                    "judge.openai.http_client=aiohttp needs openai's aiohttp client (openai>=1.8x with aiohttp "
                    "installed: `pip install openai[aiohttp]`); or set judge.openai.http_client=httpx"
                )
        else:
            cls = openai.DefaultAsyncHttpxClient
        http = cls(verify=shared_ssl_context(), timeout=c.timeout_s)
        # every answer's body read is capped (the transports of proxies mounted from the environment too)
        http._transport = capped_transport(http._transport, c.max_response_bytes)
        http._mounts = {k: (v if v is None else capped_transport(v, c.max_response_bytes))
                        for k, v in http._mounts.items()}
        return openai.AsyncOpenAI(
            base_url=c.base_url, api_key=self._api_key(), max_retries=0, timeout=c.timeout_s, http_client=http
        )

    async def _attempt(
        self, client, sem: asyncio.Semaphore, body: dict, budget: "_Budget | None" = None
    ) -> tuple[str | None, str | None]:
        async with sem:
            self.stats.attempts += 1
            timeout = self.cfg.timeout_s
            if budget is not None:
                timeout = budget.last_timeout = max(0.001, min(timeout, budget.remaining()))
            t0 = time.monotonic()
            try:
                # The client's generic POST (documented for custom requests): same auth, errors and connection
                # pool as chat.completions.create, without transforming the typed params and building pydantic
                # models, a large share of the client's CPU per request (measured in docs/bench/README.md).
                resp = await asyncio.wait_for(
                    client.post("/chat/completions", body=body, cast_to=object), timeout=timeout
                )
            except json.JSONDecodeError as e:
                self.stats.error("non-JSON body")
                raise TransientResponseError(f"response body is not JSON ({e})") from None
            except Exception as e:
                kind = f"http {http_status(e)}" if http_status(e) else type(e).__name__
                if too_large(e) is not None:
                    kind = "body too large"
                # an error status is an answer (a 429 burst asking to wait is not a server that stopped answering;
                # statuses that keep failing end as failed judgments, which the budget counts)
                self.stats.error(kind, answered=http_status(e) is not None)
                ra = retry_after_seconds(e)
                if ra is not None and ra > self.cfg.retry_after_max_s:
                    raise RetryAfterTooLong(
                        f"{kind}: Retry-After {ra:.0f}s exceeds retry_after_max_s={self.cfg.retry_after_max_s:g}"
                    ) from None
                raise
            finally:
                if budget is not None:
                    budget.spent += time.monotonic() - t0
        self.stats.failed_streak = 0  # the server answered (whatever the body holds)
        if not isinstance(resp, dict) or "choices" not in resp:
            self.stats.error("non-JSON body")
            raise TransientResponseError(f"response body is not a chat completion: {str(resp)[:80]!r}")
        choices = resp.get("choices")
        if not isinstance(choices, list) or not choices:
            self.stats.error("empty choices")
            raise TransientResponseError("response has no choices")
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        content = message.get("content")
        return (content if isinstance(content, str) else None), choice.get("finish_reason")

    async def post(
        self, client, sem: asyncio.Semaphore, body: dict, label: str
    ) -> tuple[str | None, str | None, int]:
        """``(content, finish_reason, attempts)`` of one request with the transport's retries (tenacity), within
        ``request_deadline_s`` (attempts and backoff waits count, queueing for ``sem`` does not). Raises
        ``RequestFailed``."""
        c = self.cfg
        budget = _Budget(c.request_deadline_s)
        why: list[str] = []

        def stop(state: RetryCallState) -> bool:  # tenacity computes the wait first (state.upcoming_sleep)
            if state.attempt_number > c.max_retries:
                return True
            left = budget.remaining()
            if state.upcoming_sleep >= left:
                why.append(f"; the next retry in {state.upcoming_sleep:.3g}s would pass request_deadline_s="
                           f"{c.request_deadline_s:g} ({max(left, 0):.3g}s left)")
                return True
            return False

        async def sleep(seconds: float) -> None:
            t0 = time.monotonic()
            await asyncio.sleep(seconds)
            budget.spent += time.monotonic() - t0

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.info("judge %s: retry %d in %.2fs after %s", label, state.attempt_number, state.upcoming_sleep,
                     self.describe(exc, budget.last_timeout) if exc else "?")

        retrying = AsyncRetrying(
            stop=stop, wait=self._wait, retry=retry_if_exception(is_retryable), sleep=sleep, before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    content, finish = await self._attempt(client, sem, body, budget=budget)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            n = retrying.statistics.get("attempt_number", 1)
            desc = self.describe(e, budget.last_timeout)
            raise RequestFailed(f"{desc} (after {n} attempt{'s' if n != 1 else ''}){''.join(why)}", n,
                                http_status(e)) from None
        return content, finish, retrying.statistics.get("attempt_number", 1)

    async def post_once(self, body: dict, label: str) -> tuple[str | None, str | None, int]:
        """``post`` on a client of its own, one request in flight; the client is closed afterwards."""
        client = self.client()
        try:
            return await self.post(client, asyncio.Semaphore(1), body, label)
        finally:
            await client.close()

    # -- preflight -------------------------------------------------------------------------------------------
    def preflight_body(self) -> dict:
        """The preflight request: a 1-token completion (auth, URL and model as every call uses them)."""
        body: dict[str, Any] = dict(
            model=self.cfg.model,
            messages=[{"role": "user", "content": "Reply with OK."}],
            temperature=0.0,
            max_tokens=1,
        )
        body.update(self.cfg.extra_body)
        return body

    async def apreflight(self) -> None:
        where = f"judge preflight: backend openai at {self.cfg.base_url}, model {self.cfg.model!r}"
        try:
            await self.post_once(self.preflight_body(), "preflight")
        except JudgeConfigError as e:  # the API key could not be resolved
            raise JudgeConfigError(f"{where}: {e}") from None
        except RequestFailed as e:
            hint = REJECTED_HINTS.get(e.status or 0)
            if hint is not None:
                raise JudgeConfigError(f"{where}: server answered {e.reason}; {hint}") from None
            raise JudgeUnavailable(f"{where}: no usable answer: {e.reason}") from None
        log.info("%s: ok", where)

    def preflight(self) -> None:
        """One 1-token completion; raises ``JudgeConfigError`` (key missing or rejected, unknown model, bad
        request) or ``JudgeUnavailable`` (closed port, timeout, 5xx, garbage), naming URL, model and answer."""
        run_sync(self.apreflight)
