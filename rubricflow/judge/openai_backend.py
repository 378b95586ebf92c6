"""The ``openai`` judge backend: judge requests to any OpenAI-compatible ``/v1/chat/completions`` server.

A request becomes the judge prompt (``prompt``), images as base64 data URLs and, with ``json_schema``, a
``response_format`` asking for the strict JSON schema; it goes through the HTTP transport (``transport``: retries,
deadlines, bounded concurrency, the API key) and the answer is parsed tolerantly (``parse_judgment``).

Every request ends as a Judgment (ok / repaired / failed with a reason), with two exceptions that end the stage:
the failure budget (``judge.max_failed_frac``) acts while a batch runs, so once a batch of at least
``judge.failure_window`` requests has more failures than the budget allows whatever the rest answer, the rest is
cancelled and ``JudgeFailureBudgetExceeded`` raised; in every call, small ones too, also when more consecutive
*attempts* than ``max_failed_frac`` of max(requests, ``failure_window``) failed with no answer in between (a
server that answers the preflight and then hangs or drips fails the stage after a couple of attempt timeouts, not
after every request's deadline; an error status, such as a 429 burst asking to wait, is an answer and ends the
streak); and ``judge.stage_deadline_s`` bounds the time one backend
(one stage) spends judging in all, queueing for a concurrency slot included (``JudgeDeadlineExceeded``). The API
key is scrubbed from every rationale, reason and raw text, and from the teacher's completions, before they leave
the backend. ``server_id`` (the base URL) is part of the cache key.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import mimetypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rubricflow.judge.budget import failure_summary
from rubricflow.judge.config import JudgeConfig, OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeDeadlineExceeded, JudgeFailureBudgetExceeded
from rubricflow.judge.parse import parse_judgment
from rubricflow.judge.prompt import (
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    new_boundary,
    quoted_forms,
    response_format,
    user_prompt,
)
from rubricflow.judge.protocol import JudgeRequest, Judgment
from rubricflow.judge.retry import RequestFailed
from rubricflow.judge.transport import SHARED_SLOTS, AttemptStats, ChatTransport, frozen_heap, run_sync
from rubricflow.judge.usage import TokenUsage

log = logging.getLogger("rubricflow.judge.openai")

STREAK_POLL_S = 0.25  # how often a running batch looks at its failed-attempt streak (not a timeout)


def image_data_url(path: str | Path) -> str:
    """The image as a data URL; a file that does not decode as an image is refused (``ValueError`` naming it), so
    a request naming some other local file never sends it to the judge."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    try:
        with Image.open(p) as im:
            im.verify()
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as e:
        raise ValueError(
            f"image {p}: not an image file ({e.__class__.__name__}); it is not sent to the judge") from None
    mime = mimetypes.guess_type(p.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(p.read_bytes()).decode()}"


@dataclass
class CallStats(AttemptStats):
    """The transport's attempts and errors, plus the judge's requests, retries and statuses."""

    requests: int = 0  # judge requests handled
    retries: int = 0
    statuses: dict[str, int] = field(default_factory=lambda: {"ok": 0, "repaired": 0, "failed": 0})


class OpenAIJudge:
    name = "openai"
    shares_slots = True  # a call inside transport.SHARED_SLOTS takes its concurrency slots from there

    def __init__(
        self,
        cfg: OpenAIJudgeConfig,
        *,
        api_key: Callable[[], str | None] | str | None = None,
        image_root: str | Path | None = None,
        prompt_version: str = PROMPT_VERSION,
        bounds: JudgeConfig | None = None,
    ):
        """``cfg``: the ``judge.openai`` section (every setting and default lives there; a private copy is kept).
        The rest is not configuration: ``api_key`` (a value or a callable resolved at the first call, see
        ``factory.api_key_resolver``), ``image_root`` (resolves relative image paths) and the prompt template;
        ``bounds``: the ``judge`` section whose failure budget (``max_failed_frac``, ``failure_window``) and
        ``stage_deadline_s`` act while a batch runs (``factory.make_backend`` passes it; None: neither)."""
        if prompt_version != PROMPT_VERSION:
            raise ValueError(f"judge.prompt_version: unknown template {prompt_version!r}; expected {PROMPT_VERSION!r}")
        self.cfg = cfg.model_copy(deep=True)
        self.model_id = cfg.model
        # the verdict format changes what the judge writes: part of the cache key
        self.prompt_version = f"{prompt_version}+{cfg.verdict_format}"
        self.image_root = Path(image_root) if image_root else None
        self.stats = CallStats()
        self.transport = ChatTransport(self.cfg, api_key, self.stats)
        self.server_id = self.cfg.base_url.rstrip("/")
        self.max_failed_frac = bounds.max_failed_frac if bounds is not None else 1.0  # 1: no budget
        self.failure_window = bounds.failure_window if bounds is not None else 0
        self.stage_deadline_s = bounds.stage_deadline_s if bounds is not None else None
        # wall time with at least one call of this judge in flight (what stage_deadline_s bounds): calls that
        # overlap (streamed scoring, one-step-off) count their common time once
        self.judging_s = 0.0
        self._in_flight = 0
        self._busy_since = 0.0
        self._busy_lock = threading.Lock()
        self.usage = TokenUsage()  # prompt / completion tokens of the answers (``usage`` of each body)

    def busy_s(self) -> float:
        """Wall time so far with at least one call of this judge in flight."""
        with self._busy_lock:
            return self.judging_s + (time.monotonic() - self._busy_since if self._in_flight else 0.0)

    def _call_started(self) -> None:
        with self._busy_lock:
            if self._in_flight == 0:
                self._busy_since = time.monotonic()
            self._in_flight += 1

    def _call_ended(self) -> None:
        with self._busy_lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.judging_s += time.monotonic() - self._busy_since

    def __repr__(self) -> str:  # never the key
        c = self.cfg
        return f"OpenAIJudge(base_url={c.base_url!r}, model={self.model_id!r}, concurrency={c.concurrency})"

    def scrub_judgment(self, j: Judgment) -> Judgment:
        """``j`` with the key scrubbed from every rationale, the reason and the raw text: a server that echoes the
        key (a hostile or misconfigured one) must not get it into the judge cache, reports or logs."""
        if not self.transport.key_resolved:
            return j
        scrub = self.transport.scrub
        verdicts = {rid: replace(v, rationale=scrub(v.rationale)) for rid, v in j.verdicts.items()}
        reason = None if j.reason is None else scrub(j.reason)
        raw = None if j.raw is None else scrub(j.raw)
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

    def messages(self, request: JudgeRequest, boundary: str | None = None) -> list[dict]:
        images = self._image_parts(request) if self.cfg.send_images else []
        text = user_prompt(request, n_images_shown=len(images), verdict_format=self.cfg.verdict_format,
                           boundary=boundary)
        content: Any = images + [{"type": "text", "text": text}] if images else text
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": content}]

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

    async def _judge_one(self, client, sem: asyncio.Semaphore, request: JudgeRequest) -> Judgment:
        ids = [r.id for r in request.rubrics]
        boundary = new_boundary()  # per call: the policy cannot predict it; the parser cuts what the judge quotes
        try:
            kwargs = self._kwargs(request, self.messages(request, boundary))
        except (OSError, ValueError) as e:  # an unreadable file, or one that is not an image: nothing is sent
            return Judgment("failed", reason=self.transport.scrub(f"could not read image: {e}"))
        try:
            content, finish, attempts = await self.transport.post(client, sem, kwargs, request.sample_id)
        except RequestFailed as e:
            self.stats.retries += max(0, e.attempts - 1)
            log.warning("judge %s failed: %s", request.sample_id, e.reason)
            return Judgment("failed", reason=e.reason)
        self.stats.retries += attempts - 1
        j = self.scrub_judgment(parse_judgment(content, ids, boundary=boundary, quoted=quoted_forms(request.response)))
        if j.status != "ok" and finish == "length":
            j.reason = f"{j.reason}; output hit max_tokens"
        if j.status == "failed":
            log.warning("judge %s: unparseable output: %s", request.sample_id, j.reason)
        return j

    def _where(self) -> str:
        return f"judge openai at {self.cfg.base_url} ({self.model_id})"

    async def ajudge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        if not requests:
            return []
        shared = SHARED_SLOTS.get()  # calls streamed together share one bound (JudgeStream)
        sem = shared if shared is not None else asyncio.Semaphore(self.cfg.concurrency)
        n = len(requests)
        # the batch alone decides the failure budget (BudgetedJudge: a call of failure_window or more counts
        # whole): past this many failures it fails whatever the rest answers
        budget = self.max_failed_frac < 1
        early = budget and n >= self.failure_window
        allowed = self.max_failed_frac * n
        # a server that stopped answering: a streak of failed attempts beyond the budget's share of the call, or of
        # the failure window for a call smaller than it, stops every call, small ones too
        allowed_streak = self.max_failed_frac * max(n, self.failure_window)
        self.stats.failed_streak = 0
        self._call_started()
        client = UsageCountingClient(self.transport.client(), self.usage)
        out: list[Judgment | None] = [None] * n
        tasks: dict[asyncio.Task, int] = {}
        try:
            with frozen_heap():  # no full collection stalls the in-flight calls
                tasks = {asyncio.ensure_future(self._judge_one(client, sem, r)): i for i, r in enumerate(requests)}
                pending = set(tasks)
                n_failed = 0
                while pending:
                    timeout = None
                    if self.stage_deadline_s is not None:
                        timeout = self.stage_deadline_s - self.busy_s()
                        if timeout <= 0:
                            raise JudgeDeadlineExceeded(
                                f"{self._where()}: judge.stage_deadline_s={self.stage_deadline_s:g} passed with "
                                f"{len(pending)} of {n} judgments of this call unanswered (cancelled); "
                                f"{failure_summary([j for j in out if j is not None])}"
                            )
                    if budget:  # wake up to look at the attempts too
                        timeout = STREAK_POLL_S if timeout is None else min(timeout, STREAK_POLL_S)
                    done, pending = await asyncio.wait(pending, timeout=timeout,
                                                       return_when=asyncio.FIRST_COMPLETED)
                    for t in done:
                        j = out[tasks[t]] = t.result()
                        n_failed += j.counts_as_failed
                    if budget and pending and self.stats.failed_streak > allowed_streak:
                        errors = ", ".join(f"{c}x {k}" for k, c in sorted(self.stats.errors.items(),
                                                                           key=lambda kv: -kv[1])[:3])
                        raise JudgeFailureBudgetExceeded(
                            f"{self._where()}: the last {self.stats.failed_streak} attempts failed without one "
                            f"answer in between (errors so far: {errors}), more than judge.max_failed_frac="
                            f"{self.max_failed_frac:g} of max(this call's {n} requests, judge.failure_window="
                            f"{self.failure_window}): the server stopped answering; {len(pending)} judgments still "
                            "queued or in flight (cancelled)"
                        )
                    if early and pending and n_failed > allowed:
                        raise JudgeFailureBudgetExceeded(
                            f"{self._where()}: {failure_summary([j for j in out if j is not None])} with "
                            f"{len(pending)} of {n} still queued or in flight (cancelled): above "
                            f"judge.max_failed_frac={self.max_failed_frac:g} whatever they answer; stopping instead "
                            "of going on with missing judgments (fix the judge, or raise the budget)"
                        )
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()
            self._call_ended()
            done_js = [j for j in out if j is not None]
            self.stats.requests += len(done_js)
            for j in done_js:
                self.stats.statuses[j.status] += 1
        return list(out)  # type: ignore[arg-type]

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        return run_sync(lambda: self.ajudge(requests))

    # -- preflight -------------------------------------------------------------------------------------------
    async def apreflight(self) -> None:
        await self.transport.apreflight()

    def preflight(self) -> None:
        """One 1-token completion (``ChatTransport.preflight``): raises ``JudgeConfigError`` or
        ``JudgeUnavailable`` naming URL, model and the server's answer."""
        self.transport.preflight()

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
        try:
            content, _, _ = await self.transport.post_once(kw, "teacher")
        except RequestFailed as e:
            raise RuntimeError(f"teacher call to {self.cfg.base_url} ({self.model_id}) failed: {e.reason}") from None
        # a server echoing the bearer token must not get it into the teacher's candidates (a DVC output, MLflow)
        return self.transport.scrub(content or "")

    def generate(self, system: str, user: str, schema: dict | None = None, max_tokens: int | None = None) -> str:
        return run_sync(lambda: self.agenerate(system, user, schema, max_tokens))


class UsageCountingClient:
    """An ``openai.AsyncOpenAI`` whose ``post`` answers are counted into a ``TokenUsage`` (their ``usage``); every
    other attribute is the client's."""

    def __init__(self, client, usage: TokenUsage):
        self._client, self._usage = client, usage

    async def post(self, *args, **kwargs):
        resp = await self._client.post(*args, **kwargs)
        self._usage.add_response(resp)
        return resp

    def __getattr__(self, name):
        return getattr(self._client, name)
