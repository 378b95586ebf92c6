"""The transformers backend (models.generation.hf)."""

import pytest
import torch

from models.generation.contract import GenRequest
from models.generation.hf import TransformersGenerator


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

