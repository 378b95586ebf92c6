"""GRPO engine: pure math (core), episodes and policy adapters (types, causal_lm), the generic updater, engines
(DeepSpeed / torch), checkpointing and the generic training loop. Methods (RuCL, DeltaRubric, RoRo) supply rollout
and reward functions and reuse the rest.

Heavy pieces (engines, adapters, trainer) import torch/transformers lazily through their modules; this package
exports the public API by name.
"""

# rubricflow.config composes the method sections (rucl.grpo holds a GRPOConfig) when first imported; importing it
# before our own config module keeps that order whichever module a caller imports first.
import rubricflow.config  # noqa: F401,I001
from rubricflow.grpo.config import EngineConfig, GRPOConfig
from rubricflow.grpo.core import (
    aggregate,
    clipped_surrogate,
    group_advantages,
    grouped_advantages,
    grpo_loss,
    kl_k3,
    token_entropy,
    token_logprobs,
)
from rubricflow.grpo.types import Episode, PolicyAdapter

__all__ = [
    "EngineConfig",
    "GRPOConfig",
    "Episode",
    "PolicyAdapter",
    "aggregate",
    "clipped_surrogate",
    "group_advantages",
    "grouped_advantages",
    "grpo_loss",
    "kl_k3",
    "token_entropy",
    "token_logprobs",
    "CausalLMAdapter",
    "GRPOUpdater",
    "Engine",
    "TorchEngine",
    "DeepSpeedEngine",
    "make_engine",
    "GRPOTrainer",
    "PromptIterator",
    "CheckpointManager",
    "CachedSampler",
]


def __getattr__(name: str):
    # lazy: keep `import rubricflow.grpo` light (no transformers / deepspeed import for config or math users)
    lazy = {
        "CausalLMAdapter": "rubricflow.grpo.causal_lm",
        "GRPOUpdater": "rubricflow.grpo.updater",
        "Engine": "rubricflow.grpo.engine",
        "TorchEngine": "rubricflow.grpo.engine",
        "DeepSpeedEngine": "rubricflow.grpo.engine",
        "make_engine": "rubricflow.grpo.engine",
        "GRPOTrainer": "rubricflow.grpo.trainer",
        "PromptIterator": "rubricflow.grpo.trainer",
        "CheckpointManager": "rubricflow.grpo.checkpoint",
        "CachedSampler": "rubricflow.grpo.sampler",
    }
    if name in lazy:
        import importlib

        return getattr(importlib.import_module(lazy[name]), name)
    raise AttributeError(f"module 'rubricflow.grpo' has no attribute {name!r}")
