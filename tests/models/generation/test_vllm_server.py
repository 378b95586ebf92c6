"""The rollout server (models.generation.vllm_server, in the CPU vLLM environment) and its client
(models.generation.vllm_client, in this one) against the transformers backend, before and after a GRPO update and
a weight sync through a file."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from models.generation import GenRequest, make_generator
from models.generation.hf import TransformersGenerator
from rubricflow.util.env import PROJECT_ROOT
from tests.models.generation.vllm_checks import VLLM_PY, check_run, need_vllm_env, vllm_env
from tests.ops_helpers import free_port

START_TIMEOUT_S = 240


def _wait_healthy(proc, port: int, log: Path) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_TIMEOUT_S:
        if proc.poll() is not None:
            pytest.fail(f"rollout server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"rollout server not healthy after {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.mark.vllm
@pytest.mark.slow
def test_rollout_server_matches_transformers_and_syncs_from_a_trainer_without_vllm(rollout_models, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from models.generation.vllm_client import VLLMServerGenerator
    from rubricflow.testing.vllm_rollouts import MAX_NEW_TOKENS, chat, completions_json, grpo_step, questions

    need_vllm_env()
    port, log = free_port(), tmp_path / "server.log"
    sync_dir = tmp_path / "sync"
    sync_dir.mkdir()
    cmd = [str(VLLM_PY), "-m", "models.generation.vllm_server", "--model", str(rollout_models / "text"), "--port",
           str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--weights-root",
           str(sync_dir)]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=vllm_env(), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_healthy(proc, port, log)
        model = AutoModelForCausalLM.from_pretrained(rollout_models / "text", dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(rollout_models / "text")
        server = make_generator("vllm", model, tok, mode="server", server_url=f"http://127.0.0.1:{port}",
                                sync_dir=str(sync_dir))
        assert isinstance(server, VLLMServerGenerator)
        ref = TransformersGenerator(model, tok)
        reqs = [GenRequest(chat(tok, q)) for q in questions()]

        def greedy(g):
            return completions_json(g.generate(reqs, max_new_tokens=MAX_NEW_TOKENS, temperature=0, logprobs=True))

        res = {"before": {"vllm": greedy(server), "transformers": greedy(ref)}}
        upd = grpo_step(model, tok, server)  # rollouts sampled by the server, the update here
        assert upd["loss"] != 0.0
        server.sync_weights(model)
        res["after"] = {"vllm": greedy(server), "transformers": greedy(ref)}
        check_run(res)
        assert server.version == 1
        names = sorted(p.name for p in sync_dir.iterdir())
        # the update, no temporary leftovers; beside it the server's own hidden copy of its last good weights
        assert [n for n in names if not n.startswith(".")] == ["v00000001"]
        assert len([n for n in names if n.startswith(".rollout-server-kept-")]) == 1, names
        assert "vllm" not in sys.modules  # the trainer side never imported vLLM
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert json.loads(r.read())["weight_version"] == 1
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
