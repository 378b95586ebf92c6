"""What the GRPO updater consumes: episodes, and the adapter that scores their actions under a policy.

The updater knows nothing about text, images or routers. An ``Episode`` is one sampled action sequence (completion
token ids, or a list of discrete decisions) with its reward, the advantage group it is compared within (e.g. the
prompt id) and the role that produced it (``"policy"``; DeltaRubric's ``"planner"``/``"verifier"``). A
``PolicyAdapter`` turns a batch of episodes into per-action log-probs under a module; ``CausalLMAdapter``
(rubricflow.grpo.causal_lm) does it for Hugging Face causal / vision-language models, RoRo adds one for its router.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s first parameter (CPU for a module without parameters)."""
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


@dataclass
class Episode:
    """One rollout sample.

    ``prompt``: policy-specific inputs (``{"text": chat prompt, "images": [PIL]}`` for a VLM, a plain string for a
    text LM, router states for RoRo). ``actions``: the sampled token ids / decisions (for an LM include the EOS id
    when the completion ended with it, so the policy learns to stop). ``reward``: NaN = missing (judge failure).
    ``group``: advantage group key (prompt id). ``role``: which role acted; advantages are normalised per role.
    """

    prompt: Any
    actions: list[int]
    reward: float
    group: str
    role: str = "policy"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def missing(self) -> bool:
        return self.reward is None or (isinstance(self.reward, float) and math.isnan(self.reward))


@runtime_checkable
class PolicyAdapter(Protocol):
    """Scores episodes' actions under a module (the trained policy, or the frozen reference)."""

    module: torch.nn.Module

    def action_logprobs(
        self, module: torch.nn.Module, episodes: list[Episode], with_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(logp [B, T], mask [B, T])`` for the actions of ``episodes`` (right-padded to the longest), plus
        ``entropy [B, T]`` when ``with_entropy``. ``module`` is passed explicitly so the same adapter scores the
        policy, a DeepSpeed-wrapped policy and the reference model."""
        ...
