"""Tiny models of the production architectures, built fully offline.

``build_tiny_vl`` makes a Qwen2.5-VL (``Qwen2_5_VLForConditionalGeneration``) and ``build_tiny_text`` a Qwen2
(``Qwen2ForCausalLM``) from small configs of the real architectures, with a tokenizer trained locally
(models.tokenizer) and, for the VLM, an image-only processor (models.processor). They are saved in Hugging Face
``save_pretrained`` format, so the loader (models.loader) treats them exactly like a real checkpoint directory and
the same code runs Qwen/Qwen2.5-VL-7B-Instruct on GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from models.tokenizer import train_tokenizer

# Qwen2.5-VL image geometry: 14 px patches merged 2x2, so a 56 px image is 4 visual tokens.
PATCH_SIZE = 14
MERGE_SIZE = 2


@dataclass
class TinyDims:
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int | None = None  # default 2 * hidden
    vision_hidden_size: int = 64
    vision_depth: int = 2
    vocab_size: int = 640
    max_positions: int = 2048
    image_size: int = 56  # the processor's fixed resolution (min = max pixels)


def _special_ids(tok) -> dict[str, int]:
    names = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|im_end|>", "<|endoftext|>"]
    return {n: tok.convert_tokens_to_ids(n) for n in names}


def _mrope_section(head_dim: int) -> list[int]:
    # Qwen2.5-VL splits the rotary half-dimension into (temporal, height, width) sections: [16, 24, 24] for
    # head_dim 128. Keep the same 2:3:3 proportions for small heads.
    half = head_dim // 2
    t = max(1, round(half * 2 / 8))
    h = (half - t) // 2
    return [t, h, half - t - h]


def _image_processor(dims: TinyDims):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    px = dims.image_size * dims.image_size
    return Qwen2VLImageProcessorPil(
        min_pixels=px, max_pixels=px, patch_size=PATCH_SIZE, merge_size=MERGE_SIZE, temporal_patch_size=2
    )


def build_tiny_vl(corpus: Iterable[str], dims: TinyDims = TinyDims(), seed: int = 0):
    """Return ``(model, processor)`` for a freshly initialised tiny Qwen2.5-VL."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from models.processor import VisionTextProcessor

    tok = train_tokenizer(corpus, dims.vocab_size)
    ids = _special_ids(tok)
    head_dim = dims.hidden_size // dims.num_heads
    text = dict(
        vocab_size=len(tok),
        hidden_size=dims.hidden_size,
        intermediate_size=dims.intermediate_size or 2 * dims.hidden_size,
        num_hidden_layers=dims.num_layers,
        num_attention_heads=dims.num_heads,
        num_key_value_heads=dims.num_kv_heads,
        max_position_embeddings=dims.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": _mrope_section(head_dim)},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    vision = dict(
        depth=dims.vision_depth,
        hidden_size=dims.vision_hidden_size,
        intermediate_size=2 * dims.vision_hidden_size,
        num_heads=max(1, dims.vision_hidden_size // 32),
        out_hidden_size=dims.hidden_size,
        patch_size=PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        window_size=PATCH_SIZE * MERGE_SIZE * 2,
        fullatt_block_indexes=[dims.vision_depth - 1],
    )
    cfg = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(cfg)
    _set_generation_ids(model, ids)
    return model.eval(), VisionTextProcessor(tok, _image_processor(dims))


def build_tiny_text(corpus: Iterable[str], dims: TinyDims = TinyDims(), seed: int = 0):
    """Return ``(model, tokenizer)`` for a freshly initialised tiny Qwen2 causal LM."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = train_tokenizer(corpus, dims.vocab_size)
    ids = _special_ids(tok)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=dims.hidden_size,
        intermediate_size=dims.intermediate_size or 2 * dims.hidden_size,
        num_hidden_layers=dims.num_layers,
        num_attention_heads=dims.num_heads,
        num_key_value_heads=dims.num_kv_heads,
        max_position_embeddings=dims.max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    _set_generation_ids(model, ids)
    return model.eval(), tok


def _set_generation_ids(model, ids: dict[str, int]) -> None:
    gc = model.generation_config
    gc.bos_token_id = None
    gc.eos_token_id = ids["<|im_end|>"]
    gc.pad_token_id = ids["<|endoftext|>"]


def save(model, processor_or_tokenizer, out_dir: str | Path, state_dict: dict | None = None) -> Path:
    """Save in HF format (model.safetensors + config + tokenizer [+ preprocessor_config.json]). ``state_dict``: the
    weights to write instead of the module's own (a consolidated copy of a ZeRO-3 partitioned module)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, state_dict=state_dict)
    processor_or_tokenizer.save_pretrained(out)
    return out
