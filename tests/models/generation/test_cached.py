"""The cached backend (models.generation.cached): greedy equals TransformersGenerator token for token, log-probs
included; sampling draws from the model's distribution; the stop-token contract; what it refuses, by name."""

import math

import pytest
import torch

from models.generation import GenRequest
from models.generation.cached import CachedSampler
from models.generation.hf import TransformersGenerator
from rubricflow.testing.toy_task import build_toy_policy, chat_prompt


@pytest.fixture(scope="module")
def policy():
    model, tok = build_toy_policy("text", hidden=32, layers=2, seed=3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # large random weights: greedy paths differ between prompts; EOS is reachable
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        model.lm_head.weight[tok.eos_token_id] *= 2.5
    return model, tok


def test_greedy_matches_transformers_generate(policy):
    model, tok = policy
    qs = ["Say yes please.", "Say a much longer thing, red and green and blue please.", "two", "four or three?"]
    reqs = [GenRequest(chat_prompt(tok, q)) for q in qs]  # different lengths: left padding is exercised
    ref = TransformersGenerator(model, tok).generate(reqs, n=2, max_new_tokens=6, temperature=0)
    got = CachedSampler(model, tok, batch_size=5).generate(reqs, n=2, max_new_tokens=6, temperature=0)
    ref_ids = [[c.token_ids for c in cs] for cs in ref]
    assert [[c.token_ids for c in cs] for cs in got] == ref_ids
    assert [[c.finished for c in cs] for cs in got] == [[c.finished for c in cs] for cs in ref]
    assert [[c.text for c in cs] for cs in got] == [[c.text for c in cs] for cs in ref]
    # a real test: distinct paths, and both stopped (EOS) and cut (length) rows
    assert len({tuple(x[0]) for x in ref_ids}) == 4
    assert {c.finished for cs in ref for c in cs} == {True, False}


def test_greedy_matches_transformers_generate_on_a_llama_architecture():
    """The smol profile's text policy (SmolLM2) is a Llama: the same left-padded positions and cache there."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = build_toy_policy("text")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)).eval()
    with torch.no_grad():  # large random weights: distinct greedy paths
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.5)
    reqs = [GenRequest(chat_prompt(tok, q)) for q in ("Say yes please.", "two", "a longer one, red and blue?")]
    ref = TransformersGenerator(model, tok).generate(reqs, max_new_tokens=8, temperature=0)
    got = CachedSampler(model, tok).generate(reqs, max_new_tokens=8, temperature=0)
    assert [c[0].token_ids for c in got] == [c[0].token_ids for c in ref]
    assert len({tuple(c[0].token_ids) for c in ref}) == 3


def test_sampling_follows_the_model_distribution(policy):
    model, tok = policy
    prompt = chat_prompt(tok, "Say yes please.")
    with torch.no_grad():
        ids = torch.tensor([tok(prompt)["input_ids"]])
        logits = model(input_ids=ids).logits[0, -1].float()
    s = CachedSampler(model, tok, batch_size=2000)
    logits[s.suppress] = float("-inf")
    p = torch.softmax(logits / 0.7, -1)
    n = 4000
    outs = s.generate([GenRequest(prompt)], n=n, max_new_tokens=1, temperature=0.7, seed=0)[0]
    first = torch.tensor([c.token_ids[0] if c.token_ids else s.eos_id for c in outs])
    counts = torch.bincount(first, minlength=p.numel()).double()
    top = p.argsort(descending=True)[:5]
    for t in top.tolist():
        expect = n * float(p[t])
        assert abs(counts[t] - expect) < 4 * math.sqrt(expect * (1 - float(p[t]))) + 2, (t, counts[t], expect)
    assert counts[s.suppress].sum() == 0  # vision tokens are never sampled
    # top-p keeps only the most likely tokens whose mass reaches top_p
    keep_mass = float(p[top[0]]) * 0.9
    outs = s.generate([GenRequest(prompt)], n=200, max_new_tokens=1, temperature=0.7, top_p=keep_mass, seed=1)[0]
    assert {c.token_ids[0] if c.token_ids else s.eos_id for c in outs} == {int(top[0])}


def test_refuses_images_and_vl_processors(policy):
    model, tok = policy
    from PIL import Image

    with pytest.raises(ValueError, match="text-only"):
        CachedSampler(model, tok).generate([GenRequest("x", [Image.new("RGB", (8, 8))])])

    class FakeProc:
        image_processor = object()

    with pytest.raises(ValueError, match="TransformersGenerator") as e:
        CachedSampler(model, FakeProc())
    assert "generation.backend=cached" in str(e.value) and "vision-language" in str(e.value)


def test_refuses_a_model_partitioned_over_zero3_ranks(policy, monkeypatch):
    """Its loop ends with this rank's rows, so under ZeRO-3 it could not join the other ranks' all-gathers."""
    import models.generation.cached as cached

    model, tok = policy
    monkeypatch.setattr(cached, "zero3_world", lambda m: 2)
    with pytest.raises(ValueError, match=r"generation.backend=cached: the policy is partitioned by ZeRO-3 over 2 "):
        CachedSampler(model, tok).generate([GenRequest(chat_prompt(tok, "two"))])


def test_logprobs_are_the_transformers_backends(policy):
    """Raw log-probs of the generated tokens (before suppression), as every backend reports them."""
    model, tok = policy
    reqs = [GenRequest(chat_prompt(tok, q)) for q in ("Say yes please.", "four or three?")]
    ref = TransformersGenerator(model, tok).generate(reqs, n=1, max_new_tokens=6, temperature=0, logprobs=True)
    got = CachedSampler(model, tok).generate(reqs, n=1, max_new_tokens=6, temperature=0, logprobs=True)
    for r, g in zip(ref, got):
        assert g[0].token_ids == r[0].token_ids and len(g[0].logprobs) == len(g[0].token_ids) > 0
        assert g[0].logprobs == pytest.approx(r[0].logprobs, abs=1e-5)
    assert CachedSampler(model, tok).generate(reqs[:1], max_new_tokens=2, temperature=0)[0][0].logprobs is None


def test_a_generated_pad_token_ends_the_completion_unfinished(policy):
    """The contract (models.generation.contract.trim_at_stop), as in the transformers backend."""
    model, tok = policy
    reqs = [GenRequest(chat_prompt(tok, "Say yes please."))]
    calls = [0]

    def pad_from_the_second_token(module, args, out):  # forward 1 is the prefill, forward 2 picks token 2
        calls[0] += 1
        if calls[0] >= 2:
            out = out.clone()
            out[..., tok.pad_token_id] += 100.0
        return out

    hook = model.lm_head.register_forward_hook(pad_from_the_second_token)
    try:
        ref = TransformersGenerator(model, tok).generate(reqs, max_new_tokens=6, temperature=0)[0][0]
        calls[0] = 0
        got = CachedSampler(model, tok).generate(reqs, max_new_tokens=6, temperature=0)[0][0]
    finally:
        hook.remove()
    assert (got.token_ids, got.finished, got.text) == (ref.token_ids, ref.finished, ref.text)
    assert len(got.token_ids) == 1 and got.finished is False
