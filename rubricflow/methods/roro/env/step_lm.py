"""Step models: an LM that writes the *next step* of a solution, with the token statistics the router needs.

A solution is one assistant turn, one step per line (``7 + 5 = 12\\n12 * 3 = 36\\n...#### 32``). To write step
k the model continues ``chat prompt + steps 1..k-1 (each followed by a newline)`` and stops at the newline (or
end of turn). Generation is greedy, so a prefix always yields the same step: the routing environment caches
steps by prefix, which is what makes many router rollouts cheap.

Both get their tokens from the shared generation layer (``models.generation``), not from an engine of their own:

* ``TransformersStepModel`` (CPU / one GPU): ``models.generation.hf.hf_generate`` (the transformers backend's
  ``model.generate`` call), greedy, stopping at the newline or end of turn, with the raw logits of every
  generated token, from which the step's uncertainty is computed.
* ``VLLMStepModel`` (GPU profile): an engine from ``models.generation.vllm_colocated.build_engine`` (raises
  ``BackendUnavailable`` naming ``roro.<model>.backend`` when vLLM is missing; never a silent fallback), sampled
  with ``stop=["\\n"]`` and top-k logprobs.

They do not call the rollout contract's ``generate``: its completions end at ``<|im_end|>`` or a generated pad
token and never contain a vision token, where a step ends at a newline or the end of turn (for vLLM a stop string,
also met inside a longer token) with nothing suppressed, and the vLLM model's statistics cover every token vLLM
returns; completions under the contract would change RoRo's steps.

Uncertainty of a step (``step_uncertainty``), over the step's content tokens (the newline / end-of-turn token
that closes the step is excluded):

* ``one_minus_min_maxprob`` (default): 1 - the smallest top-1 probability; one unsure digit is what makes an
  arithmetic step wrong, and a mean over the copied, confident tokens would dilute it;
* ``one_minus_mean_maxprob``: 1 - the mean top-1 probability;
* ``mean_entropy`` / ``max_entropy``: token entropies (nats) divided by ``log(vocab)``, so in [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from models.generation.hf import hf_generate
from models.generation.vllm_colocated import build_engine

UncertaintyKind = Literal["one_minus_min_maxprob", "one_minus_mean_maxprob", "mean_entropy", "max_entropy"]
INSTRUCTION = "Solve step by step."


@dataclass
class StepOutput:
    text: str  # the step, without its closing newline
    n_tokens: int  # generated tokens, the closing newline / end-of-turn included (what the step cost)
    uncertainty: float  # step_uncertainty(...) of the content tokens
    finished: bool  # closed by a newline or end-of-turn (else it hit max_step_tokens)


def step_uncertainty(maxprobs: list[float], entropies: list[float], kind: UncertaintyKind, vocab_size: int) -> float:
    """Uncertainty in [0, 1] of one step from its tokens' top-1 probabilities and entropies (see module doc)."""
    if not maxprobs:
        return 1.0  # an empty step: nothing the model is sure of
    if kind == "one_minus_min_maxprob":
        return 1.0 - min(maxprobs)
    if kind == "one_minus_mean_maxprob":
        return 1.0 - sum(maxprobs) / len(maxprobs)
    norm = math.log(max(vocab_size, 2))
    if kind == "mean_entropy":
        return min(1.0, sum(entropies) / len(entropies) / norm)
    if kind == "max_entropy":
        return min(1.0, max(entropies) / norm)
    raise ValueError(f"uncertainty: unknown kind {kind!r}; expected one of {UncertaintyKind.__args__}")


def solution_prompt(tokenizer, question: str) -> str:
    """Chat prompt for a solution; steps are appended to it, one per line."""
    msgs = [{"role": "user", "content": f"{question}\n{INSTRUCTION}"}]
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def prefix_text(prompt: str, steps: list[str]) -> str:
    return prompt + "".join(s + "\n" for s in steps)


class StepModel(Protocol):
    name: str
    n_params: int

    def propose(self, prefixes: list[str]) -> list[StepOutput]:
        """Greedy next step for each prefix (``prefix_text(prompt, steps)``)."""
        ...

    def prompt(self, question: str) -> str: ...


class TransformersStepModel:
    """Greedy next-step generation with a Hugging Face causal LM (tiny Qwen2 on CPU)."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        name: str,
        max_step_tokens: int = 16,
        uncertainty: UncertaintyKind = "one_minus_min_maxprob",
        batch_size: int = 64,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_step_tokens = max_step_tokens
        self.uncertainty = uncertainty
        self.batch_size = batch_size
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        nl = tokenizer("\n", add_special_tokens=False)["input_ids"]
        if len(nl) != 1:
            raise ValueError(f"step model {name}: the newline must be one token to close steps, got ids {nl}")
        self.nl_id = nl[0]
        self.pad_id = tokenizer.pad_token_id
        self.n_params = sum(p.numel() for p in model.parameters())
        self.vocab_size = model.config.vocab_size

    def prompt(self, question: str) -> str:
        return solution_prompt(self.tokenizer, question)

    @torch.no_grad()
    def propose(self, prefixes: list[str]) -> list[StepOutput]:
        out: list[StepOutput] = []
        for i in range(0, len(prefixes), self.batch_size):
            out.extend(self._propose(prefixes[i : i + self.batch_size]))
        return out

    def _propose(self, prefixes: list[str]) -> list[StepOutput]:
        enc = self.tokenizer(prefixes, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
        new, logits = hf_generate(  # greedy; logits: [B, T, V] raw (unprocessed)
            self.model, {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]},
            max_new_tokens=self.max_step_tokens, stop=[self.nl_id, self.eos_id], pad_id=self.pad_id, logits=True,
        )
        logp = torch.log_softmax(logits, dim=-1)
        maxp = logp.max(-1).values.exp()
        ent = -(logp.exp() * logp).sum(-1)
        res = []
        for b, row in enumerate(new.tolist()):
            toks, finished = [], False
            for t in row:
                if t in (self.nl_id, self.eos_id):
                    finished = True
                    break
                toks.append(t)
            n = len(toks)
            res.append(
                StepOutput(
                    text=self.tokenizer.decode(toks, skip_special_tokens=True).strip(),
                    n_tokens=n + (1 if finished else 0),
                    uncertainty=step_uncertainty(
                        maxp[b, :n].tolist(), ent[b, :n].tolist(), self.uncertainty, self.vocab_size
                    ),
                    finished=finished,
                )
            )
        return res


class VLLMStepModel:
    """Greedy next-step generation with vLLM (GPU profile). Uncertainty from top-k logprobs (``logprobs_k``)."""

    def __init__(
        self,
        model_path: str,
        name: str,
        n_params: int,
        max_step_tokens: int = 256,
        uncertainty: UncertaintyKind = "one_minus_min_maxprob",
        gpu_memory_utilization: float = 0.4,
        logprobs_k: int = 20,
    ):
        if n_params <= 0:
            raise ValueError(
                f"roro.{name}.n_params: set the parameter count of {model_path} (for the 2 * params * tokens FLOPs "
                "estimate); vLLM does not report it"
            )
        self.llm = build_engine(
            model_path, in_process=False, setting=f"roro.{name}.backend=vllm",
            hint="install the `gpu` extra on a GPU machine, or use the tiny profile with backend=transformers",
            gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.name = name
        self.max_step_tokens = max_step_tokens
        self.uncertainty = uncertainty
        self.logprobs_k = logprobs_k
        self.vocab_size = len(self.tokenizer)
        self.n_params = n_params

    def prompt(self, question: str) -> str:
        return solution_prompt(self.tokenizer, question)

    def propose(self, prefixes: list[str]) -> list[StepOutput]:
        from vllm import SamplingParams

        sp = SamplingParams(temperature=0.0, max_tokens=self.max_step_tokens, stop=["\n"],
                            logprobs=self.logprobs_k, include_stop_str_in_output=False)
        res = []
        for r in self.llm.generate(prefixes, sp, use_tqdm=False):
            o = r.outputs[0]
            maxps, ents = [], []
            for top in o.logprobs or []:
                lps = sorted((lp.logprob for lp in top.values()), reverse=True)
                ps = [math.exp(x) for x in lps]
                maxps.append(ps[0])
                ents.append(-sum(p * math.log(p) for p in ps if p > 0))  # truncated to the top-k
            finished = o.finish_reason == "stop"
            res.append(StepOutput(o.text.strip(), len(o.token_ids) + (1 if finished else 0),
                                  step_uncertainty(maxps, ents, self.uncertainty, self.vocab_size), finished))
        return res
