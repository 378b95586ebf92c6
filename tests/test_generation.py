"""The ``generation`` section bound to the factory (rubricflow.training.generation.generator_for)."""

import pytest

from models.generation.cached import CachedSampler
from models.generation.hf import TransformersGenerator
from rubricflow.sections import GenerationConfig
from rubricflow.testing.toy_task import build_toy_policy
from rubricflow.training.generation import generator_for


def test_generation_backend_cached_builds_the_cached_backend_for_a_text_policy():
    model, tok = build_toy_policy("text")
    g = generator_for(GenerationConfig.model_validate({"backend": "cached", "eval_batch_size": 7}), model, tok)
    assert isinstance(g, CachedSampler) and g.model is model and g.batch_size == 7
    assert generator_for(GenerationConfig(backend="cached"), model, tok, batch_size=3).batch_size == 3


def test_generation_backend_cached_is_refused_for_a_vision_language_policy_naming_the_setting():
    model, proc = build_toy_policy("vl")
    with pytest.raises(ValueError, match=r"generation.backend=cached serves text-only causal LMs.*vision-language"):
        generator_for(GenerationConfig(backend="cached"), model, proc)


def test_in_memory_generation_uses_the_model_given():
    """Evaluation generates with the model itself: the section's in-memory backend, transformers for vLLM."""
    model, tok = build_toy_policy("text")
    assert isinstance(generator_for(GenerationConfig(backend="cached"), model, tok, in_memory=True), CachedSampler)
    for backend in ("transformers", "vllm"):
        g = generator_for(GenerationConfig(backend=backend), model, tok, in_memory=True)
        assert isinstance(g, TransformersGenerator) and g.model is model

