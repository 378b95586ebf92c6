"""A loopback OpenAI-compatible judge server with fixed latency and fault injection (test and bench tooling).

Used by the judge tests and ``bench/judge_throughput.py``; depends only on aiohttp (already required by mlflow)
and the standard library. ``POST /v1/chat/completions`` answers a judgment for the rubric ids requested in the
``response_format`` schema (or listed as ``- ID: text`` lines in the prompt), or whatever ``content_fn(body)``
returns when one is given (teacher tests); the verdicts come from
``verdict_fn(rubric_id, response_text)`` where ``response_text`` is what the judge prompt enclosed in its
``<response-...>`` tags.

Faults are chosen by the *content* of the judged response, so a test controls them per sample: a response
containing ``[[fault:NAME]]`` gets fault NAME on every attempt, ``[[fault:NAME*K]]`` only on its first K attempts
(attempts are counted per distinct prompt, the per-call boundary aside, across runs of the same server). Names:

    http500 http400 http503 http429   error status (503/429 carry ``Retry-After: <retry_after>``)
    http401 http403 http404 http422   error status
    timeout                           answers only after ``hang_s`` seconds
    slow_stream                       sends the body a few bytes every ``slow_chunk_s`` seconds
    truncated_body                    announces a Content-Length, sends half, closes the connection
    huge_content                      a completion whose content is ``huge_body_bytes`` of filler (Content-Length)
    huge_body                         the same streamed in chunks without a Content-Length
    garbage_body                      HTTP 200 whose body is not JSON
    empty_choices                     HTTP 200 with ``"choices": []``
    garbage_content                   a completion whose content is prose without any verdict
    truncated_json                    the judgment JSON cut inside the last verdict (finish_reason=length)
    fenced                            the judgment inside a code fence with prose around it
    bare_scores                       ``{"R01": 1, "R02": 0}`` (RuCL case-study format)

Server-wide faults (every request, the preflight's included): ``fault_all=NAME`` serves fault NAME to every
request; ``api_key=KEY`` answers 401 to a request without ``Authorization: Bearer KEY``; ``known_models={...}``
answers 404 to a request for another model.

Run standalone (the bench does, so the server has its own process):
``python -m rubricflow.testing.judge_server --latency-ms 100`` prints ``PORT <n>`` and serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable

from aiohttp import web

FAULT_RE = re.compile(r"\[\[fault:([a-z0-9_]+)(?:\*(\d+))?\]\]")
TAG_RE = re.compile(r"<(response-[0-9a-f]+)>\n(.*)\n</\1>", re.S)
BOUNDARY_RE = re.compile(r"response-[0-9a-f]+")
RUBRIC_LINE_RE = re.compile(r"^- (\S+): ", re.M)


def loopback_verdict(rubric_id: str, response: str) -> tuple[bool, bool | None]:
    """Default verdicts: deterministic in (rubric, response); every 5th hash is "not applicable"."""
    h = hashlib.sha256(f"{rubric_id}\x1f{response}".encode()).digest()
    if h[0] % 5 == 0:
        return False, None
    return True, h[1] % 2 == 0


def _user_text(body: dict) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            return "\n".join(p.get("text", "") for p in c or [] if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _rubric_ids(body: dict, text: str) -> list[str]:
    try:
        return list(body["response_format"]["json_schema"]["schema"]["properties"]["verdicts"]["required"])
    except (KeyError, TypeError):
        return RUBRIC_LINE_RE.findall(text)


def echo_prompt(body: dict) -> str:
    """A ``content_fn`` of a judge that answers with the prompt it was given (an echoing judge)."""
    return _user_text(body)


def quote_then(verdict: str, tags: bool = True) -> Callable[[dict], str]:
    """A ``content_fn`` of a judge that quotes the judged response (with the prompt's tags, or bare) and then
    answers ``verdict``."""

    def content(body: dict) -> str:
        m = TAG_RE.search(_user_text(body))
        quoted = (m.group(0) if tags else m.group(2)) if m else ""
        return f"The response under review:\n{quoted}\nMy judgment:\n{verdict}"

    return content


class LoopbackJudgeServer:
    """Serve in a background thread: ``with LoopbackJudgeServer(latency_s=0.1) as srv: srv.base_url``."""

    def __init__(
        self,
        latency_s: float = 0.0,
        hang_s: float = 30.0,
        slow_chunk_s: float = 0.25,
        retry_after: str = "1",
        verdict_fn: Callable[[str, str], tuple[bool, bool | None]] = loopback_verdict,
        content_fn: Callable[[dict], str] | None = None,
        model: str = "loopback-judge",
        port: int = 0,
        host: str = "127.0.0.1",
        fault_all: str | None = None,
        api_key: str | None = None,
        known_models: set[str] | None = None,
        huge_body_bytes: int = 32 * 1024**2,
    ):
        self.latency_s = latency_s
        self.hang_s = hang_s
        self.slow_chunk_s = slow_chunk_s
        self.retry_after = retry_after
        self.verdict_fn = verdict_fn
        self.content_fn = content_fn  # request body -> completion text, replacing the judgment (teacher tests)
        self.model = model
        self.fault_all = fault_all  # a fault served to every request (preflight included)
        self.api_key = api_key  # required bearer token, else 401
        self.known_models = known_models  # served model names, else 404
        self.huge_body_bytes = huge_body_bytes  # size of the huge_content / huge_body answers
        self.host, self.port = host, port
        self.requests = 0  # chat completion requests received
        self.faults: Counter[str] = Counter()  # faults served, by name
        self.attempts: Counter[str] = Counter()  # attempts per prompt hash
        self.response_attempts: Counter[str] = Counter()  # attempts per judged response text
        self.log: list[tuple[float, str, str]] = []  # (time, prompt hash, fault or "ok")
        self.headers: list[dict[str, str]] = []  # request headers, for auth tests
        self.bodies: list[dict] = []  # request bodies (set keep_bodies=False for long benchmarks)
        self.keep_bodies = True
        self.in_flight = 0
        self.max_in_flight = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- app -------------------------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    def _completion(self, content: str, finish: str = "stop") -> dict:
        return {
            "id": "chatcmpl-loopback",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def judgment_text(self, body: dict) -> str:
        text = _user_text(body)
        m = TAG_RE.search(text)
        response = m.group(2) if m else ""
        verdicts = {}
        for rid in _rubric_ids(body, text):
            a, s = self.verdict_fn(rid, response)
            verdicts[rid] = {"rationale": "loopback", "applicable": a, "satisfied": s if a else None}
        return json.dumps({"verdicts": verdicts})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._chat_inner(request)
        except (ConnectionError, asyncio.CancelledError):  # the client gave up (timeout test): nothing to send
            return web.Response(status=499)
        finally:
            self.in_flight -= 1

    async def _chat_inner(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "invalid JSON body"}}, status=400)
        if self.keep_bodies:
            self.headers.append(dict(request.headers))
            self.bodies.append(body)
        text = _user_text(body)
        # the backends draw a new boundary per call: a rerun of the same request is still "the same prompt"
        key = hashlib.sha256(BOUNDARY_RE.sub("response-*", text).encode()).hexdigest()[:16]
        self.attempts[key] += 1
        tagged = TAG_RE.search(text)
        judged = tagged.group(2) if tagged else text
        self.response_attempts[judged] += 1
        fault = self.fault_all
        m = FAULT_RE.search(judged)
        if fault is None and m and (m.group(2) is None or self.attempts[key] <= int(m.group(2))):
            fault = m.group(1)
        if self.api_key is not None and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            fault = "http401"
        elif self.known_models is not None and body.get("model") not in self.known_models:
            fault = "http404"
        self.log.append((time.monotonic(), key, fault or "ok"))
        if fault:
            self.faults[fault] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await self._respond(request, body, fault)

    async def _respond(self, request: web.Request, body: dict, fault: str | None) -> web.StreamResponse:
        err = lambda status, **h: web.json_response(  # noqa: E731
            {"error": {"message": f"injected {status}", "type": "server_error"}}, status=status, headers=h
        )
        if fault in ("http500", "http400", "http401", "http403", "http404", "http422"):
            return err(int(fault[4:]))
        if fault in ("http503", "http429"):
            return err(int(fault[4:]), **{"Retry-After": self.retry_after})
        if fault == "timeout":
            await asyncio.sleep(self.hang_s)
        if fault == "garbage_body":
            return web.Response(text="<html>502 Bad Gateway</html>", content_type="application/json")
        if fault == "empty_choices":
            doc = self._completion("")
            doc["choices"] = []
            return web.json_response(doc)
        if fault == "huge_body":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})  # chunked: no Content-Length
            await resp.prepare(request)
            await resp.write(b'{"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "')
            chunk = b"x" * 65536
            for _ in range(self.huge_body_bytes // len(chunk)):
                await resp.write(chunk)
            await resp.write(b'"}}]}')
            await resp.write_eof()
            return resp
        content = self.content_fn(body) if self.content_fn else self.judgment_text(body)
        finish = "stop"
        if fault == "huge_content":
            content = "x" * self.huge_body_bytes
        if fault == "garbage_content":
            content = "I am unable to grade this response."
        elif fault == "truncated_json":
            content, finish = content[: content.rfind('"satisfied"') + 5], "length"  # last verdict cut off
        elif fault == "fenced":
            content = f"Here is my judgment:\n```json\n{content}\n```\nHope this helps."
        elif fault == "bare_scores":
            v = json.loads(content)["verdicts"]
            content = json.dumps({k: (int(x["satisfied"]) if x["applicable"] else None) for k, x in v.items()})
        payload = json.dumps(self._completion(content, finish)).encode()
        if fault == "slow_stream":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(payload)
            await resp.prepare(request)
            for i in range(0, len(payload), 16):
                await resp.write(payload[i : i + 16])
                await asyncio.sleep(self.slow_chunk_s)
            await resp.write_eof()
            return resp
        if fault == "truncated_body":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(payload)
            await resp.prepare(request)
            await resp.write(payload[: len(payload) // 2])
            request.transport.close()
            return resp
        return web.Response(body=payload, content_type="application/json")

    def attempts_for(self, response: str) -> int:
        """How many requests judged exactly this response text (as enclosed in the prompt's tags)."""
        return self.response_attempts[response]

    # -- lifecycle -------------------------------------------------------------------------------------------
    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self) -> "LoopbackJudgeServer":
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._start())
            except BaseException as e:  # report to the starting thread
                errors.append(e)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="loopback-judge", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise RuntimeError(f"loopback judge server failed to start: {errors[0]!r}")
        return self

    async def _shutdown(self) -> None:
        await self._runner.cleanup()  # type: ignore[union-attr]
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(15)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
                self._loop = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> "LoopbackJudgeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=0.0, help="fixed delay before every answer")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    args = ap.parse_args(argv)
    serve_forever(LoopbackJudgeServer(latency_s=args.latency_ms / 1000, port=args.port))


def serve_forever(srv: LoopbackJudgeServer) -> None:
    """Serve ``srv`` in this process until interrupted, printing ``PORT <n>`` once it listens (for a parent that
    starts the server as a child process)."""

    async def serve() -> None:
        await srv._start()
        print(f"PORT {srv.port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
