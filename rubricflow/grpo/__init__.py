"""GRPO engine: pure math (core), episodes and policy adapters (types, causal_lm), the generic updater, engines
(DeepSpeed / torch), checkpointing and the generic training loop. Methods (RuCL, DeltaRubric, RoRo) supply rollout
and reward functions and reuse the rest.

Heavy pieces (engines, adapters, trainer) import torch/transformers lazily through their modules; this package
exports the public API by name.
"""

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
]


def __getattr__(name: str):
    # lazy: keep `import rubricflow.grpo` light (config users must not pay for torch / transformers / deepspeed)
    lazy = {
        "EngineConfig": "rubricflow.grpo.config",
        "GRPOConfig": "rubricflow.grpo.config",
        "Episode": "rubricflow.grpo.types",
        "PolicyAdapter": "rubricflow.grpo.types",
        **{n: "rubricflow.grpo.core" for n in ("aggregate", "clipped_surrogate", "group_advantages",
                                                 "grouped_advantages", "grpo_loss", "kl_k3", "token_entropy",
                                                 "token_logprobs")},
        "CausalLMAdapter": "rubricflow.grpo.causal_lm",
        "GRPOUpdater": "rubricflow.grpo.updater",
        "Engine": "rubricflow.grpo.engine",
        "TorchEngine": "rubricflow.grpo.engine",
        "DeepSpeedEngine": "rubricflow.grpo.engine",
        "make_engine": "rubricflow.grpo.engine",
        "GRPOTrainer": "rubricflow.grpo.trainer",
        "PromptIterator": "rubricflow.grpo.trainer",
        "CheckpointManager": "rubricflow.grpo.checkpoint",
    }
    if name in lazy:
        import importlib

        return getattr(importlib.import_module(lazy[name]), name)
    raise AttributeError(f"module 'rubricflow.grpo' has no attribute {name!r}")
