"""Which failures of an OpenAI-compatible HTTP call are retried, and how long the server asks to wait.

Retried: timeouts, connection errors, truncated or non-JSON bodies, empty ``choices``, 408/409/429 and 5xx; not
retried: 400/401/403/404/422 and the other 4xx, a ``Retry-After`` longer than the caller allows
(:class:`RetryAfterTooLong`) and a body larger than the cap on answers (:class:`ResponseTooLarge`). ``REJECTED_HINTS``
says what a non-retryable answer most likely means.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time

RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
REJECTED_HINTS = {  # preflight: what a non-retryable answer most likely means
    400: "the server rejected the request (check judge.openai.extra_body and the model's options)",
    401: "the API key was rejected (check judge.openai.api_key_env / judge.openai.secret_block)",
    403: "the API key may not use this model (check judge.openai.api_key_env / judge.openai.secret_block)",
    404: "unknown model or URL (check judge.openai.model, vLLM --served-model-name, and that base_url ends in /v1)",
    422: "the server rejected the request (check judge.openai.extra_body and the model's options)",
}


class TransientResponseError(RuntimeError):
    """A 200 answer that is unusable at the HTTP level (no choices, non-JSON body): retried."""


class RetryAfterTooLong(RuntimeError):
    pass


class ResponseTooLarge(RuntimeError):
    """An answer whose body is larger than ``judge.openai.max_response_bytes`` (not read further, not retried: the
    server would answer the same)."""


def in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first exception it was raised from (``__cause__`` / ``__context__``, 10 links at most) that is a
    ``kind``, else None."""
    seen = 0
    x: BaseException | None = exc
    while x is not None and seen < 10:
        if isinstance(x, kind):
            return x
        x = x.__cause__ or x.__context__
        seen += 1
    return None


def too_large(exc: BaseException) -> ResponseTooLarge | None:
    """The ``ResponseTooLarge`` that ``exc`` was raised from (the client wraps it in a connection error), else None."""
    return in_chain(exc, ResponseTooLarge)


class RequestFailed(Exception):
    """A request that ended without a usable answer (retries exhausted or not allowed); ``reason`` is scrubbed."""

    def __init__(self, reason: str, attempts: int, status: int | None = None):
        super().__init__(reason)
        self.reason, self.attempts, self.status = reason, attempts, status


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


def connection_refused(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from is a refused TCP connection (a closed port)."""
    return in_chain(exc, ConnectionRefusedError) is not None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of an openai error, else None."""
    return getattr(exc, "status_code", None)


def is_retryable(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, RetryAfterTooLong) or too_large(exc) is not None:
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
