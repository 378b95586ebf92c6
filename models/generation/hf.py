"""The ``transformers`` backend: batched ``model.generate`` with KV cache, on CPU (or one GPU).

* Vision special tokens (``<|image_pad|>`` etc.) are suppressed: a weak policy can sample them, and a completion
  holding them breaks the next forward ("Image features and image tokens do not match").
* Under DeepSpeed ZeRO-3 with several ranks it generates with ``synced_gpus`` and every rank runs the same number
  of batches (ranks with fewer prompts run filler batches), so the parameter all-gathers of one rank's forward are
  always joined.

``hf_generate`` is the one ``model.generate`` call behind it: ``TransformersGenerator`` applies the stop-token
contract to its tokens; RoRo's step models (``rubricflow.methods.roro.env.step_lm``) stop at a newline and read the raw
logits of every generated token.
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
from models.processor import text_tokenizer


def hf_generate(model: torch.nn.Module, enc: dict[str, torch.Tensor], *, max_new_tokens: int, stop: int | list[int],
                pad_id: int, temperature: float = 0.0, top_p: float = 1.0, suppress: list[int] | None = None,
                synced: bool | None = None, logits: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``model.generate`` on the encoded, left-padded prompts ``enc``: greedy when ``temperature <= 0``, else
    sampling at ``temperature`` / ``top_p`` (no top-k); ``stop``: the token id(s) that end a row; ``suppress``: ids
    never generated; ``synced``: ``synced_gpus`` (``None``: transformers decides). Returns the generated tokens
    ``[B, T]`` (rows that stopped early are padded with ``pad_id``) and, with ``logits``, the raw (unprocessed)
    logits of every generated position ``[B, T, V]`` in float32."""
    greedy = temperature <= 0
    gen = model.generate(
        **enc,
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_p=None if greedy else top_p,
        top_k=None,
        suppress_tokens=suppress or None,
        eos_token_id=stop,
        pad_token_id=pad_id,
        use_cache=True,
        synced_gpus=synced,
        return_dict_in_generate=True,
        output_logits=logits,
    )
    new = gen.sequences[:, enc["input_ids"].shape[1] :]
    return new, (torch.stack(gen.logits, dim=1).float() if logits else None)


class TransformersGenerator(GroupedGeneration):
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

    def load_weights_file(self, path: str) -> None:
        """Copy the tensors of the ``*.safetensors`` files of folder ``path`` into the model (the rollout server's
        update channel with ``--backend transformers``); a name the model lacks is an error."""
        from pathlib import Path

        from safetensors.torch import load_file

        sd: dict[str, torch.Tensor] = {}
        for f in sorted(Path(path).glob("*.safetensors")):
            sd.update(load_file(str(f)))
        if not sd:
            raise ValueError(f"{path}: no *.safetensors file")
        res = self.model.load_state_dict(sd, strict=False)
        if res.unexpected_keys:
            raise ValueError(f"{path}: tensors the model does not have: {res.unexpected_keys[:5]}")

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
        soon as the batch that completes a group is done (the same batches and samples as ``generate``, which is
        this loop collected), so a caller can score a group while the next batches generate."""
        if seed is not None:
            torch.manual_seed(seed)
        expanded = [r for r in requests for _ in range(n)]
        world = zero3_world(self.model)
        if expanded:
            self._filler = GenRequest(expanded[0].prompt, list(expanded[0].images))
        n_batches = self._n_batches(len(expanded), world)
        outs: list[Completion] = []
        nxt = 0  # the next group to hand out
        was_training = self.model.training
        self.model.eval()
        try:
            for b in range(n_batches):
                chunk = expanded[b * self.batch_size : (b + 1) * self.batch_size]
                real = len(chunk)
                if not chunk:  # ZeRO-3: another rank still generates; join its all-gathers with a filler batch
                    chunk = [self._filler or GenRequest(self.tokenizer.apply_chat_template(
                        [{"role": "user", "content": ""}], tokenize=False, add_generation_prompt=True))]
                with torch.no_grad():
                    outs += self._generate_batch(chunk, max_new_tokens, temperature, top_p, logprobs, world > 1)[:real]
                while nxt < len(requests) and len(outs) >= (nxt + 1) * n:
                    yield nxt, outs[nxt * n : (nxt + 1) * n]
                    nxt += 1
        finally:
            self.model.train(was_training)
        while nxt < len(requests):  # n = 0
            yield nxt, []
            nxt += 1

    def _generate_batch(self, chunk: list[GenRequest], max_new_tokens: int, temperature: float, top_p: float,
                        logprobs: bool, synced: bool) -> list[Completion]:
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in self.encode(chunk).items()}
        new, raw = hf_generate(self.model, enc, max_new_tokens=max_new_tokens, stop=self.eos_id, pad_id=self.pad_id,
                               temperature=temperature, top_p=top_p, suppress=self.suppress, synced=synced,
                               logits=logprobs)
        lp_rows = None
        if raw is not None:  # raw logits of each generated position -> log-prob of the token generated there
            lp_rows = raw.log_softmax(-1).gather(-1, new[:, : raw.shape[1]].unsqueeze(-1)).squeeze(-1).tolist()
        outs = []
        for i, row in enumerate(new.tolist()):
            toks, lps, finished = trim_at_stop(row, lp_rows[i] if lp_rows is not None else None, self.eos_id,
                                               self.pad_id)
            outs.append(Completion(toks, self.tokenizer.decode(toks, skip_special_tokens=True), finished, lps))
        return outs
