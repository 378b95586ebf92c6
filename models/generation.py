"""Generation backends behind one interface.

* ``TransformersGenerator``: batched ``model.generate`` with KV cache, on CPU (or one GPU). Vision special
  tokens (``<|image_pad|>`` etc.) are suppressed: a weak policy can sample them, and a completion holding
  them breaks the next forward ("Image features and image tokens do not match"). Under DeepSpeed ZeRO-3 with
  several ranks it generates with ``synced_gpus`` and every rank runs the same number of batches (ranks with
  fewer prompts run filler batches), so the parameter all-gathers of one rank's forward are always joined.
* ``models.vllm_rollout.VLLMGenerator``: vLLM's ``LLM`` in the trainer process (``vllm_mode: colocate``);
  weights are pushed with ``sync_weights`` through vLLM's worker ``reload_weights``.
* ``models.rollout_client.VLLMServerGenerator``: a rollout server process running vLLM in its own environment
  (``models.rollout_server``, ``vllm_mode: server``); HTTP generation, weights synced through a safetensors file.
  The trainer process never imports vLLM.

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
from models.processor import text_tokenizer
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


def zero3_world(model: torch.nn.Module) -> int:
    """Number of ranks that must join this model's forwards: the world size when its parameters are ZeRO-3
    partitioned (DeepSpeed tags them with ``ds_id``) over several ranks, else 1."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return 1
    return dist.get_world_size() if any(hasattr(p, "ds_id") for p in model.parameters()) else 1


def full_parameters(model: torch.nn.Module):
    """``(name, tensor)`` for every parameter with its full value, in ``named_parameters`` order.

    Under ZeRO-3 each parameter is gathered on its own (``GatheredParameters``; a collective, so every rank must
    iterate the whole stream in the same order) and cloned, so peak memory is one parameter beyond the shards.
    """
    for name, p in model.named_parameters():
        if hasattr(p, "ds_id"):
            import deepspeed

            with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                yield name, p.data.detach().clone()
        else:
            yield name, p.data.detach()


class TransformersGenerator:
    name = "transformers"

    def __init__(self, model: torch.nn.Module, processor, batch_size: int = 64):
        self.model = model
        self.processor = processor
        self.tokenizer = text_tokenizer(processor)
        self.is_vl = hasattr(processor, "image_processor")
        self.batch_size = batch_size
        self.suppress = suppressed_token_ids(self.tokenizer)
        self.eos_id, self.pad_id = stop_ids(self.tokenizer)
        self._filler: GenRequest | None = None  # a prompt for filler batches (ZeRO-3, a rank with fewer prompts)

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # same process, same tensors: nothing to copy

    def encode(self, requests: list[GenRequest]) -> dict[str, torch.Tensor]:
        texts = [r.prompt for r in requests]
        if self.is_vl:
            return self.processor(texts, [r.images for r in requests], padding_side="left")
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def _n_batches(self, n_prompts: int, world: int) -> int:
        """Batches this call runs: its own, or under ZeRO-3 the most any rank needs (agreed by all-reduce)."""
        mine = -(-n_prompts // self.batch_size)
        if world == 1:
            return mine
        import torch.distributed as dist

        t = torch.tensor([mine], dtype=torch.long)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    @torch.no_grad()
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
        if seed is not None:
            torch.manual_seed(seed)
        expanded = [r for r in requests for _ in range(n)]
        world = zero3_world(self.model)
        if expanded:
            self._filler = GenRequest(expanded[0].prompt, list(expanded[0].images))
        n_batches = self._n_batches(len(expanded), world)
        outs: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for b in range(n_batches):
                chunk = expanded[b * self.batch_size : (b + 1) * self.batch_size]
                real = len(chunk)
                if not chunk:  # ZeRO-3: another rank still generates; join its all-gathers with a filler batch
                    chunk = [self._filler or GenRequest(self.tokenizer.apply_chat_template(
                        [{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True))]
                outs += self._generate_batch(chunk, max_new_tokens, temperature, top_p, logprobs, world > 1)[:real]
        finally:
            self.model.train(was_training)
        return [outs[j * n : (j + 1) * n] for j in range(len(requests))]

    def _generate_batch(self, chunk: list[GenRequest], max_new_tokens: int, temperature: float, top_p: float,
                        logprobs: bool, synced: bool) -> list[Completion]:
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in self.encode(chunk).items()}
        greedy = temperature <= 0
        gen = self.model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_p=None if greedy else top_p,
            top_k=None,
            suppress_tokens=self.suppress or None,
            eos_token_id=self.eos_id,
            pad_token_id=self.pad_id,
            use_cache=True,
            synced_gpus=synced,
            return_dict_in_generate=True,
            output_logits=logprobs,
        )
        new = gen.sequences[:, enc["input_ids"].shape[1] :]
        lp_rows = None
        if logprobs:  # raw logits of each generated position -> log-prob of the token generated there
            raw = torch.stack(gen.logits, dim=1).float().log_softmax(-1)  # [B, T, V]
            lp_rows = raw.gather(-1, new[:, : raw.shape[1]].unsqueeze(-1)).squeeze(-1).tolist()
        outs = []
        for i, row in enumerate(new.tolist()):
            toks, lps, finished = trim_at_stop(row, lp_rows[i] if lp_rows is not None else None, self.eos_id,
                                               self.pad_id)
            outs.append(Completion(toks, self.tokenizer.decode(toks, skip_special_tokens=True), finished, lps))
        return outs


def make_generator(backend: str, model, processor, model_path: str | None = None, *, mode: str = "colocate",
                   batch_size: int = 64, server_url: str | None = None, sync_dir: str | None = None,
                   **vllm_kw) -> GenerationBackend:
    """The backend named by ``backend`` (``transformers`` | ``vllm``; vLLM in ``mode`` ``colocate`` | ``server``).

    ``vllm_kw`` go to ``VLLMGenerator`` (colocate). Unknown names and unsupported combinations raise naming them.
    """
    if backend == "transformers":
        return TransformersGenerator(model, processor, batch_size=batch_size)
    if backend == "vllm":
        if mode == "colocate":
            from models.vllm_rollout import VLLMGenerator

            if not model_path:
                raise ValueError("generation.backend=vllm (colocate) needs the policy's model directory (model_path)")
            return VLLMGenerator(model_path, **vllm_kw)
        if mode == "server":
            from models.rollout_client import VLLMServerGenerator

            tp = vllm_kw.get("tensor_parallel_size", 1)
            if tp != 1:
                raise ValueError(
                    f"generation.vllm_tensor_parallel_size={tp} applies to vllm_mode=colocate; in server mode the "
                    "rollout server takes --tensor-parallel-size itself (models.rollout_server)"
                )
            if vllm_kw.get("sleep_mode"):
                raise ValueError("generation.vllm_sleep_mode applies to vllm_mode=colocate (a rollout server keeps "
                                 "its own devices); set it to false in server mode")
            return VLLMServerGenerator(server_url or "", processor, sync_dir or "")
        raise ValueError(f"generation.vllm_mode: unknown mode {mode!r}; expected 'colocate' or 'server'")
    raise ValueError(f"generation.backend: unknown backend {backend!r}; expected 'transformers' or 'vllm'")


__all__ = ["BackendUnavailable", "Completion", "GenRequest", "GenerationBackend", "TransformersGenerator",
           "full_parameters", "make_generator", "stop_ids", "suppressed_token_ids", "trim_at_stop", "zero3_world"]
