"""An image-only processor for Qwen2-VL-family models.

transformers 5.x Qwen-VL processors declare a video processor that needs torchvision (not installable with the
CPU torch here), and ``AutoProcessor`` then silently returns only the tokenizer. This small processor does what
the Qwen processor does for images: it runs the PIL image processor (``Qwen2VLImageProcessorPil``), expands each
``<|image_pad|>`` placeholder to the number of merged patches, and returns ``mm_token_type_ids`` (0 text, 1 image),
which transformers 5.2x needs for 3-D RoPE. It works unchanged for a real Qwen2.5-VL checkpoint directory.
"""

from __future__ import annotations

from pathlib import Path

import torch

IMAGE_TOKEN = "<|image_pad|>"


def text_tokenizer(processor):
    """The text tokenizer behind ``processor``.

    A vision processor (``VisionTextProcessor``, a transformers ``ProcessorMixin``) holds it as ``.tokenizer``; a
    text-only model's "processor" is the tokenizer itself and is returned unchanged.
    """
    return getattr(processor, "tokenizer", processor)


def chat_prompt(processor, text: str, n_images: int = 0, system: str | None = None,
                demo: tuple[str, str] | None = None) -> str:
    """The generation prompt for one user turn, for a ``VisionTextProcessor`` (image placeholders before the text)
    or a text model's tokenizer (its own chat template; a text model takes no image). ``demo``: one solved example
    ``(question, answer)`` given as an earlier user/assistant exchange (a text task's one-shot demonstration)."""
    if hasattr(processor, "chat_prompt"):
        if demo is not None:
            raise ValueError("a one-shot demonstration is defined for text tasks only")
        return processor.chat_prompt(text, n_images=n_images, system=system)
    if n_images:
        raise ValueError(f"a text-only model got a prompt with {n_images} image(s)")
    messages = [{"role": "system", "content": system}] if system else []
    if demo is not None:
        messages += [{"role": "user", "content": demo[0]}, {"role": "assistant", "content": demo[1]}]
    messages.append({"role": "user", "content": text})
    return processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


class VisionTextProcessor:
    """Tokenizer + image processor for Qwen2-VL style models (images only, no video)."""

    def __init__(self, tokenizer, image_processor):
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.merge_size = int(getattr(image_processor, "merge_size", 2))

    # -- persistence -------------------------------------------------------------------------------------------
    def save_pretrained(self, path: str | Path) -> None:
        self.tokenizer.save_pretrained(path)
        self.image_processor.save_pretrained(path)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs) -> "VisionTextProcessor":
        from transformers import AutoTokenizer
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        tok = AutoTokenizer.from_pretrained(path, **kwargs)
        improc = Qwen2VLImageProcessorPil.from_pretrained(path, **kwargs)
        return cls(tok, improc)

    # -- prompts -----------------------------------------------------------------------------------------------
    def chat_prompt(self, text: str, n_images: int = 1, system: str | None = None, images_last: bool = False) -> str:
        """The generation prompt for one user turn with ``n_images`` images before the text (after it with
        ``images_last``: next to the reply, for long prompts read by a small model)."""
        images = [{"type": "image"} for _ in range(n_images)]
        text_part = [{"type": "text", "text": text}]
        content = text_part + images if images_last else images + text_part
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    # -- encoding ----------------------------------------------------------------------------------------------
    def __call__(self, text: list[str], images: list[list] | None = None, padding_side: str = "left") -> dict:
        """Encode a batch. ``images[i]`` is the list of PIL images of prompt ``i`` (in placeholder order)."""
        texts = list(text)
        out: dict[str, torch.Tensor] = {}
        flat = [im for ims in (images or []) for im in ims]
        if flat:
            vis = self.image_processor(images=flat, return_tensors="pt")
            grid = vis["image_grid_thw"]
            out["pixel_values"] = vis["pixel_values"]
            out["image_grid_thw"] = grid
            k = 0
            for i, t in enumerate(texts):
                parts = t.split(IMAGE_TOKEN)
                if len(parts) - 1 != len(images[i]):
                    raise ValueError(
                        f"prompt {i} has {len(parts) - 1} image placeholders but {len(images[i])} images were given"
                    )
                rebuilt = parts[0]
                for p in parts[1:]:
                    n = int(grid[k].prod().item()) // (self.merge_size**2)
                    rebuilt += IMAGE_TOKEN * n + p
                    k += 1
                texts[i] = rebuilt
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side=padding_side)
        out["input_ids"] = enc["input_ids"]
        out["attention_mask"] = enc["attention_mask"]
        out["mm_token_type_ids"] = (enc["input_ids"] == self.image_token_id).long()
        return out

    def batch_decode(self, ids, **kwargs) -> list[str]:
        return self.tokenizer.batch_decode(ids, **kwargs)
