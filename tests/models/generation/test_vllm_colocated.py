"""The colocated vLLM backend (models.generation.vllm_colocated) against the transformers backend: the
stop-token contract, refusals, the sleep/wake order (no vLLM needed) and, end to end on the CPU vLLM engine
(``tests/models/generation/vllm_checks.py``), greedy tokens and log-probs before and after a GRPO update + sync."""

import json
import subprocess
import sys
import types

import pytest

from models.errors import BackendUnavailable
from models.generation import GenRequest, make_generator
from models.generation.vllm_colocated import VLLMGenerator, to_completions
from rubricflow.testing.toy_task import build_toy_policy
from rubricflow.util.env import PROJECT_ROOT
from tests.models.generation.vllm_checks import VLLM_PY, check_run, need_vllm_env, vllm_env


def test_vllm_outputs_lose_their_stop_token_like_transformers_completions():
    """vLLM's ``token_ids`` include the stop token; the Completion does not (its log-prob goes too)."""
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


def test_sleep_mode_sleeps_after_generating_and_wakes_weights_first_for_the_sync(monkeypatch):
    """The order vLLM's sleep mode needs (checked with a stand-in engine: vLLM has no sleep mode on CPU)."""
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

