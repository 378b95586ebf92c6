"""The generation contract every backend follows: requests, completions, the backend protocol, stop tokens.

One contract for every backend (``Completion``): ``token_ids`` are the generated tokens *without* the stop token;
``finished`` says the completion ended with ``<|im_end|>``; a generated pad token (``<|endoftext|>``) ends the
completion unfinished. A caller that trains on the completion appends the EOS itself when ``finished``
(``rubricflow.methods.rucl.rollout``), exactly once. ``trim_at_stop`` applies the contract to raw token streams.

A missing optional backend raises ``BackendUnavailable`` naming it; nothing falls back to another backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from models.errors import BackendUnavailable
from models.tokenizer import VISION_TOKENS

EOS_TOKEN = "<|im_end|>"


@dataclass
class GenRequest:
    """One prompt: chat-formatted text (with image placeholders) and its images in placeholder order."""

    prompt: str
    images: list[Any] = field(default_factory=list)


@dataclass
class Completion:
    token_ids: list[int]  # generated tokens, without the stop token
    text: str
    finished: bool  # ended with the EOS (<|im_end|>, not in token_ids); else it hit max_new_tokens or a pad token
    # per token of ``token_ids`` (when asked for): log-probability under the model's raw next-token distribution
    # (temperature 1, before suppression or any other processing), as vLLM's default ``raw_logprobs``
    logprobs: list[float] | None = None


class GenerationBackend(Protocol):
    name: str

    def generate(
        self,
        requests: list[GenRequest],
        n: int = 1,
        max_new_tokens: int = 48,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        """``n`` completions per request (outer list follows ``requests``)."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the backend generate with ``model``'s current weights (a collective under ZeRO-3: call it on
        every rank)."""
        ...


class GroupedGeneration:
    """``generate`` for a backend that yields groups (``generate_groups``: ``(request index, its n completions)`` as
    each batch completes a group): the same groups collected in request order."""

    def generate(
        self,
        requests: list[GenRequest],
        n: int = 1,
        max_new_tokens: int = 48,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        out: list[list[Completion]] = [[] for _ in requests]
        for j, comps in self.generate_groups(requests, n, max_new_tokens, temperature, top_p, seed, logprobs):
            out[j] = comps
        return out


def suppressed_token_ids(tokenizer) -> list[int]:
    """Ids of vision/grounding special tokens that a policy must never emit."""
    ids = []
    for t in VISION_TOKENS:
        i = tokenizer.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id:
            ids.append(i)
    return sorted(set(ids))


def stop_ids(tokenizer) -> tuple[int, int]:
    """``(eos_id, pad_id)``: generation stops at ``<|im_end|>``; a generated pad token ends a completion too."""
    eos = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    if not isinstance(eos, int) or eos < 0 or eos == tokenizer.unk_token_id:
        eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return int(eos), int(pad)


def trim_at_stop(tokens: list[int], logprobs: list[float] | None, eos_id: int,
                 pad_id: int) -> tuple[list[int], list[float] | None, bool]:
    """Cut a raw token stream at its first EOS (``finished``) or pad token (not finished), dropping that token."""
    for k, t in enumerate(tokens):
        if t == eos_id or t == pad_id:
            return list(tokens[:k]), (list(logprobs[:k]) if logprobs is not None else None), t == eos_id
    return list(tokens), (list(logprobs) if logprobs is not None else None), False


__all__ = ["EOS_TOKEN", "BackendUnavailable", "Completion", "GenRequest", "GenerationBackend", "stop_ids",
           "suppressed_token_ids", "trim_at_stop"]
