"""The generic updater and the causal-LM adapter on tiny Qwen2 / Qwen2.5-VL models (torch engine)."""

import copy
import math

import pytest
import torch
from PIL import Image

from models.generation import GenRequest, TransformersGenerator
from rubricflow.grpo import CausalLMAdapter, Episode, GRPOConfig, GRPOUpdater, TorchEngine
from rubricflow.grpo.core import token_logprobs
from rubricflow.testing.toy_task import build_toy_policy, chat_prompt, target_token_id, toy_prompts, toy_reward


@pytest.fixture(scope="module")
def text_policy():
    return build_toy_policy("text", seed=0)


@pytest.fixture(scope="module")
def vl_policy():
    return build_toy_policy("vl", seed=0)


def rollout(model, tok, n_prompts=4, group=4, max_new_tokens=8, seed=0, varied=True):
    """Sampled episodes; ``varied``: rewards i % 3 (the policy surely moves), else the toy reward."""
    gen = TransformersGenerator(model, tok)
    prompts = toy_prompts(n_prompts)
    reqs = [GenRequest(chat_prompt(tok, p["question"])) for p in prompts]
    outs = gen.generate(reqs, n=group, max_new_tokens=max_new_tokens, seed=seed)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    tid = target_token_id(tok)
    eps = []
    for p, r, cs in zip(prompts, reqs, outs):
        for c in cs:
            eps.append(Episode(r.prompt, c.token_ids + ([eos] if c.finished else []), toy_reward(c.token_ids, tid),
                               p["id"]))
    if varied:
        for i, e in enumerate(eps):
            e.reward = float(i % 3)
    return eps


def manual_logprobs(model, tok, ep):
    ids = tok(ep.prompt)["input_ids"]
    full = torch.tensor([ids + ep.actions])
    with torch.no_grad():
        logits = model(input_ids=full).logits
    p = len(ids)
    return token_logprobs(logits[:, p - 1 : p - 1 + len(ep.actions)], torch.tensor([ep.actions]))[0]


def test_adapter_logprobs_match_a_plain_forward_and_ignore_padding(text_policy):
    model, tok = text_policy
    a = CausalLMAdapter(model, tok)
    eps = [
        Episode(chat_prompt(tok, "Say yes please."), [5, 6, 7, 8, 9], 1.0, "g"),
        Episode(chat_prompt(tok, "Say a much longer thing, red and green and blue please."), [10, 11], 0.0, "g"),
    ]
    with torch.no_grad():
        logp, mask = a.action_logprobs(model, eps)
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    for i, e in enumerate(eps):
        ref = manual_logprobs(model, tok, e)
        assert torch.allclose(logp[i, : len(e.actions)], ref, atol=1e-5)
    assert logp[1, 2:].abs().sum() == 0


def test_vl_adapter_with_images_is_batch_invariant(vl_policy):
    model, proc = vl_policy
    a = CausalLMAdapter(model, proc)
    im1 = Image.new("RGB", (56, 56), (255, 0, 0))
    im2 = Image.new("RGB", (56, 56), (0, 0, 255))
    e1 = Episode({"text": proc.chat_prompt("How many red?", 1), "images": [im1]}, [20, 21, 22], 1.0, "g")
    e2 = Episode({"text": proc.chat_prompt("Which bar is the tallest of all?", 1), "images": [im2]}, [30], 0.0, "g")
    with torch.no_grad():
        lp, mask, ent = a.action_logprobs(model, [e1, e2], with_entropy=True)
        lp1, _ = a.action_logprobs(model, [e1])
        lp2, _ = a.action_logprobs(model, [e2])
    assert torch.allclose(lp[0], lp1[0], atol=1e-5)
    assert torch.allclose(lp[1, :1], lp2[0, :1], atol=1e-5)
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert (ent[0] > 0).all() and ent[1, 1:].abs().sum() == 0
    # the image matters: the same text with the other image scores differently
    e1b = Episode({"text": e1.prompt["text"], "images": [im2]}, e1.actions, 1.0, "g")
    with torch.no_grad():
        lp1b, _ = a.action_logprobs(model, [e1b])
    assert not torch.allclose(lp1, lp1b)


class ExplodingRef(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, *a, **k):
        self.calls += 1
        raise AssertionError("the reference model must not run when beta == 0")


def test_no_reference_forward_when_beta_zero(text_policy):
    model, tok = copy.deepcopy(text_policy[0]), text_policy[1]
    eps = rollout(model, tok)
    ref = ExplodingRef()
    cfg = GRPOConfig(beta=0.0, lr=1e-3, max_new_tokens=8)
    up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg, ref_module=ref)
    m = up.update(eps)
    assert ref.calls == 0 and "kl" not in m
    assert math.isfinite(m["loss"]) and m["n_optimizer_steps"] == 1


def test_kl_to_reference_when_beta_positive(text_policy):
    model, tok = copy.deepcopy(text_policy[0]), text_policy[1]
    ref = copy.deepcopy(model)
    eps = rollout(model, tok)
    cfg = GRPOConfig(beta=0.1, lr=1e-2, max_new_tokens=8, inner_epochs=2, minibatch_size=8)
    up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg, ref_module=ref)
    m = up.update(eps)
    # first minibatch sees policy == ref (KL 0), later ones a moved policy: KL > 0 but small
    assert 0 < m["kl"] < 1.0
    assert m["n_optimizer_steps"] == 4  # 16 episodes / 8 per minibatch * 2 epochs
    assert m["ratio_max"] > 1.0 or m["ratio_min"] < 1.0
    with pytest.raises(ValueError, match="reference"):
        GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg)


class GradCapture:
    """An engine that records the summed gradient of each optimizer step instead of applying it."""

    kind, rank, world_size = "capture", 0, 1

    def __init__(self, module):
        self.module, self.grads = module, []

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.grads.append(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
                                     for p in self.module.parameters()]))
        self.module.zero_grad(set_to_none=True)
        return {"grad_norm": float(self.grads[-1].norm()), "lr": 0.0}

    def all_reduce_mean(self, v):
        return dict(v)


@pytest.mark.parametrize("agg", ["grpo", "dr_grpo", "dapo"])
def test_micro_batching_gives_the_same_gradient(text_policy, agg):
    base, tok = text_policy
    eps = rollout(base, tok, n_prompts=3, group=4)
    grads = []
    for micro in (0, 5, 1):
        model = copy.deepcopy(base)
        cfg = GRPOConfig(loss_agg=agg, micro_batch_size=micro, max_new_tokens=8)
        eng = GradCapture(model)
        GRPOUpdater(CausalLMAdapter(model, tok), eng, cfg).update(eps)
        grads.append(eng.grads[0])
    assert grads[0].norm() > 1e-3
    for g in grads[1:]:
        assert torch.allclose(grads[0], g, atol=1e-6, rtol=1e-4)


def test_missing_rewards_do_not_change_the_update(text_policy):
    base, tok = text_policy
    eps = rollout(base, tok, n_prompts=2, group=4)
    with_missing = list(eps) + [Episode(eps[0].prompt, [3, 4, 5], float("nan"), eps[0].group)]
    out = []
    for batch in (eps, with_missing):
        model = copy.deepcopy(base)
        cfg = GRPOConfig(lr=1e-2, loss_agg="dapo", max_new_tokens=8, seed=3)
        up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg)
        m = up.update(batch)
        out.append((torch.cat([p.detach().flatten() for p in model.parameters()]), m))
    assert torch.allclose(out[0][0], out[1][0], atol=1e-6)
    assert out[1][1]["n_missing"] == 1 and out[1][1]["n_trained"] == 8
    assert out[0][1]["reward_mean/policy"] == pytest.approx(out[1][1]["reward_mean/policy"])


def test_per_role_metrics_and_all_missing_batch(text_policy):
    model, tok = copy.deepcopy(text_policy[0]), text_policy[1]
    p = chat_prompt(tok, "Say yes please.")
    eps = [Episode(p, [5, 6], r, "q1", role)
           for role, rs in (("planner", [1.0, 0.0]), ("verifier", [5.0, 3.0])) for r in rs]
    cfg = GRPOConfig(lr=1e-3, max_new_tokens=4)
    up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg)
    m = up.update(eps)
    assert m["reward_mean/planner"] == pytest.approx(0.5) and m["reward_mean/verifier"] == pytest.approx(4.0)
    # both groups are +-1/sqrt(2) sample std from their mean (up to eps = 1e-4 in the denominator)
    assert m["adv_abs_mean/planner"] == pytest.approx(m["adv_abs_mean/verifier"], rel=1e-3)
    before = [t.clone() for t in model.parameters()]
    m2 = up.update([Episode(p, [5], float("nan"), "q1")])
    assert m2["skipped"] == 1 and m2["n_missing"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_few_updates_raise_the_toy_reward(text_policy):
    """GRPO on the toy reward (fraction of 'yes' tokens) beats the same loop with shuffled rewards."""
    base, tok = text_policy
    tid = target_token_id(tok)

    def prob_target(model):
        a = CausalLMAdapter(model, tok)
        eps = [Episode(chat_prompt(tok, p["question"]), [tid], 0.0, p["id"]) for p in toy_prompts(8)]
        with torch.no_grad():
            return float(a.action_logprobs(model, eps)[0].exp().mean())

    p0 = prob_target(base)
    results = {}
    for shuffled in (False, True):
        model = copy.deepcopy(base)
        cfg = GRPOConfig(lr=2e-2, max_new_tokens=8, clip_high=0.28)
        up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg)
        g = torch.Generator().manual_seed(0)
        for step in range(8):
            eps = rollout(model, tok, n_prompts=4, group=8, seed=step, varied=False)
            if shuffled:
                perm = torch.randperm(len(eps), generator=g).tolist()
                rs = [eps[i].reward for i in perm]
                for e, r in zip(eps, rs):
                    e.reward = r
            up.update(eps)
        results[shuffled] = prob_target(model)
    assert results[False] > 5 * p0, (p0, results)
    assert results[False] > 3 * results[True], (p0, results)
