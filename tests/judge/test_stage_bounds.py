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
