"""A loopback judge that behaves like a judge server under load: a latency per call drawn from a range, a limit on
the calls it serves at once, and token counts in every answer's ``usage`` (test and bench tooling).

``MeteredJudgeServer`` is ``rubricflow.testing.judge_server.LoopbackJudgeServer`` (its verdicts and faults) plus:

* ``latency_range_s=(lo, hi)``: each call waits ``uniform(lo, hi)`` seconds (a seeded draw) *while holding one of
  ``concurrency`` slots*; calls beyond ``concurrency`` queue for a slot, as on a server with that many sequences in
  flight;
* ``usage``: ``prompt_tokens`` and ``completion_tokens`` at 4 characters per token of the messages' text and of the
  answer (a stand-in for a tokenizer, proportional to what a real judge reads and writes); ``tokens`` sums them.

Run standalone (``bench/judge_pipeline.py`` does, so the server has its own process):
``python -m rubricflow.testing.metered_judge --latency-ms 100 500 --concurrency 16`` prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import random

from aiohttp import web

from rubricflow.testing.judge_server import LoopbackJudgeServer, serve_forever

CHARS_PER_TOKEN = 4


def _message_chars(body: dict) -> int:
    n = 0
    for m in body.get("messages") or []:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            n += len(c)
        elif isinstance(c, list):
            n += sum(len(p.get("text", "")) for p in c if isinstance(p, dict))
    return n


class MeteredJudgeServer(LoopbackJudgeServer):
    def __init__(self, latency_range_s: tuple[float, float] = (0.0, 0.0), concurrency: int = 16, seed: int = 0,
                 **kw):
        super().__init__(**kw)
        lo, hi = latency_range_s
        if not 0 <= lo <= hi or concurrency < 1:
            raise ValueError(f"latency range ({lo}, {hi}) and concurrency {concurrency}: need 0 <= lo <= hi, c >= 1")
        self.latency_range_s, self.concurrency = (lo, hi), concurrency
        self._rng = random.Random(seed)
        self._slots: asyncio.Semaphore | None = None
        self._body: dict | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self._slots is None:  # created on the server's loop
            self._slots = asyncio.Semaphore(self.concurrency)
        async with self._slots:
            lo, hi = self.latency_range_s
            if hi > 0:
                await asyncio.sleep(self._rng.uniform(lo, hi))
            return await super()._chat(request)

    async def _respond(self, request: web.Request, body: dict, fault: str | None) -> web.StreamResponse:
        self._body = body  # read by _completion below, with no await in between on the answering path
        return await super()._respond(request, body, fault)

    def _completion(self, content: str, finish: str = "stop") -> dict:
        doc = super()._completion(content, finish)
        p = -(-_message_chars(self._body or {}) // CHARS_PER_TOKEN)
        c = -(-len(content) // CHARS_PER_TOKEN)
        self.prompt_tokens += p
        self.completion_tokens += c
        doc["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        return doc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, nargs=2, default=(0.0, 0.0), metavar=("LO", "HI"),
                    help="each call waits uniform(LO, HI) ms holding a slot")
    ap.add_argument("--concurrency", type=int, default=16, help="calls served at once (the rest queue)")
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    args = ap.parse_args(argv)
    srv = MeteredJudgeServer(latency_range_s=(args.latency_ms[0] / 1000, args.latency_ms[1] / 1000),
                             concurrency=args.concurrency, port=args.port)
    srv.keep_bodies = False
    serve_forever(srv)


if __name__ == "__main__":
    main()
