"""Load a policy checkpoint (tiny or real) the same way.

``load_policy(path_or_id)`` reads ``config.json`` to pick the architecture: Qwen2.5-VL / Qwen2-VL get a
``VisionTextProcessor`` (tokenizer + image processor), text models a tokenizer. A real model id works on GPU
machines that have it in the local HF cache or can reach the hub; on these machines the hub is off
(HF_HUB_OFFLINE=1) and a missing model is reported by name, never replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

VL_TYPES = {"qwen2_5_vl", "qwen2_vl"}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelNotFound(FileNotFoundError):
    pass


def model_type(path_or_id: str | Path) -> str:
    p = Path(path_or_id)
    if p.is_dir():
        cfg = p / "config.json"
        if not cfg.exists():
            raise ModelNotFound(f"{p}: not a model directory (no config.json)")
        return json.loads(cfg.read_text())["model_type"]
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(path_or_id)).model_type
    except OSError as e:
        raise ModelNotFound(
            f"model {path_or_id!r} is neither a local directory nor in the local Hugging Face cache "
            f"(hub access is off: HF_HUB_OFFLINE=1). Download it on a machine with hub access first. ({e})"
        ) from None


def is_vision_language(path_or_id: str | Path) -> bool:
    return model_type(path_or_id) in VL_TYPES


def load_policy(path_or_id: str | Path, dtype: str = "float32", device: str | torch.device = "cpu"):
    """Return ``(model, processor)``; ``processor`` is a VisionTextProcessor for VLMs, else a tokenizer."""
    mtype = model_type(path_or_id)
    torch_dtype = _DTYPES[dtype]
    if mtype in VL_TYPES:
        from transformers import AutoModelForImageTextToText

        from models.processor import VisionTextProcessor

        model = AutoModelForImageTextToText.from_pretrained(str(path_or_id), dtype=torch_dtype)
        proc = VisionTextProcessor.from_pretrained(str(path_or_id))
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(str(path_or_id), dtype=torch_dtype)
        proc = AutoTokenizer.from_pretrained(str(path_or_id))
    return model.to(device).eval(), proc
