"""JudgeStream (judging while the caller goes on) and judge token usage (counted from answers, or estimated)."""

import threading

import pytest

from rubricflow.judge import JudgeConfig, JudgeFailureBudgetExceeded, ProgrammaticJudge, Rubric, make_judge
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.protocol import JudgeRequest
from rubricflow.judge.stream import JudgeStream, server_backed
from rubricflow.judge.usage import TokenUsage, usage_of
from rubricflow.testing.metered_judge import MeteredJudgeServer

RUBRICS = [Rubric("R01", "The steps are shown.", "foundational"), Rubric("R02", "The answer is boxed.", "advanced")]


def reqs(n, tag="r", rubrics=RUBRICS):
    return [JudgeRequest(f"{tag}{i}", "What is 2 + 3?", f"2 + 3 = 5 ({tag}{i}). \\boxed{{5}}", rubrics)
            for i in range(n)]


def judge_for(srv, concurrency=4, **kw):
    return make_judge(JudgeConfig(backend="openai", cache_enabled=False, **kw, openai=OpenAIJudgeConfig(
        base_url=srv.base_url, model="loopback-judge", concurrency=concurrency, max_retries=0, timeout_s=5)))


def test_streamed_calls_give_the_batched_judgments_within_the_concurrency_bound():
    with MeteredJudgeServer(latency_range_s=(0.02, 0.05), concurrency=64) as srv:
        judge = judge_for(srv, concurrency=4)
        assert server_backed(judge) and not server_backed(ProgrammaticJudge())
        batched = judge.judge(reqs(12))
        with JudgeStream(judge) as stream:
            assert stream.max_in_flight == 4  # judge.openai.concurrency, through the wrappers
            futs = [stream.submit(reqs(12)[i : i + 3]) for i in range(0, 12, 3)]
            streamed = [j for f in futs for j in f.result(30)]
        assert srv.max_in_flight <= 4 and stream.peak_in_flight <= 4
    assert [j.verdicts for j in streamed] == [j.verdicts for j in batched]
    assert all(j.status == "ok" for j in streamed)


def test_a_call_that_raises_raises_from_its_future_and_close_cancels_the_rest():
    with MeteredJudgeServer(fault_all="http500", concurrency=8) as srv:
        judge = judge_for(srv, max_failed_frac=0.2, failure_window=4, preflight=False)
        stream = JudgeStream(judge)
        try:
            fut = stream.submit(reqs(8))
            with pytest.raises(JudgeFailureBudgetExceeded):
                fut.result(30)
        finally:
            stream.close()
    assert not any(t.name == "judge-stream" and t.is_alive() for t in threading.enumerate())


def test_openai_usage_is_counted_from_each_answer_and_grows_with_the_rubrics_asked():
    with MeteredJudgeServer(concurrency=8) as srv:
        judge = judge_for(srv)
        u = usage_of(judge)
        assert isinstance(u, TokenUsage) and not u.estimated and u.snapshot() == (0, 0)  # the preflight is not counted
        base = (srv.prompt_tokens, srv.completion_tokens)
        judge.judge(reqs(4))
        both = u.snapshot()
        assert both == (srv.prompt_tokens - base[0], srv.completion_tokens - base[1]) and u.calls == 4 and both[0] > 0
        judge.judge(reqs(4, tag="s", rubrics=RUBRICS[:1]))
        one = (u.prompt_tokens - both[0], u.completion_tokens - both[1])
        assert 0 < one[0] < both[0] and 0 < one[1] < both[1]  # one rubric: a shorter prompt and a shorter answer


def test_programmatic_usage_is_an_estimate_and_said_so():
    from rubricflow.judge.usage import estimate_request

    judge = ProgrammaticJudge()
    u = usage_of(judge)
    assert u.estimated and u.snapshot() == (0, 0)
    r = Rubric("B01", "The answer is boxed.", "foundational", check="boxed_present")
    req = JudgeRequest("a", "What is 2 + 3?", "a = 2, b = 3. \\boxed{5}", [r],
                       facts={"perception": [["a", 2], ["b", 3]], "intermediate": [], "target": None}, answer="5")
    out = judge.judge([req])
    assert out[0].status == "ok"
    assert u.snapshot() == estimate_request(req, out[0].verdicts) and u.prompt_tokens > 0 and u.completion_tokens > 0


def test_usage_ignores_bodies_without_token_counts():
    u = TokenUsage()
    for body in (None, {}, {"usage": None}, {"usage": {"prompt_tokens": True, "completion_tokens": 1}},
                 {"usage": {"prompt_tokens": "3", "completion_tokens": 1}}):
        u.add_response(body)
    assert u.snapshot() == (0, 0) and u.calls == 0
    u.add_response({"usage": {"prompt_tokens": 7, "completion_tokens": 2}})
    assert u.snapshot() == (7, 2) and u.calls == 1


def test_overlapping_fan_outs_share_one_freeze_and_walk_the_frozen_heap_never(monkeypatch):
    """Streamed calls overlap: only the first fan-out asks gc.get_freeze_count (a walk of the whole frozen heap with
    the GIL held, which stalls generation), the heap stays frozen until the last one ends, then is unfrozen."""
    import gc

    from rubricflow.judge import transport

    real = gc.get_freeze_count
    asked = []
    monkeypatch.setattr(gc, "get_freeze_count", lambda: asked.append(1) or real())
    assert real() == 0
    with transport.frozen_heap():
        with transport.frozen_heap():  # a second call streamed while the first is in flight
            with transport.frozen_heap():
                pass
        assert len(asked) == 1  # asked once, on an unfrozen heap (cheap), never while frozen
        assert real() > 0  # the first call is still in flight: still frozen
    assert real() == 0 and len(asked) == 1


def test_streamed_calls_from_threads_leave_the_heap_as_it_was():
    import gc

    with MeteredJudgeServer(latency_range_s=(0.02, 0.05), concurrency=16) as srv:
        judge = judge_for(srv, concurrency=4)
        with JudgeStream(judge) as stream:
            futs = [stream.submit(reqs(4, tag=f"t{k}-")) for k in range(4)]
            out = [j for f in futs for j in f.result(30)]
        assert [j.status for j in out] == ["ok"] * 16
    assert gc.get_freeze_count() == 0


def test_a_slot_is_free_again_with_its_answer_not_with_the_slowest_answer_of_its_call():
    """Concurrency 4: a call of 4 with one slow answer, then a call of 4 fast ones. The fast call runs in the three
    slots the first call's fast answers free (an openai judge shares the stream's slots per request), so it ends long
    before the slow answer, and the server never sees more than 4 requests at once."""
    import asyncio
    import time

    from rubricflow.testing.judge_server import LoopbackJudgeServer

    class SlowOnOne(LoopbackJudgeServer):
        async def _respond(self, request, body, fault):
            text = " ".join(str(m.get("content")) for m in body.get("messages", []))
            await asyncio.sleep(1.5 if "SLOW" in text else 0.05)
            return await super()._respond(request, body, fault)

    with SlowOnOne() as srv:
        judge = judge_for(srv, concurrency=4)
        first = reqs(3, tag="a") + [JudgeRequest("slow", "What is 2 + 3?", "SLOW 2 + 3 = 5. \\boxed{5}", RUBRICS)]
        with JudgeStream(judge) as stream:
            assert stream.shares_slots
            t0 = time.monotonic()
            fa = stream.submit(first)
            fb = stream.submit(reqs(4, tag="b"))
            fb.result(30)
            t_b = time.monotonic() - t0
            fa.result(30)
            t_a = time.monotonic() - t0
        assert t_b < 0.9 < 1.5 <= t_a, (t_b, t_a)
        assert srv.max_in_flight <= 4 and stream.peak_in_flight == 4


def test_a_backend_without_shared_slots_reserves_its_calls_slots():
    judge = ProgrammaticJudge()
    with JudgeStream(judge, max_in_flight=3) as stream:
        assert not stream.shares_slots
        r = Rubric("B01", "The answer is boxed.", "foundational", check="boxed_present")
        fut = stream.submit([JudgeRequest(f"p{i}", "What is 2 + 3?", "\\boxed{5}", [r], facts={
            "perception": [], "intermediate": [], "target": None}, answer="5") for i in range(5)])
        assert [j.status for j in fut.result(30)] == ["ok"] * 5
        assert stream.peak_in_flight == 3
