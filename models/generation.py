"""Generation backends behind one interface.

* ``TransformersGenerator``: batched ``model.generate`` with KV cache, on CPU (or one GPU). Vision special
  tokens (``<|image_pad|>`` etc.) are suppressed: a weak policy can sample them, and a completion holding
  them breaks the next forward ("Image features and image tokens do not match").
* ``VLLMGenerator``: vLLM's offline ``LLM`` engine for GPU profiles; weights are pushed from the trainer with
  ``sync_weights``. If vLLM is not installed it raises ``BackendUnavailable`` naming the package; it never falls
  back to another backend silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from models.errors import BackendUnavailable
from models.processor import text_tokenizer
from models.tokenizer import VISION_TOKENS


@dataclass
class GenRequest:
    """One prompt: chat-formatted text (with image placeholders) and its images in placeholder order."""

    prompt: str
    images: list[Any] = field(default_factory=list)


@dataclass
class Completion:
    token_ids: list[int]
    text: str
    finished: bool  # ended with EOS (else it hit max_new_tokens)


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
    ) -> list[list[Completion]]:
        """``n`` completions per request (outer list follows ``requests``)."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the backend generate with ``model``'s current weights."""
        ...


def suppressed_token_ids(tokenizer) -> list[int]:
    """Ids of vision/grounding special tokens that a policy must never emit."""
    ids = []
    for t in VISION_TOKENS:
        i = tokenizer.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and i != tokenizer.unk_token_id:
            ids.append(i)
    return sorted(set(ids))


class TransformersGenerator:
    name = "transformers"

    def __init__(self, model: torch.nn.Module, processor, batch_size: int = 64):
        self.model = model
        self.processor = processor
        self.tokenizer = text_tokenizer(processor)
        self.is_vl = hasattr(processor, "image_processor")
        self.batch_size = batch_size
        self.suppress = suppressed_token_ids(self.tokenizer)
        self.eos_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.pad_id = self.tokenizer.pad_token_id

    def sync_weights(self, model: torch.nn.Module) -> None:
        self.model = model  # same process, same tensors: nothing to copy

    def encode(self, requests: list[GenRequest]) -> dict[str, torch.Tensor]:
        texts = [r.prompt for r in requests]
        if self.is_vl:
            return self.processor(texts, [r.images for r in requests], padding_side="left")
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    @torch.no_grad()
    def generate(
        self,
        requests: list[GenRequest],
        n: int = 1,
        max_new_tokens: int = 48,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[list[Completion]]:
        if seed is not None:
            torch.manual_seed(seed)
        expanded = [r for r in requests for _ in range(n)]
        outs: list[Completion] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for i in range(0, len(expanded), self.batch_size):
                chunk = expanded[i : i + self.batch_size]
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
                )
                new = gen[:, enc["input_ids"].shape[1] :]
                for row in new.tolist():
                    toks, finished = [], False
                    for t in row:
                        if t == self.eos_id:
                            finished = True
                            break
                        if t == self.pad_id:
                            break
                        toks.append(t)
                    text = self.tokenizer.decode(toks, skip_special_tokens=True)
                    outs.append(Completion(toks, text, finished))
        finally:
            self.model.train(was_training)
        return [outs[j * n : (j + 1) * n] for j in range(len(requests))]


class VLLMGenerator:
    """vLLM offline engine (GPU). Requires the ``vllm`` package (the ``gpu`` extra)."""

    name = "vllm"

    def __init__(self, model_path: str, gpu_memory_utilization: float = 0.45, tensor_parallel_size: int = 1, **kw):
        try:
            from vllm import LLM
        except ImportError as e:
            raise BackendUnavailable(
                "generation.backend=vllm but the `vllm` package is not importable in this environment "
                "(install the `gpu` extra on a GPU machine, or set generation.backend=transformers)"
            ) from e
        if not torch.cuda.is_available():
            raise BackendUnavailable("generation.backend=vllm needs a CUDA GPU; none is visible")
        self.llm = LLM(
            model=model_path,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            enable_sleep_mode=True,
            **kw,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.suppress = suppressed_token_ids(self.tokenizer)

    def sync_weights(self, model: torch.nn.Module) -> None:
        # Push trainer weights into the engine (same process, colocated as in verl/TRL "colocate" mode). Under
        # ZeRO-3 the parameters are partitioned: gather each one for the copy.
        engine = self.llm.llm_engine
        worker = engine.model_executor.driver_worker.worker
        target = worker.model_runner.model
        params = dict(model.named_parameters())
        partitioned = any(hasattr(p, "ds_id") for p in params.values())
        if partitioned:
            import deepspeed

            for name, p in params.items():
                with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
                    target.load_weights([(name, p.data)])
        else:
            target.load_weights(model.state_dict().items())
        self.llm.reset_prefix_cache()

    def generate(self, requests, n=1, max_new_tokens=48, temperature=1.0, top_p=1.0, seed=None):
        from vllm import SamplingParams

        sp = SamplingParams(
            n=n,
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            logit_bias={i: -100.0 for i in self.suppress} or None,
        )
        prompts = [
            {"prompt": r.prompt, "multi_modal_data": {"image": r.images}} if r.images else {"prompt": r.prompt}
            for r in requests
        ]
        results = self.llm.generate(prompts, sp, use_tqdm=False)
        return [
            [Completion(list(o.token_ids), o.text, o.finish_reason == "stop") for o in res.outputs] for res in results
        ]


def make_generator(backend: str, model, processor, model_path: str | None = None, **kw) -> GenerationBackend:
    if backend == "transformers":
        return TransformersGenerator(model, processor, batch_size=kw.get("batch_size", 64))
    if backend == "vllm":
        return VLLMGenerator(
            model_path or "",
            gpu_memory_utilization=kw.get("gpu_memory_utilization", 0.45),
            tensor_parallel_size=kw.get("tensor_parallel_size", 1),
        )
    raise ValueError(f"generation.backend: unknown backend {backend!r}; expected 'transformers' or 'vllm'")
