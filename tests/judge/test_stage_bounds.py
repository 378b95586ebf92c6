"""The judge bound per stage: a closed port named as such, the cache keyed by the server, the failure budget
acting while a batch runs, the stage-level deadline, and the API key scrubbed from the teacher's output.
Against the loopback server; each attack here passed silently (or slowly) before."""

import json
import socket
import time

import pytest

from rubricflow.judge import JudgeConfig, JudgeFailureBudgetExceeded, JudgeRequest, JudgeUnavailable, Rubric, make_judge
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeDeadlineExceeded
from rubricflow.judge.openai_backend import OpenAIJudge
from rubricflow.testing.judge_server import LoopbackJudgeServer

RUBRICS = [Rubric("R01", "The counts stated match the image."), Rubric("R02", "The boxed answer is present.")]
SECRET = "sk-test-teacher-0123456789abcdef"


def jcfg(url, judge=None, **kw) -> JudgeConfig:
    opts = dict(base_url=url, model="loopback-judge", timeout_s=1.0, max_retries=0, backoff_initial_s=0.01,
                backoff_jitter_s=0.0, request_deadline_s=5.0)
    opts.update(kw)
    return JudgeConfig(**{"backend": "openai", "cache_enabled": False, "openai": OpenAIJudgeConfig(**opts),
                          **(judge or {})})


def req(i, response=None):
    return JudgeRequest(f"s{i}", "How many red shapes are there?", response or f"red = {i}. \\boxed{{{i}}}", RUBRICS)


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_a_closed_port_is_reported_as_connection_refused_naming_the_url(http_client):
    """The default (aiohttp) client called a closed port "Request timed out"."""
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(JudgeUnavailable) as e:
        make_judge(jcfg(url, http_client=http_client))
    assert f"connection refused: nothing listens at {url}" in str(e.value)
    assert "timed out" not in str(e.value)


def test_the_cache_never_answers_for_another_server(tmp_path):
    """The attack: a run against an "everything passes" server, then the same model name on another server: every
    verdict came from the cache (the hanging server was never asked; the stage exited 0)."""
    cache = {"cache_enabled": True, "cache_path": str(tmp_path / "cache.sqlite")}
    with LoopbackJudgeServer(verdict_fn=lambda rid, resp: (True, True)) as passing:
        out = make_judge(jcfg(passing.base_url, judge=cache), preflight=False).judge([req(1), req(2)])
        assert all(v.satisfied for o in out for v in o.verdicts.values())
    with LoopbackJudgeServer(verdict_fn=lambda rid, resp: (True, False)) as other:
        judge = make_judge(jcfg(other.base_url, judge=cache), preflight=False)
        out = judge.judge([req(1), req(2)])
        assert other.requests == 2  # asked, not answered from the first server's verdicts
        assert not any(v.satisfied for o in out for v in o.verdicts.values())
        assert judge.judge([req(1), req(2)]) and other.requests == 2  # its own verdicts are cached


def test_the_failure_budget_acts_while_the_batch_runs_and_cancels_the_rest():
    """The attack: every call rejected (or hanging); the budget was checked only after the whole batch, so every
    request was sent (and waited for). Now the batch stops as soon as it cannot pass the budget."""
    n = 40
    with LoopbackJudgeServer() as srv:
        cfg = jcfg(srv.base_url, concurrency=1, judge={"max_failed_frac": 0.2, "failure_window": 16})
        judge = make_judge(cfg, preflight=False)
        with pytest.raises(JudgeFailureBudgetExceeded) as e:
            judge.judge([req(i, f"x {i} [[fault:http400]]") for i in range(n)])
        assert srv.requests < n // 2  # 0.2 x 40 = 8 failures allowed: the 9th ends the batch
        assert "still queued or in flight (cancelled)" in str(e.value) and srv.base_url in str(e.value)
        assert "http 400" in str(e.value)
        # a batch smaller than the window keeps the rolling-window rule (BudgetedJudge), no early stop
        srv_before = srv.requests
        out = make_judge(jcfg(srv.base_url, judge={"failure_window": 16}), preflight=False).judge(
            [req(i, f"y {i} [[fault:http400]]") for i in range(4)])
        assert [o.status for o in out] == ["failed"] * 4 and srv.requests == srv_before + 4


def test_a_stage_deadline_stops_a_judge_that_hangs_after_the_preflight():
    """The attack: a server that answers the preflight, then hangs: each request waited its own deadline, the
    queue for a concurrency slot uncounted (24 min for stratify). ``judge.stage_deadline_s`` bounds the stage's
    judging in all, across calls."""
    with LoopbackJudgeServer(hang_s=60.0) as srv:
        cfg = jcfg(srv.base_url, concurrency=2, timeout_s=30.0, request_deadline_s=60.0,
                   judge={"stage_deadline_s": 1.5})
        judge = make_judge(cfg)  # the preflight passes
        t0 = time.monotonic()
        with pytest.raises(JudgeDeadlineExceeded) as e:
            judge.judge([req(i, f"r {i} [[fault:timeout]]") for i in range(8)])
        assert time.monotonic() - t0 < 30  # the stage deadline, not a request's 30 s attempt
        msg = str(e.value)
        assert "judge.stage_deadline_s=1.5 passed with 8 of 8 judgments of this call unanswered" in msg
        assert srv.base_url in msg
        with pytest.raises(JudgeDeadlineExceeded):  # spent: the next call of the same stage stops at once
            judge.judge([req(9)])


def test_the_teacher_output_never_carries_the_api_key(tmp_path):
    """The attack: a server echoing the bearer token into the teacher's completion put it verbatim into
    candidates.json (a DVC output) and the MLflow artifact."""
    from rubricflow.methods.rucl.rubrics.pool import save_pool
    from rubricflow.methods.rucl.rubrics.teacher import generate_pool

    def echo(body):
        items = [{"category": "logical_coherence", "text": f"Check the key {SECRET} in step {i}."} for i in range(4)]
        return json.dumps({"rubrics": items})

    with LoopbackJudgeServer(content_fn=echo, api_key=SECRET) as srv:
        teacher = OpenAIJudge(OpenAIJudgeConfig(base_url=srv.base_url, model="loopback-judge", timeout_s=2.0,
                                                max_retries=0), api_key=SECRET)
        raw = teacher.generate("system", "user")
        assert SECRET not in raw and "***" in raw
        pool = generate_pool(teacher, 4, ["q"], max_calls=1)
    path = tmp_path / "candidates.json"
    save_pool(pool, path)
    assert SECRET not in path.read_text() and "***" in path.read_text()


def test_a_judge_that_hangs_after_the_preflight_fails_after_a_few_attempt_timeouts():
    """With no stage deadline set: every request was allowed its own deadline (queueing uncounted), so the batch ran
    for the sum of them. Now more consecutive failed attempts than the budget allows stop the batch."""
    n = 64
    with LoopbackJudgeServer(hang_s=60.0) as srv:
        cfg = jcfg(srv.base_url, concurrency=4, timeout_s=0.3, max_retries=10, request_deadline_s=30.0,
                   judge={"max_failed_frac": 0.2, "failure_window": 16})
        judge = make_judge(cfg)  # the preflight passes
        with pytest.raises(JudgeFailureBudgetExceeded) as e:
            judge.judge([req(i, f"h {i} [[fault:timeout]]") for i in range(n)])
        assert "attempts failed without one answer in between" in str(e.value)
        assert "the server stopped answering" in str(e.value) and srv.base_url in str(e.value)
        assert srv.requests < 1 + 2 * 13  # the preflight and about 13 attempts, not 64 requests x 11 attempts


def test_a_server_that_answers_between_failures_is_not_stopped():
    n = 32
    with LoopbackJudgeServer() as srv:
        cfg = jcfg(srv.base_url, concurrency=1, max_retries=2, judge={"max_failed_frac": 0.2, "failure_window": 16})
        out = make_judge(cfg, preflight=False).judge(
            [req(i, f"m {i} [[fault:http500*1]]" if i % 2 else None) for i in range(n)])
        assert all(o.status == "ok" for o in out)  # every other request needs one retry; nothing stops the batch


# ------------------------------------------------------------------ issue 37, item 6: budgets and bounds


@pytest.mark.parametrize("fault", ["http429", "http503"])
def test_a_throttling_burst_right_after_the_preflight_honours_retry_after(fault):
    """The attack: every request of a batch answered 429 (or 503) with ``Retry-After: 1`` once; the burst of failed
    attempts counted as "the server stopped answering" and the stage aborted before one Retry-After was honoured.
    A server asking to wait is answering: the requests wait and succeed."""
    n = 24
    with LoopbackJudgeServer(retry_after="1") as srv:
        cfg = jcfg(srv.base_url, concurrency=16, max_retries=2, request_deadline_s=10.0,
                   judge={"max_failed_frac": 0.2, "failure_window": 16})
        judge = make_judge(cfg)  # the preflight passes
        t0 = time.monotonic()
        out = judge.judge([req(i, f"t {i} [[fault:{fault}*1]]") for i in range(n)])
        assert [o.status for o in out] == ["ok"] * n
        assert 1.0 <= time.monotonic() - t0 < 8
        assert srv.faults[fault] == n and srv.requests == 1 + 2 * n


@pytest.mark.parametrize("fault", ["timeout", "slow_stream"])
def test_a_hanging_or_dripping_judge_with_fewer_requests_than_the_window_fails_fast(fault):
    """The attack: 24 requests against a failure window of 64, the server hanging (or dripping its answer) after
    the preflight: no early stop applied to a batch smaller than the window, so every request ran to its own
    deadline. The "stopped answering" streak now counts for every batch (its bound scales with
    max(requests, failure_window))."""
    n = 24
    with LoopbackJudgeServer(hang_s=60.0, slow_chunk_s=5.0) as srv:
        cfg = jcfg(srv.base_url, concurrency=16, timeout_s=0.3, max_retries=10, request_deadline_s=6.0,
                   judge={"max_failed_frac": 0.2, "failure_window": 64})
        judge = make_judge(cfg)
        t0 = time.monotonic()
        with pytest.raises(JudgeFailureBudgetExceeded) as e:
            judge.judge([req(i, f"d {i} [[fault:{fault}]]") for i in range(n)])
        assert time.monotonic() - t0 < 4  # a couple of attempt timeouts, not the 6 s request deadline
        assert "the server stopped answering" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
@pytest.mark.parametrize("fault", ["huge_body", "huge_content"])
def test_a_judge_answer_larger_than_the_cap_is_refused_unread_and_not_retried(http_client, fault):
    """The attack: a judge answering bodies of tens of MB (each read whole and parsed, seconds of client CPU). The
    body read is capped (``judge.openai.max_response_bytes``): with or without a Content-Length, the answer is a
    failed judgment naming the cap, after one attempt."""
    with LoopbackJudgeServer(huge_body_bytes=8 * 1024**2) as srv:
        cfg = jcfg(srv.base_url, http_client=http_client, max_retries=3, timeout_s=10.0, request_deadline_s=20.0,
                   max_response_bytes=256 * 1024, judge={"max_failed_frac": 1.0})
        judge = make_judge(cfg)
        t0 = time.monotonic()
        (out,) = judge.judge([req(1, f"big [[fault:{fault}]]")])
        assert time.monotonic() - t0 < 5
    assert out.status == "failed" and "judge.openai.max_response_bytes=262144" in out.reason
    assert srv.faults[fault] == 1  # not retried: the server would answer the same


def test_overlapping_calls_count_their_common_time_once_against_the_stage_deadline():
    """Streamed scoring sends one call per finished group, so calls overlap; each added its own duration, and two
    overlapping 0.4 s calls spent 0.8 s of the deadline in 0.4 s of wall time."""
    import asyncio

    with LoopbackJudgeServer(latency_s=0.4) as srv:
        judge = OpenAIJudge(OpenAIJudgeConfig(base_url=srv.base_url, model="loopback-judge", timeout_s=5.0,
                                              max_retries=0, concurrency=8))

        async def both():
            t0 = time.monotonic()
            await asyncio.gather(judge.ajudge([req(1), req(2)]), judge.ajudge([req(3), req(4)]),
                                 judge.ajudge([req(5)]))
            return time.monotonic() - t0

        wall = asyncio.run(both())
        assert srv.requests == 5 and judge.busy_s() == judge.judging_s
        assert 0.4 <= judge.judging_s <= wall + 0.05  # once, not 3 x 0.4 s
        before = judge.judging_s
        judge.judge([req(6)])  # a later call adds its own time
        assert judge.judging_s >= before + 0.4
