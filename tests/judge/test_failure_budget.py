"""A broken judge stops the stage it would ruin: the preflight (closed port, 401, 404, all-500, hanging server),
the per-request deadline, unretried 4xx, the failure budget in stratify (no tiers written from a failed
calibration) and the CLI's one-line error. Against the loopback server; elapsed times are printed (``-s``) and
bounded generously (a broken judge must not cost minutes), they are not benchmarks."""

import socket
import time

import pytest
import typer

from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.traces import render_trace
from rubricflow.judge import (
    BudgetedJudge,
    JudgeConfig,
    JudgeConfigError,
    JudgeFailureBudgetExceeded,
    JudgeRequest,
    JudgeUnavailable,
    Judgment,
    Rubric,
    make_judge,
)
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.methods.rucl.rubrics import RubricsConfig, stratify_pool, write_pool
from rubricflow.testing.judge_server import LoopbackJudgeServer

BOUND_S = 30.0  # generous: each case below fails in well under a few seconds when it works
RUBRICS = [Rubric("R01", "The counts stated match the image."), Rubric("R02", "The boxed answer is present.")]


def jcfg(url, **kw) -> JudgeConfig:
    opts = dict(base_url=url, model="loopback-judge", timeout_s=1.0, max_retries=2, backoff_initial_s=0.05,
                backoff_jitter_s=0.0, request_deadline_s=5.0)
    opts.update(kw)
    return JudgeConfig(backend="openai", cache_enabled=False, openai=OpenAIJudgeConfig(**opts))


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def timed_error(exc_type, fn):
    t0 = time.monotonic()
    with pytest.raises(exc_type) as e:
        fn()
    dt = time.monotonic() - t0
    return e.value, dt


def test_preflight_closed_port_names_url_and_model():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    err, dt = timed_error(JudgeUnavailable, lambda: make_judge(jcfg(url)))
    print(f"closed port: error after {dt:.2f}s: {err}")
    assert dt < BOUND_S
    assert f"judge preflight: backend openai at {url}, model 'loopback-judge': no usable answer" in str(err)
    assert "(after 3 attempts)" in str(err)  # the openai client's words for a refused connection vary by HTTP layer
    assert isinstance(err, RuntimeError) and not isinstance(err, ValueError)  # Prefect may retry it


def test_preflight_401_is_a_config_error_not_retried():
    with LoopbackJudgeServer(api_key="right-key") as srv:
        cfg = jcfg(srv.base_url)
        err, dt = timed_error(JudgeConfigError, lambda: make_judge(cfg))  # no key sent
        print(f"401: error after {dt:.2f}s: {err}")
        assert dt < BOUND_S and srv.requests == 1  # not retried
        assert "server answered http 401" in str(err) and "api_key_env" in str(err)
        assert srv.base_url in str(err)


def test_preflight_404_unknown_model():
    with LoopbackJudgeServer(known_models={"served-name"}) as srv:
        err, _ = timed_error(JudgeConfigError, lambda: make_judge(jcfg(srv.base_url, model="typo-name")))
        assert "model 'typo-name'" in str(err) and "http 404" in str(err) and "unknown model" in str(err)
        assert srv.requests == 1
        assert make_judge(jcfg(srv.base_url, model="served-name")) is not None  # the right name passes


def test_preflight_all_500():
    with LoopbackJudgeServer(fault_all="http500") as srv:
        err, dt = timed_error(JudgeUnavailable, lambda: make_judge(jcfg(srv.base_url)))
        print(f"all-500: error after {dt:.2f}s: {err}")
        assert dt < BOUND_S and "http 500" in str(err) and srv.requests == 3  # 1 + max_retries


def test_preflight_hanging_server_fails_within_the_request_deadline():
    with LoopbackJudgeServer(fault_all="timeout", hang_s=60.0) as srv:
        cfg = jcfg(srv.base_url, timeout_s=1.0, max_retries=10, request_deadline_s=2.5)
        err, dt = timed_error(JudgeUnavailable, lambda: make_judge(cfg))
        print(f"hanging: error after {dt:.2f}s: {err}")
        assert dt < 2.5 + 2.0  # the deadline, not 11 attempts x 1 s
        assert "timeout" in str(err) and ("request_deadline_s=2.5" in str(err) or "within 0.5s" in str(err))


def test_preflight_off_and_programmatic_make_no_call():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    assert make_judge(jcfg(url), preflight=False).name == "openai"
    assert make_judge(jcfg(url).model_copy(update={"preflight": False})).name == "openai"
    assert make_judge(JudgeConfig()).name == "programmatic"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_non_retryable_statuses_fail_after_one_attempt(status):
    with LoopbackJudgeServer() as srv:
        judge = make_judge(jcfg(srv.base_url, max_retries=4), preflight=False)
        out = judge.judge([JudgeRequest("s", "q", f"x [[fault:http{status}]]", RUBRICS)])
        assert out[0].status == "failed" and f"http {status}" in out[0].reason and "(after 1 attempt)" in out[0].reason
        assert srv.requests == 1


def test_retry_after_longer_than_the_deadline_fails_at_once():
    with LoopbackJudgeServer(retry_after="100000") as srv:
        cfg = jcfg(srv.base_url, retry_after_max_s=1e6, request_deadline_s=20.0)
        judge = make_judge(cfg, preflight=False)
        t0 = time.monotonic()
        out = judge.judge([JudgeRequest("s", "q", "x [[fault:http429]]", RUBRICS)])
        assert time.monotonic() - t0 < 5
        assert out[0].status == "failed" and srv.requests == 1
        assert "next retry in 1e+05s would pass request_deadline_s=20" in out[0].reason


def _fail(reason):
    return Judgment("failed", reason=reason)


class Scripted:
    name, model_id, prompt_version = "scripted", "m", "v"

    def __init__(self, batches):
        self.batches = list(batches)

    def judge(self, requests):
        return self.batches.pop(0)


def test_budget_rolling_window_counts_and_top_reasons():
    ok = Judgment("ok")
    judge = BudgetedJudge(Scripted([
        [ok] * 4,  # 4 seen: below the 8 needed before checking
        [ok, ok, ok, _fail("http 500: boom (after 3 attempts)")],  # 1 of 8 = 12.5%: missing, goes on
        [ok, ok, _fail("http 500: boom (after 2 attempts)"), _fail("timeout: no answer")],  # last 10: 3 of 10
    ]), max_failed_frac=0.2, window=10)
    assert [j.status for j in judge.judge([])] == ["ok"] * 4
    assert judge.judge([])[-1].failed
    with pytest.raises(JudgeFailureBudgetExceeded) as e:
        judge.judge([])
    msg = str(e.value)
    assert "judge scripted:m: 3 of 10 judgments failed (30%); top reasons: 2x http 500: boom; 1x timeout" in msg
    assert "judge.max_failed_frac=0.2" in msg and isinstance(e.value, RuntimeError)


def test_budget_first_small_batch_all_failed_is_not_checked_but_a_large_one_is():
    judge = BudgetedJudge(Scripted([[_fail("x")] * 3, [_fail("x")] * 9]), max_failed_frac=0.2, window=64)
    assert len(judge.judge([])) == 3  # 3 judgments: not enough to judge the judge
    with pytest.raises(JudgeFailureBudgetExceeded, match="12 of 12 judgments failed"):
        judge.judge([])


# ------------------------------------------------------------------------------------------------ stratify


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("calib")
    build_synthetic_dataset(d, ["counting"], {"calib": 6, "train": 1}, seed=3, image_size=40)
    return d


def rcfg(tmp_path):
    return RubricsConfig(pool_path=str(tmp_path / "candidates.json"), tiers_path=str(tmp_path / "tiers.json"),
                         table_dir=str(tmp_path / "reports"), n_candidates=6, keep_k=3)


def responder_with(faulty: set[int]):
    """Two responses per sample (the gold trace twice); response number i in ``faulty`` gets an http500."""

    def responder(samples):
        out, i = [], 0
        for s in samples:
            row = []
            for k in range(2):
                gold = render_trace(s.facts, s.answer)
                row.append(f"{gold} [[fault:http500]] #{k}" if i in faulty else f"{gold} #{k}")
                i += 1
            out.append(row)
        return out

    return responder


def test_stratify_with_an_all_failing_judge_raises_and_keeps_the_previous_tiers(dataset, tmp_path):
    rc = rcfg(tmp_path)
    write_pool(rc)
    with LoopbackJudgeServer() as srv:
        cfg = jcfg(srv.base_url, max_retries=1)
        t0 = time.monotonic()
        with pytest.raises(JudgeFailureBudgetExceeded) as e:
            stratify_pool(rc, cfg, dataset, responder=responder_with(set(range(12))))
        print(f"stratify all-500: error after {time.monotonic() - t0:.2f}s: {e.value}")
        assert ("12 of 12 judgments failed (100%); top reasons: 12x http 500: Error code: 500 - injected 500"
                in str(e.value))
        assert not (tmp_path / "tiers.json").exists() and not (tmp_path / "reports").exists()

        previous = '{"previous": true}\n'
        (tmp_path / "tiers.json").write_text(previous)
        with pytest.raises(JudgeFailureBudgetExceeded):
            stratify_pool(rc, cfg, dataset, responder=responder_with(set(range(12))))
        assert (tmp_path / "tiers.json").read_text() == previous


def test_stratify_below_the_budget_keeps_failures_missing(dataset, tmp_path):
    rc = rcfg(tmp_path)
    write_pool(rc)
    with LoopbackJudgeServer() as srv:
        res = stratify_pool(rc, jcfg(srv.base_url, max_retries=0), dataset, responder=responder_with({0, 5}))
    m = res["metrics"]
    assert m["n_judgments"] == 12 and m["n_judge_failed"] == 2  # 2 of 12 = 17% <= 20%
    assert (tmp_path / "tiers.json").exists()
    # the failed judgments are missing: every rubric was judged on at most the 10 answered responses
    import json

    rows = json.loads((tmp_path / "reports" / "stratification.json").read_text())
    assert rows and all(r["n_judged"] <= 10 for r in rows) and max(r["n_judged"] for r in rows) == 10


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_prints_one_line_and_exits_1_on_a_judge_error(monkeypatch, capsys):
    import flows.cli.base as cli

    def spec(cfg, **kw):
        raise JudgeFailureBudgetExceeded("stratify (openai:m:judge-v1): 32 of 32 judgments failed (100%)")

    monkeypatch.setattr(cli, "load_cfg", lambda: None)
    with pytest.raises(typer.Exit) as e:
        cli.run_stage(spec)
    assert e.value.exit_code == 1
    err = capsys.readouterr().err
    assert err == "error: stratify (openai:m:judge-v1): 32 of 32 judgments failed (100%)\n"


def test_cli_rubrics_teacher_at_a_closed_port_exits_1_before_any_work(tmp_path):
    from typer.testing import CliRunner

    url = f"http://127.0.0.1:{closed_port()}/v1"
    pool = tmp_path / "pool.json"
    args = ["--no-track", "--set", "rubrics.teacher=openai", "--set", f"judge.openai.base_url={url}",
            "--set", "judge.openai.max_retries=0", "--set", f"rubrics.pool_path={pool}", "rubrics"]
    t0 = time.monotonic()
    res = CliRunner().invoke(cli_app(), args)
    print(f"cli closed port: exit {res.exit_code} after {time.monotonic() - t0:.2f}s")
    assert res.exit_code == 1, res.output
    assert f"error: judge preflight: backend openai at {url}" in res.output and "Traceback" not in res.output
    assert not pool.exists()


def cli_app():
    from flows.cli import app

    return app


def test_a_judge_that_leaves_out_the_requested_rubrics_exceeds_the_budget_with_one_line():
    """The attack (issue 37, item 3): a judge answering one rubric "n/a" and leaving out the rest passed the
    budget (judge_failures_total 0). A left-out rubric is missing and counts against the budget."""
    with LoopbackJudgeServer(content_fn=lambda body: '{"verdicts": {"R01": "n/a"}}') as srv:
        judge = make_judge(jcfg(srv.base_url, verdict_format="compact"))
        reqs = [JudgeRequest(f"s{i}", "q", f"r{i}", RUBRICS) for i in range(10)]
        err, dt = timed_error(JudgeFailureBudgetExceeded, lambda: judge.judge(reqs))
    msg = str(err)
    assert "\n" not in msg and "10 of 10 judgments failed or left out a requested rubric" in msg
    assert "no verdict on R02" in msg and "judge.max_failed_frac" in msg
