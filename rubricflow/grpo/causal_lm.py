"""``CausalLMAdapter``: completion-token log-probs of Hugging Face causal LMs and Qwen2-VL-style VLMs.

Each episode's ``prompt`` is a chat-formatted prompt string (text LM) or ``{"text": prompt, "images": [PIL, ...]}``
(VLM; ``images`` may be empty) and its ``actions`` are the completion token ids. A batch is encoded as full
sequences ``prompt + completion``, right-padded (every row starts at position 0, as in generation, so no
position-id surprises), with ``pixel_values`` / ``image_grid_thw`` / ``mm_token_type_ids`` for the VLM from
``models.processor.VisionTextProcessor``. Only the logits of the span that holds completions are computed
(2-D ``logits_to_keep`` positions), which matters for long image prompts and large vocabularies.
"""

from __future__ import annotations

from typing import Any

import torch

from models.processor import text_tokenizer
from rubricflow.grpo.core import token_entropy, token_logprobs
from rubricflow.grpo.types import Episode, module_device


def _row_logits_to_keep() -> bool:
    """Whether this transformers takes a 2-D ``logits_to_keep`` (positions per row; added in the 5.2x series). The
    CPU vLLM environment has an older 5.x, and the colocated check trains there."""
    try:
        from transformers.modeling_utils import slice_logits_to_keep  # noqa: F401
    except ImportError:
        return False
    return True


_ROW_LOGITS_TO_KEEP = _row_logits_to_keep()


def _prompt_parts(prompt: Any) -> tuple[str, list]:
    if isinstance(prompt, str):
        return prompt, []
    if isinstance(prompt, dict) and "text" in prompt:
        return prompt["text"], list(prompt.get("images") or [])
    raise TypeError(
        f"CausalLMAdapter: episode.prompt must be a prompt string or {{'text': str, 'images': [...]}}, "
        f"got {type(prompt).__name__}"
    )


class CausalLMAdapter:
    """Policy adapter for ``*ForCausalLM`` / ``*ForConditionalGeneration`` models.

    ``processor`` is a ``VisionTextProcessor`` (VLM) or a tokenizer (text LM). ``temperature`` must match the
    rollout sampling temperature so that log-probs are those of the sampling distribution.
    """

    def __init__(self, module: torch.nn.Module, processor, temperature: float = 1.0):
        self.module = module
        self.processor = processor
        self.tokenizer = text_tokenizer(processor)
        self.is_vl = hasattr(processor, "image_processor")
        self.temperature = temperature
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else 0)
        self._prompt_cache: dict[str, list[int]] = {}

    # -- encoding ----------------------------------------------------------------------------------------------
    def _encode_prompts(self, episodes: list[Episode]) -> tuple[list[list[int]], dict[str, torch.Tensor]]:
        """Prompt token ids per episode (image placeholders expanded) and the vision tensors of the batch."""
        texts, images = zip(*(_prompt_parts(e.prompt) for e in episodes))
        if self.is_vl and any(images):
            enc = self.processor(list(texts), [list(i) for i in images], padding_side="right")
            lens = enc["attention_mask"].sum(-1).tolist()
            ids = [row[:n] for row, n in zip(enc["input_ids"].tolist(), lens)]
            vis = {k: enc[k] for k in ("pixel_values", "image_grid_thw") if k in enc}
            return ids, vis
        out = []
        for t in texts:  # text prompts repeat group_size times: encode each distinct prompt once
            if t not in self._prompt_cache:
                if len(self._prompt_cache) > 4096:
                    self._prompt_cache.clear()
                self._prompt_cache[t] = self.tokenizer(t)["input_ids"]  # as the generator encodes it
            out.append(self._prompt_cache[t])
        return out, {}

    def build_batch(self, episodes: list[Episode]) -> dict[str, Any]:
        """Model inputs for ``prompt + actions`` rows, right-padded, plus the completion layout."""
        prompt_ids, vis = self._encode_prompts(episodes)
        acts = [list(map(int, e.actions)) for e in episodes]
        p_len = torch.tensor([len(p) for p in prompt_ids])
        a_len = torch.tensor([len(a) for a in acts])
        total = p_len + a_len
        L = int(total.max())
        ids = torch.full((len(episodes), L), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(episodes), L), dtype=torch.long)
        for i, (p, a) in enumerate(zip(prompt_ids, acts)):
            row = p + a
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attn[i, : len(row)] = 1
        batch: dict[str, Any] = {"input_ids": ids, "attention_mask": attn, **vis}
        if self.is_vl:
            img_id = getattr(self.processor, "image_token_id", None)
            batch["mm_token_type_ids"] = (ids == img_id).long() if img_id is not None else torch.zeros_like(ids)
        T = int(a_len.max()) if len(acts) else 0
        targets = torch.full((len(episodes), max(T, 1)), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(episodes), max(T, 1)), dtype=torch.float32)
        for i, a in enumerate(acts):
            if a:
                targets[i, : len(a)] = torch.tensor(a, dtype=torch.long)
                mask[i, : len(a)] = 1.0
        return {"inputs": batch, "prompt_len": p_len, "action_len": a_len, "targets": targets, "mask": mask}

    # -- scoring -----------------------------------------------------------------------------------------------
    def action_logprobs(self, module: torch.nn.Module, episodes: list[Episode], with_entropy: bool = False):
        b = self.build_batch(episodes)
        p_len, targets, mask = b["prompt_len"], b["targets"], b["mask"]
        T = targets.shape[1]
        # logits at position t predict token t+1: completion token j of row i is predicted at p_len[i] - 1 + j.
        # Only those positions are projected onto the vocabulary (2-D integer ``logits_to_keep``).
        L = b["inputs"]["input_ids"].shape[1]
        pos = ((p_len - 1).unsqueeze(1) + torch.arange(T).unsqueeze(0)).clamp(min=0, max=L - 1)  # [B, T]
        dev = module_device(module)
        inputs = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in b["inputs"].items()}
        if _ROW_LOGITS_TO_KEEP:
            sel = module(**inputs, logits_to_keep=pos.to(dev), use_cache=False).logits  # [B, T, V]
        else:  # older transformers: keep the span that covers every row's positions, then pick each row's own
            lo = int(pos.min())
            span = torch.arange(lo, int(pos.max()) + 1, device=dev)
            logits = module(**inputs, logits_to_keep=span, use_cache=False).logits
            sel = torch.take_along_dim(logits, (pos - lo).to(dev)[..., None], dim=1)
        targets, mask = targets.to(dev), mask.to(dev)
        logp = token_logprobs(sel, targets, self.temperature) * mask
        if with_entropy:
            with torch.no_grad():
                ent = token_entropy(sel.detach(), self.temperature) * mask
            return logp, mask, ent
        return logp, mask
