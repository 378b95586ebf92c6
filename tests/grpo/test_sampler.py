"""CachedSampler: greedy equals TransformersGenerator token for token; sampling draws from the model's distribution."""

import math

import pytest
import torch

from models.generation import GenRequest, TransformersGenerator
from rubricflow.grpo.sampler import CachedSampler
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

    with pytest.raises(ValueError, match="TransformersGenerator"):
        CachedSampler(model, FakeProc())
