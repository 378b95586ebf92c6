"""The ``cached`` backend (``generation.backend: cached``): ``CachedSampler``, a lean batched sampler with a KV
cache for text-only causal LMs.

For tiny and small models, rollouts are bound by per-token Python overhead, not FLOPs. ``model.generate`` spends
a large share of each decode step outside the model (logits-processor and stopping-criteria objects,
``torch.multinomial``, bookkeeping). This sampler runs the same forward passes (prefill, then one token per step
through ``transformers``' ``DynamicCache``) with a minimal loop:

* one tokenisation per distinct prompt (a GRPO group repeats its prompt ``n`` times);
* left padding with explicit position ids (``cumsum(mask) - 1``), exactly what ``generate`` computes, so greedy
  decoding reproduces ``TransformersGenerator`` token for token (tested);
* sampling by the exponential race (``argmax(p / E)``, ``E ~ Exp(1)``), an exact draw from ``p`` without
  ``torch.multinomial`` (so its samples differ from ``TransformersGenerator``'s for the same seed); temperature
  and top-p as in ``generate``; vision / grounding special tokens suppressed (as in ``models.generation.hf``);
* rows that emitted EOS keep decoding pad tokens (their outputs are discarded); the loop stops when all rows are
  done; the stop-token contract (``models.generation.contract``) is applied to every row.

Refused by name: a vision-language processor or a request with images (Qwen2-VL-style 3-D rotary positions during
decoding are left to ``models.generation.hf.TransformersGenerator``), and a model partitioned by ZeRO-3 over several
ranks (the loop ends when this rank's rows end, so it cannot join the other ranks' parameter all-gathers).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from models.generation.contract import (
    Completion,
    GenRequest,
    GroupedGeneration,
    stop_ids,
    suppressed_token_ids,
    trim_at_stop,
)
from models.generation.zero3 import zero3_world

TEXT_ONLY = "generation.backend=cached serves text-only causal LMs"


class CachedSampler(GroupedGeneration):
    name = "cached"

    def __init__(self, model: torch.nn.Module, tokenizer, batch_size: int = 64):
        if hasattr(tokenizer, "image_processor"):
            raise ValueError(
                f"{TEXT_ONLY}, and this policy is vision-language (its processor has an image processor): set "
                "generation.backend=transformers (TransformersGenerator) for vision-language policies"
            )
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.eos_id, self.pad_id = stop_ids(tokenizer)
        self.suppress = torch.tensor(suppressed_token_ids(tokenizer), dtype=torch.long)
        self._enc_cache: dict[str, list[int]] = {}

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model

    def _ids(self, prompt: str) -> list[int]:
        ids = self._enc_cache.get(prompt)
        if ids is None:
            if len(self._enc_cache) > 4096:
                self._enc_cache.clear()
            ids = self._enc_cache[prompt] = self.tokenizer(prompt)["input_ids"]
        return ids

    @staticmethod
    def _pick(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
        if temperature <= 0:
            return logits.argmax(-1)
        probs = torch.softmax(logits / temperature, dim=-1)
        if top_p < 1.0:
            # keep the smallest set of most likely tokens whose mass reaches top_p (at least one)
            sp, si = probs.sort(dim=-1, descending=True)
            drop = (sp.cumsum(-1) - sp) >= top_p
            sp = sp.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter_(-1, si, sp)
        race = torch.empty_like(probs).exponential_()
        return (probs / race).argmax(-1)

    def _run(self, rows: list[list[int]], max_new_tokens: int, temperature: float, top_p: float,
             logprobs: bool = False) -> list[Completion]:
        from transformers import DynamicCache

        B = len(rows)
        P = max(len(r) for r in rows)
        ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, P + max_new_tokens), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, P - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, P - len(r) :] = 1  # generated positions are always attended (pads after EOS are discarded)
        pos = (mask[:, :P].cumsum(-1) - 1).clamp(min=0)
        dev = next(self.model.parameters()).device
        ids, mask, pos = ids.to(dev), mask.to(dev), pos.to(dev)
        cache = DynamicCache(config=self.model.config)
        out = self.model(input_ids=ids, attention_mask=mask[:, :P], position_ids=pos, cache=cache, use_cache=True,
                         logits_to_keep=1)
        nxt_pos = pos[:, -1:] + 1
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        toks = torch.full((B, max_new_tokens), self.pad_id, dtype=torch.long, device=dev)
        lps = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=dev) if logprobs else None
        suppress = self.suppress.to(dev)
        n_steps = 0
        for t in range(max_new_tokens):
            logits = out.logits[:, -1].float()
            raw = torch.log_softmax(logits, dim=-1) if logprobs else None  # before suppression (the contract)
            if suppress.numel():
                logits[:, suppress] = float("-inf")
            nxt = self._pick(logits, temperature, top_p)
            nxt = nxt.masked_fill(done, self.pad_id)
            toks[:, t] = nxt
            if raw is not None:
                lps[:, t] = raw.gather(-1, nxt.unsqueeze(-1)).squeeze(-1)
            n_steps = t + 1
            done |= nxt == self.eos_id
            if bool(done.all()) or t == max_new_tokens - 1:
                break
            out = self.model(input_ids=nxt.unsqueeze(1), attention_mask=mask[:, : P + t + 1], position_ids=nxt_pos,
                             cache=cache, use_cache=True)
            nxt_pos = nxt_pos + 1
        lp_rows = lps[:, :n_steps].tolist() if lps is not None else None
        outs = []
        for i, row in enumerate(toks[:, :n_steps].tolist()):
            keep, kept_lps, finished = trim_at_stop(row, lp_rows[i] if lp_rows is not None else None, self.eos_id,
                                                    self.pad_id)
            outs.append(Completion(keep, self.tokenizer.decode(keep, skip_special_tokens=True), finished, kept_lps))
        return outs

    def generate_groups(
        self,
        requests: list[GenRequest],
        n: int = 1,
        max_new_tokens: int = 48,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        logprobs: bool = False,
    ) -> Iterator[tuple[int, list[Completion]]]:
        """``generate``, one group at a time: yields ``(request index, its n completions)`` in request order as
        soon as the batch that completes a group is done (the same batches and samples as ``generate``)."""
        if any(r.images for r in requests):
            raise ValueError(
                f"CachedSampler got a request with images; {TEXT_ONLY} (set generation.backend=transformers, "
                "models.generation.hf.TransformersGenerator, for vision-language policies)"
            )
        world = zero3_world(self.model)
        if world > 1:
            raise ValueError(
                f"generation.backend=cached: the policy is partitioned by ZeRO-3 over {world} ranks, and this "
                "sampler's decoding loop ends when this rank's rows end, so it cannot join the other ranks' "
                "parameter all-gathers; set generation.backend=transformers (synced generation) under ZeRO-3"
            )
        if seed is not None:
            torch.manual_seed(seed)
        rows = [self._ids(r.prompt) for r in requests for _ in range(n)]
        was_training = self.model.training
        self.model.eval()
        nxt = 0
        try:
            outs: list[Completion] = []
            for i in range(0, len(rows), self.batch_size):
                with torch.inference_mode():
                    outs += self._run(rows[i : i + self.batch_size], max_new_tokens, temperature, top_p, logprobs)
                while nxt < len(requests) and len(outs) >= (nxt + 1) * n:
                    yield nxt, outs[nxt * n : (nxt + 1) * n]
                    nxt += 1
        finally:
            self.model.train(was_training)
        while nxt < len(requests):  # n = 0
            yield nxt, []
            nxt += 1
