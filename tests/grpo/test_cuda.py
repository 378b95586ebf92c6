"""The training core on a GPU gives the CPU's numbers: GRPO update (policy and reference on CUDA), the VL adapter
with images, and both rollout backends. Skipped where torch sees no CUDA device (CI); run on a GPU machine."""

import copy

import pytest
import torch
from PIL import Image

from models.generation import GenRequest
from models.generation.cached import CachedSampler
from models.generation.hf import TransformersGenerator
from rubricflow.grpo import CausalLMAdapter, Episode, GRPOConfig, GRPOUpdater, TorchEngine
from rubricflow.testing.toy_task import build_toy_policy, chat_prompt, toy_prompts

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def exact_fp32():
    """TF32 off: CUDA fp32 matmuls and convolutions then agree with the CPU to ~1e-6."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def text_policy():
    return build_toy_policy("text", seed=0)


def episodes(model, tok, n_prompts=4, group=4):
    prompts = [chat_prompt(tok, p["question"]) for p in toy_prompts(n_prompts)]
    outs = TransformersGenerator(model, tok).generate([GenRequest(p) for p in prompts], n=group, max_new_tokens=8,
                                                      seed=0)
    return [Episode(p, c.token_ids, float(i % 3), f"q{j}")
            for j, (p, cs) in enumerate(zip(prompts, outs)) for i, c in enumerate(cs)]


def update_on(device, base, tok, eps):
    """As the training stages do it: policy and reference loaded on the CPU, the engine places the policy on
    ``engine.device`` and the updater moves the reference next to it."""
    model, ref = copy.deepcopy(base), copy.deepcopy(base).eval()
    cfg = GRPOConfig(
        beta=0.1, lr=1e-2, max_new_tokens=8, inner_epochs=2, minibatch_size=8,
        engine={"kind": "torch", "device": device},
    )
    engine = TorchEngine(model, cfg)
    up = GRPOUpdater(CausalLMAdapter(engine.module, tok), engine, cfg, ref_module=ref)
    assert {p.device.type for p in engine.module.parameters()} == {p.device.type for p in ref.parameters()} == {device}
    metrics = up.update([copy.deepcopy(e) for e in eps])
    return metrics, [p.detach().cpu() for p in engine.module.parameters()]


def test_grpo_update_on_cuda_matches_cpu(text_policy):
    base, tok = text_policy
    eps = episodes(base, tok)
    m_cpu, p_cpu = update_on("cpu", base, tok, eps)
    m_gpu, p_gpu = update_on("cuda", base, tok, eps)
    assert m_gpu["n_optimizer_steps"] == m_cpu["n_optimizer_steps"] == 4
    for k in ("loss", "kl", "ratio_max", "ratio_min"):
        assert m_gpu[k] == pytest.approx(m_cpu[k], rel=1e-3, abs=1e-5), k
    moved = max((a - b).abs().max().item() for a, b in zip(p_cpu, base.parameters()))
    diff = max((a - b).abs().max().item() for a, b in zip(p_cpu, p_gpu))
    assert moved > 1e-3 and diff < 1e-4, (moved, diff)  # the update moved the weights, the same way on both


def test_vl_adapter_on_cuda_matches_cpu():
    model, proc = build_toy_policy("vl", seed=0)
    a_cpu = CausalLMAdapter(model, proc)
    ims = [Image.new("RGB", (56, 56), (255, 0, 0)), Image.new("RGB", (56, 56), (0, 0, 255))]
    eps = [
        Episode({"text": proc.chat_prompt("How many red?", 1), "images": [ims[0]]}, [20, 21, 22], 1.0, "g"),
        Episode({"text": proc.chat_prompt("Which bar is the tallest of all?", 1), "images": [ims[1]]}, [30], 0.0, "g"),
    ]
    with torch.no_grad():
        lp_cpu, mask_cpu = a_cpu.action_logprobs(model, eps)
        gpu = copy.deepcopy(model).to(CUDA)
        lp_gpu, mask_gpu = CausalLMAdapter(gpu, proc).action_logprobs(gpu, eps)
    assert lp_gpu.device.type == "cuda"
    assert torch.equal(mask_gpu.cpu(), mask_cpu)
    assert torch.allclose(lp_gpu.cpu(), lp_cpu, atol=1e-4)


@pytest.mark.parametrize("backend", ["transformers", "cached"])
def test_greedy_rollouts_on_cuda_match_cpu(text_policy, backend):
    base, tok = text_policy
    make = (lambda m: TransformersGenerator(m, tok)) if backend == "transformers" else (lambda m: CachedSampler(m, tok))
    reqs = [GenRequest(chat_prompt(tok, p["question"])) for p in toy_prompts(4)]
    cpu = make(base).generate(reqs, n=2, max_new_tokens=8, temperature=0)
    gpu = make(copy.deepcopy(base).to(CUDA)).generate(reqs, n=2, max_new_tokens=8, temperature=0)
    assert [[c.token_ids for c in cs] for cs in gpu] == [[c.token_ids for c in cs] for cs in cpu]
