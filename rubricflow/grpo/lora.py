"""LoRA adapters on the policy (``peft``): train a few million parameters of a real model on CPU.

``apply_lora(model, cfg)`` wraps the policy with ``peft.get_peft_model``: only the adapters of ``cfg.target_modules``
in the *top* ``cfg.top_layers`` decoder layers train (``layers_to_transform``), so the backward pass stops at the
lowest adapted layer instead of running through the whole model (what makes a 135 M-parameter policy trainable on
two CPU cores; ``bench``-free reasoning: the forward is unchanged, the backward covers ``top_layers`` of ``L``
layers). ``merge_lora(module)`` folds the adapters into the weights and returns the plain model, which is what
``save_policy`` writes: the saved checkpoint loads with ``models.loader.load_policy`` like any other.

A missing ``peft`` raises ``BackendUnavailable`` naming it; ``rank: 0`` (the default) means no LoRA: full fine-tuning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from models.errors import BackendUnavailable

if TYPE_CHECKING:
    from rubricflow.sections import LoRAConfig


def _num_layers(model) -> int:
    cfg = getattr(model.config, "text_config", None) or model.config
    return int(cfg.num_hidden_layers)


def apply_lora(model, cfg: "LoRAConfig"):
    """``model`` with LoRA adapters (``cfg.rank > 0``), or ``model`` unchanged (``rank == 0``)."""
    if cfg.rank == 0:
        return model
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise BackendUnavailable(
            "lora.rank > 0 (rucl.lora, sft.lora) needs the `peft` package (pinned in the dev extra: "
            "`.venv/bin/pip install -c requirements/constraints.txt torch==2.13.0 peft`); or set lora.rank: 0"
        ) from None
    n = _num_layers(model)
    layers = None if cfg.top_layers is None else list(range(max(0, n - cfg.top_layers), n))
    lcfg = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                      target_modules=list(cfg.target_modules), layers_to_transform=layers, bias="none")
    return get_peft_model(model, lcfg)


def is_lora(module) -> bool:
    return hasattr(module, "merge_and_unload") and hasattr(module, "peft_config")


def merge_lora(module):
    """The plain model with the adapters folded into its weights (``module`` itself when it has none)."""
    return module.merge_and_unload() if is_lora(module) else module
