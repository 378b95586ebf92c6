"""The ``openai`` judge backend: any OpenAI-compatible ``/v1/chat/completions`` server.

Uses the official async client (``openai.AsyncOpenAI``) with its own retries off; retries are ours (tenacity):

* bounded concurrency: a semaphore held only while a request is in flight (not during backoff sleeps);
* a deadline per attempt (``asyncio.wait_for``), which also catches slow streams that never trip a read timeout;
* retried: timeouts, connection errors, truncated or non-JSON bodies, empty ``choices``, 408/409/429 and 5xx.
  The wait is exponential with jitter, or exactly the server's ``Retry-After`` (seconds or HTTP date;
  ``retry-after-ms`` too) when it sends one; a ``Retry-After`` above ``retry_after_max_s`` ends the retries.
  400/401/403/404/422 and the other 4xx are not retried;
* a deadline per request including its retries (``request_deadline_s``; time spent attempting and waiting to
  retry, not time queued for a concurrency slot): an attempt never runs past it, and a retry whose wait would
  pass it is not made, so a hanging server fails every request in bounded time;
* ``preflight()``: one 1-token completion before a stage starts, so a closed port, a rejected key or an unknown
  model stops the stage at once with the server's answer (``JudgeUnavailable`` / ``JudgeConfigError``);
* images go as base64 data URLs; ``response_format`` asks for the strict JSON schema, and the text is still parsed
  tolerantly (``parse_judgment``).

Every request ends as a Judgment (ok / repaired / failed with a reason): no exception escapes ``ajudge``.

The API key is passed as a callable and resolved at the first call; it is kept in a ``SecretStr`` and scrubbed
from every reason and log message, and the backend's repr never shows it.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import gc
import json
import logging
import mimetypes
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from models.errors import BackendUnavailable
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeConfigError, JudgeUnavailable
from rubricflow.judge.parse import parse_judgment
from rubricflow.judge.prompt import PROMPT_VERSION, SYSTEM_PROMPT, response_format, user_prompt
from rubricflow.judge.protocol import JudgeRequest, Judgment

log = logging.getLogger("rubricflow.judge.openai")

RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
REJECTED_HINTS = {  # preflight: what a non-retryable answer most likely means
    400: "the server rejected the request (check judge.openai.extra_body and the model's options)",
    401: "the API key was rejected (check judge.openai.api_key_env / judge.openai.secret_block)",
    403: "the API key may not use this model (check judge.openai.api_key_env / judge.openai.secret_block)",
    404: "unknown model or URL (check judge.openai.model, vLLM --served-model-name, and that base_url ends in /v1)",
    422: "the server rejected the request (check judge.openai.extra_body and the model's options)",
}


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


class TransientResponseError(RuntimeError):
    """A 200 answer that is unusable at the HTTP level (no choices, non-JSON body): retried."""


class RetryAfterTooLong(RuntimeError):
    pass


class RequestFailed(Exception):
    """A request that ended without a usable answer (retries exhausted or not allowed); ``reason`` is scrubbed."""

    def __init__(self, reason: str, attempts: int, status: int | None = None):
        super().__init__(reason)
        self.reason, self.attempts, self.status = reason, attempts, status


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


def retry_after_seconds(exc: BaseException) -> float | None:
    """Seconds from ``retry-after-ms`` / ``Retry-After`` (delta or HTTP date) of an HTTP error, else None."""
    resp = getattr(exc, "response", None)
    headers = getattr(resp, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


def is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, RetryAfterTooLong):
        return False
    if isinstance(exc, (asyncio.TimeoutError, TransientResponseError, openai.APIConnectionError)):
        return True  # includes APITimeoutError and dropped/truncated connections
    if isinstance(exc, json.JSONDecodeError):
        return True  # a 200 whose body is not JSON (proxy error page, cut body)
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUSES or exc.status_code >= 500
    if isinstance(exc, openai.APIResponseValidationError):
        return True
    return False


def image_data_url(path: str | Path) -> str:
    p = Path(path)
    mime = mimetypes.guess_type(p.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(p.read_bytes()).decode()}"


@dataclass
class _Budget:
    """What one request may still spend: ``deadline_s`` minus the time of its attempts and backoff waits."""

    deadline_s: float
    spent: float = 0.0
    last_timeout: float | None = None  # the last attempt's timeout (for the reason)

    def remaining(self) -> float:
        return self.deadline_s - self.spent


@dataclass
class CallStats:
    requests: int = 0  # judge requests handled
    attempts: int = 0  # HTTP attempts made
    retries: int = 0
    statuses: dict[str, int] = field(default_factory=lambda: {"ok": 0, "repaired": 0, "failed": 0})
    errors: dict[str, int] = field(default_factory=dict)  # error kind -> count (per attempt)


class OpenAIJudge:
    name = "openai"

    def __init__(
        self,
        cfg: OpenAIJudgeConfig,
        *,
        api_key: Callable[[], str | None] | str | None = None,
        image_root: str | Path | None = None,
        prompt_version: str = PROMPT_VERSION,
    ):
        """``cfg``: the ``judge.openai`` section (every setting and default lives there; a private copy is kept).
        The rest is not configuration: ``api_key`` (a value or a callable resolved at the first call, see
        ``factory.api_key_resolver``), ``image_root`` (resolves relative image paths) and the prompt template."""
        if prompt_version != PROMPT_VERSION:
            raise ValueError(f"judge.prompt_version: unknown template {prompt_version!r}; expected {PROMPT_VERSION!r}")
        self.cfg = cfg.model_copy(deep=True)
        self.model_id = cfg.model
        # the verdict format changes what the judge writes: part of the cache key
        self.prompt_version = f"{prompt_version}+{cfg.verdict_format}"
        self._key_source = api_key
        self._key: SecretStr | None = None
        self.image_root = Path(image_root) if image_root else None
        self.stats = CallStats()

    def __repr__(self) -> str:  # never the key
        c = self.cfg
        return f"OpenAIJudge(base_url={c.base_url!r}, model={self.model_id!r}, concurrency={c.concurrency})"

    # -- secrets ---------------------------------------------------------------------------------------------
    def _api_key(self) -> str:
        if self._key is None:
            src = self._key_source
            value = src() if callable(src) else src
            self._key = SecretStr(value or "EMPTY")
        return self._key.get_secret_value()

    def scrub(self, text: str) -> str:
        """``text`` with the API key (if resolved and non-trivial) replaced by ***."""
        if self._key is not None:
            k = self._key.get_secret_value()
            if len(k) >= 4 and k != "EMPTY":
                text = text.replace(k, "***")
        return text

    def scrub_judgment(self, j: Judgment) -> Judgment:
        """``j`` with the key scrubbed from every rationale, the reason and the raw text: a server that echoes the
        key (a hostile or misconfigured one) must not get it into the judge cache, reports or logs."""
        if self._key is None:
            return j
        verdicts = {rid: replace(v, rationale=self.scrub(v.rationale)) for rid, v in j.verdicts.items()}
        reason = None if j.reason is None else self.scrub(j.reason)
        raw = None if j.raw is None else self.scrub(j.raw)
        return replace(j, verdicts=verdicts, reason=reason, raw=raw)

    # -- requests --------------------------------------------------------------------------------------------
    def _image_parts(self, request: JudgeRequest) -> list[dict]:
        parts = []
        for p in request.images:
            path = Path(p)
            if not path.is_absolute() and self.image_root is not None:
                path = self.image_root / path
            parts.append({"type": "image_url", "image_url": {"url": image_data_url(path)}})
        return parts

    def messages(self, request: JudgeRequest) -> list[dict]:
        images = self._image_parts(request) if self.cfg.send_images else []
        text = user_prompt(request, n_images_shown=len(images), verdict_format=self.cfg.verdict_format)
        content: Any = images + [{"type": "text", "text": text}] if images else text
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]

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

    def _client(self):
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
                self.stats.errors["non-JSON body"] = self.stats.errors.get("non-JSON body", 0) + 1
                raise TransientResponseError(f"response body is not JSON ({e})") from None
            except Exception as e:
                kind = f"http {_status(e)}" if _status(e) else type(e).__name__
                self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
                ra = retry_after_seconds(e)
                if ra is not None and ra > self.cfg.retry_after_max_s:
                    raise RetryAfterTooLong(
                        f"{kind}: Retry-After {ra:.0f}s exceeds retry_after_max_s={self.cfg.retry_after_max_s:g}"
                    ) from None
                raise
            finally:
                if budget is not None:
                    budget.spent += time.monotonic() - t0
        if not isinstance(resp, dict) or "choices" not in resp:
            self.stats.errors["non-JSON body"] = self.stats.errors.get("non-JSON body", 0) + 1
            raise TransientResponseError(f"response body is not a chat completion: {str(resp)[:80]!r}")
        choices = resp.get("choices")
        if not isinstance(choices, list) or not choices:
            self.stats.errors["empty choices"] = self.stats.errors.get("empty choices", 0) + 1
            raise TransientResponseError("response has no choices")
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        content = message.get("content")
        return (content if isinstance(content, str) else None), choice.get("finish_reason")

    def _kwargs(self, request: JudgeRequest, messages: list[dict]) -> dict:
        """The request body."""
        ids = [r.id for r in request.rubrics]
        body: dict[str, Any] = dict(
            model=self.model_id, messages=messages, temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens
        )
        if self.cfg.json_schema:
            body["response_format"] = response_format(ids, self.cfg.rationale_max_chars, self.cfg.verdict_format)
        body.update(self.cfg.extra_body)
        return body

    def _describe(self, e: BaseException, timeout: float | None = None) -> str:
        if isinstance(e, asyncio.TimeoutError):
            msg = f"timeout: no complete answer within {self.cfg.timeout_s if timeout is None else timeout:.3g}s"
        elif _status(e):
            msg = f"http {_status(e)}: {getattr(e, 'message', str(e))}"
        else:
            msg = f"{type(e).__name__}: {e}"
        return self.scrub(msg)[:300]

    async def _post_with_retries(
        self, client, sem: asyncio.Semaphore, body: dict, label: str
    ) -> tuple[str | None, str | None, int]:
        """``(content, finish_reason, attempts)`` of one request with our retries (tenacity), within
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
                     self._describe(exc, budget.last_timeout) if exc else "?")

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
            desc = self._describe(e, budget.last_timeout)
            raise RequestFailed(f"{desc} (after {n} attempt{'s' if n != 1 else ''}){''.join(why)}", n,
                                _status(e)) from None
        return content, finish, retrying.statistics.get("attempt_number", 1)

    async def _judge_one(self, client, sem: asyncio.Semaphore, request: JudgeRequest) -> Judgment:
        ids = [r.id for r in request.rubrics]
        try:
            kwargs = self._kwargs(request, self.messages(request))
        except OSError as e:
            return Judgment("failed", reason=self.scrub(f"could not read image: {e}"))
        try:
            content, finish, attempts = await self._post_with_retries(client, sem, kwargs, request.sample_id)
        except RequestFailed as e:
            self.stats.retries += max(0, e.attempts - 1)
            log.warning("judge %s failed: %s", request.sample_id, e.reason)
            return Judgment("failed", reason=e.reason)
        self.stats.retries += attempts - 1
        j = self.scrub_judgment(parse_judgment(content, ids))
        if j.status != "ok" and finish == "length":
            j.reason = f"{j.reason}; output hit max_tokens"
        if j.status == "failed":
            log.warning("judge %s: unparseable output: %s", request.sample_id, j.reason)
        return j

    async def ajudge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        sem = asyncio.Semaphore(self.cfg.concurrency)
        client = self._client()
        # Freeze the objects alive now (imports, models, these requests) for the fan-out: a full collection over a
        # heap with torch/openai/pydantic loaded stalls the event loop, and every in-flight judge call with it
        # (measured effect in docs/bench/README.md). Young collections still run; the heap is unfrozen afterwards.
        # A process that froze its own heap already keeps it as it was (the check walks the frozen list, so it is
        # free unless the process froze objects itself).
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            out = await asyncio.gather(*(self._judge_one(client, sem, r) for r in requests))
        finally:
            if freeze:
                gc.unfreeze()
            await client.close()
        self.stats.requests += len(out)
        for j in out:
            self.stats.statuses[j.status] += 1
        return list(out)

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        return run_sync(lambda: self.ajudge(requests))

    # -- preflight -------------------------------------------------------------------------------------------
    def preflight_body(self) -> dict:
        """The preflight request: a 1-token completion (auth, URL and model as every judge call uses them)."""
        body: dict[str, Any] = dict(
            model=self.model_id,
            messages=[{"role": "user", "content": "Reply with OK."}],
            temperature=0.0,
            max_tokens=1,
        )
        body.update(self.cfg.extra_body)
        return body

    async def apreflight(self) -> None:
        where = f"judge preflight: backend openai at {self.cfg.base_url}, model {self.model_id!r}"
        try:
            client = self._client()  # resolves the API key: a missing one raises JudgeConfigError here
        except JudgeConfigError as e:
            raise JudgeConfigError(f"{where}: {e}") from None
        try:
            await self._post_with_retries(client, asyncio.Semaphore(1), self.preflight_body(), "preflight")
        except RequestFailed as e:
            hint = REJECTED_HINTS.get(e.status or 0)
            if hint is not None:
                raise JudgeConfigError(f"{where}: server answered {e.reason}; {hint}") from None
            raise JudgeUnavailable(f"{where}: no usable answer: {e.reason}") from None
        finally:
            await client.close()
        log.info("%s: ok", where)

    def preflight(self) -> None:
        """One 1-token completion; raises ``JudgeConfigError`` (key missing or rejected, unknown model, bad
        request) or ``JudgeUnavailable`` (closed port, timeout, 5xx, garbage), naming URL, model and answer."""
        run_sync(self.apreflight)

    # -- teacher capability ----------------------------------------------------------------------------------
    async def agenerate(self, system: str, user: str, schema: dict | None = None, max_tokens: int | None = None) -> str:
        """One chat completion (used by the rubric teacher). Raises RuntimeError with a scrubbed reason."""
        kw: dict[str, Any] = dict(
            model=self.model_id,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            temperature=self.cfg.temperature,
            max_tokens=max_tokens or self.cfg.max_tokens,
        )
        if schema is not None and self.cfg.json_schema:
            kw["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "strict": True, "schema": schema},
            }
        kw.update(self.cfg.extra_body)
        client = self._client()
        try:
            content, _, _ = await self._post_with_retries(client, asyncio.Semaphore(1), kw, "teacher")
        except RequestFailed as e:
            raise RuntimeError(f"teacher call to {self.cfg.base_url} ({self.model_id}) failed: {e.reason}") from None
        finally:
            await client.close()
        return content or ""

    def generate(self, system: str, user: str, schema: dict | None = None, max_tokens: int | None = None) -> str:
        return run_sync(lambda: self.agenerate(system, user, schema, max_tokens))
