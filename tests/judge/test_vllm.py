"""A real OpenAI-compatible server: vLLM's api_server (CPU build in .venv-vllm) serving a tiny offline model.

A random tiny model under JSON-schema constrained decoding still returns schema-valid JSON, so the judge path
(prompt, response_format, parser, cache) runs end to end against vLLM. The server runs with xgrammar and
``disable_any_whitespace`` (a random model otherwise pads the JSON with newlines until max_tokens) and the
schema caps the rationale length. Engine start takes ~40-90 s on a shared 2-core machine.
"""

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from rubricflow.judge import CachedJudge, JudgeConfig, JudgeRequest, make_judge
from rubricflow.judge.budget import BudgetedJudge
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.methods.rucl.rubrics import load_default_pool
from rubricflow.util.env import PROJECT_ROOT

VLLM_PY = Path(PROJECT_ROOT) / ".venv-vllm" / "bin" / "python"
START_TIMEOUT_S = 240  # healthy after ~40 s on an idle 2-core machine, ~90 s under load


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_judge_model(out: Path) -> Path:
    from models.tiny import TinyDims, build_tiny_text, save

    corpus = ['{"verdicts": {"C01": {"rationale": "counts match", "applicable": true, "satisfied": false}}}'] * 10
    corpus += ["red = 2, green = 1, blue = 3. so red = 2. \\boxed{2}"] * 10
    # head_dim 32: the CPU attention kernels support 32, 64, 80, ... (16 fails)
    model, tok = build_tiny_text(
        corpus, TinyDims(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, vocab_size=400)
    )
    return save(model, tok, out)


def wait_healthy(proc: subprocess.Popen, port: int, log: Path) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_TIMEOUT_S:
        if proc.poll() is not None:
            pytest.fail(
                f"vLLM server exited with {proc.returncode} before becoming healthy:\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM server not healthy after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.mark.vllm
@pytest.mark.slow
def test_openai_backend_end_to_end_against_vllm(tmp_path):
    if not VLLM_PY.exists():
        pytest.fail(
            f"{VLLM_PY} is missing: the CPU vLLM environment .venv-vllm is installed by `make test` (run it first)"
        )
    t_start = time.monotonic()
    model_dir = tiny_judge_model(tmp_path / "tiny-judge")
    port = free_port()
    log = tmp_path / "vllm.log"
    # VLLM_ENABLE_V1_MULTIPROCESSING=0 keeps the CPU worker inside the engine-core process ("uni" executor): one
    # process spawn (and one round of imports, ~30 s on a busy 2-core machine) fewer.
    env = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_NO_USAGE_STATS="1",
        HF_HUB_OFFLINE="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
    )
    cmd = [
        str(VLLM_PY),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--dtype",
        "float32",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--served-model-name",
        "tiny-judge",
        "--max-model-len",
        "2048",
        "--distributed-executor-backend",
        "uni",
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
    ]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        startup = wait_healthy(proc, port, log)
        cfg = JudgeConfig(
            backend="openai",
            cache_path=str(tmp_path / "judge_cache.sqlite"),
            openai=OpenAIJudgeConfig(
                base_url=f"http://127.0.0.1:{port}/v1",
                model="tiny-judge",
                send_images=False,
                rationale_max_chars=32,
                max_tokens=400,
                timeout_s=60,
                max_retries=1,
                concurrency=4,
            ),
        )
        judge = make_judge(cfg)
        assert isinstance(judge, BudgetedJudge) and isinstance(judge.inner, CachedJudge)  # budget over the cache
        pool = load_default_pool().rubrics
        rubric_sets = [pool[:2], pool[2:5], pool[5:7], pool[16:19]]
        reqs = [
            JudgeRequest(
                f"s{i}", "How many red shapes are there?", f"red = {i}, green = 1. so red = {i}. \\boxed{{{i}}}", rs
            )
            for i, rs in enumerate(rubric_sets)
        ]
        t0 = time.monotonic()
        first = judge.judge(reqs)
        t_judge = time.monotonic() - t0
        for r, j in zip(reqs, first):
            assert j.status in ("ok", "repaired"), (j.status, j.reason, j.raw)
            assert list(j.verdicts) == [rb.id for rb in r.rubrics], j.raw
            for v in j.verdicts.values():
                assert isinstance(v.applicable, bool) and (v.satisfied is None) == (not v.applicable)
        attempts = judge.backend.stats.attempts
        assert attempts == len(reqs) + 1  # the preflight call, then one attempt per request
        second = judge.judge(reqs)
        assert judge.backend.stats.attempts == attempts  # zero backend calls: all from the cache
        assert [j.verdicts for j in second] == [j.verdicts for j in first]
        assert all(j.reason == "cached" for j in second)
        total = time.monotonic() - t_start
        print(f"vLLM startup {startup:.1f} s, 4 judge calls {t_judge:.2f} s, test total {total:.1f} s")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
