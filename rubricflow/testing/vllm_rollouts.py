"""Tools for checking vLLM rollouts against the transformers backend (tests and ``bench/rollouts.py``).

``build_rollout_model`` makes a tiny Qwen2 that vLLM's CPU kernels accept (head dim 32) and fine-tunes it for a few
steps so that greedy completions of some prompts end with ``<|im_end|>`` within 8 tokens and others do not: both
sides of the stop-token contract are exercised. ``grpo_step`` is one real GRPO update (toy reward, the project's
``GRPOUpdater``) that moves the greedy outputs.

Run in the vLLM environment, this module is the trainer of the colocated mode (the CPU vLLM environment has torch
and transformers but not the trainer's other dependencies)::

    PYTHONPATH=. .venv-vllm/bin/python -m rubricflow.testing.vllm_rollouts colocated --model DIR --out OUT.json

It writes, before and after one GRPO update + ``sync_weights``: the greedy completions and per-token log-probs of
vLLM and of the transformers model it trains, and the refusals this platform produces (sleep mode, Qwen-VL).
``throughput`` times the colocated engine for ``bench/rollouts.py``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

PROMPT_WORDS = ["yes", "no", "red", "green", "blue", "two", "three", "four"]
STOP_WORDS = {"yes", "red", "blue", "three"}  # trained to answer "<w> <w>" then stop; the others ramble
MAX_NEW_TOKENS = 8


def rollout_dims():
    from models.tiny import TinyDims

    # head_dim 32: vLLM's CPU attention supports 32, 64, 80, ... (16 fails)
    return TinyDims(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, vocab_size=320,
                    vision_hidden_size=64, vision_depth=1, max_positions=512)


def questions() -> list[str]:
    return [f"Say {w} please." for w in PROMPT_WORDS]


def chat(tok, question: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)


def build_rollout_model(out_dir: str | Path, seed: int = 0, steps: int = 40):
    """Build, briefly fine-tune and save the tiny Qwen2; returns ``(model, tokenizer)``."""
    import torch

    from models.tiny import build_tiny_text, save
    from rubricflow.testing.toy_task import toy_corpus

    model, tok = build_tiny_text(toy_corpus(), rollout_dims(), seed=seed)
    rows = []
    for w, q in zip(PROMPT_WORDS, questions()):
        target = f"{w} {w}<|im_end|>" if w in STOP_WORDS else " ".join([w] * 12)
        rows.append(tok(chat(tok, q) + target)["input_ids"])
    L = max(map(len, rows))
    ids = torch.full((len(rows), L), tok.pad_token_id)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    labels = ids.masked_fill(mask == 0, -100)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    save(model, tok, out_dir)
    return model, tok


def completions_json(rows) -> list[dict]:
    return [{"token_ids": c.token_ids, "finished": c.finished, "text": c.text, "logprobs": c.logprobs}
            for row in rows for c in row]


def grpo_step(model, tok, gen, seed: int = 0, lr: float = 1e-3, temperature: float = 1.5) -> dict:
    """One GRPO update of ``model`` on rollouts sampled by ``gen`` at ``temperature`` (reward: share of ``no``
    tokens; the warm temperature keeps the groups of the confident tiny model varied)."""
    import torch

    from models.generation import GenRequest
    from rubricflow.grpo.causal_lm import CausalLMAdapter
    from rubricflow.grpo.config import GRPOConfig
    from rubricflow.grpo.engine import TorchEngine
    from rubricflow.grpo.types import Episode
    from rubricflow.grpo.updater import GRPOUpdater
    from rubricflow.testing.toy_task import toy_reward

    cfg = GRPOConfig(group_size=8, prompts_per_step=len(PROMPT_WORDS), lr=lr, max_new_tokens=MAX_NEW_TOKENS,
                     seed=seed, max_grad_norm=0.0, temperature=temperature)
    torch.manual_seed(seed)
    engine = TorchEngine(model, cfg)
    updater = GRPOUpdater(CausalLMAdapter(engine.module, tok, temperature), engine, cfg)
    target = tok("no", add_special_tokens=False)["input_ids"][0]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    reqs = [GenRequest(chat(tok, q)) for q in questions()]
    outs = gen.generate(reqs, n=cfg.group_size, max_new_tokens=MAX_NEW_TOKENS, temperature=temperature, seed=seed)
    eps = [Episode(r.prompt, c.token_ids + ([eos] if c.finished else []), toy_reward(c.token_ids, target), f"p{i}")
           for i, (r, cs) in enumerate(zip(reqs, outs)) for c in cs]
    m = updater.update(eps)
    model.eval()
    return {"loss": m["loss"], "reward_mean": sum(e.reward for e in eps) / len(eps), "n_episodes": len(eps)}


def _refusal(fn) -> str | None:
    from models.errors import BackendUnavailable

    try:
        fn()
    except BackendUnavailable as e:
        return str(e)
    return None


def colocated(model_dir: str, out: str, vl_model: str | None = None) -> None:
    """The colocated check (run in the vLLM environment); see the module docstring."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from models.generation import GenRequest
    from models.generation.hf import TransformersGenerator
    from models.generation.vllm_colocated import VLLMGenerator, check_vision_support

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    vllm = VLLMGenerator(model_dir, dtype="float32", enforce_eager=True, max_model_len=512)
    ref = TransformersGenerator(hf, tok)
    reqs = [GenRequest(chat(tok, q)) for q in questions()]

    def greedy(g):
        return completions_json(g.generate(reqs, n=1, max_new_tokens=MAX_NEW_TOKENS, temperature=0, logprobs=True))

    res: dict = {"before": {"vllm": greedy(vllm), "transformers": greedy(ref)}}
    res["update"] = grpo_step(hf, tok, vllm)
    vllm.sync_weights(hf)
    res["after"] = {"vllm": greedy(vllm), "transformers": greedy(ref)}
    res["refusals"] = {
        "sleep_mode": _refusal(lambda: VLLMGenerator(model_dir, dtype="float32", sleep_mode=True)),
        "vision": _refusal(lambda: check_vision_support(vl_model)) if vl_model else None,
    }
    import transformers
    import vllm as vllm_pkg

    res["versions"] = {"vllm": vllm_pkg.__version__, "transformers": transformers.__version__}
    Path(out).write_text(json.dumps(res))


def timed_generation(gen, prompts: list[str], n: int, max_new_tokens: int, rounds: int) -> dict:
    """Tokens generated per wall-clock second by ``gen`` (one warm-up call, then ``rounds`` timed calls; the stop
    token counts as generated), sampling at temperature 1."""
    import time

    from models.generation import GenRequest

    reqs = [GenRequest(p) for p in prompts]
    gen.generate(reqs, n=n, max_new_tokens=max_new_tokens, temperature=1.0, seed=0)
    rates = []
    for r in range(rounds):
        t0 = time.perf_counter()
        outs = gen.generate(reqs, n=n, max_new_tokens=max_new_tokens, temperature=1.0, seed=r + 1)
        dt = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) + c.finished for row in outs for c in row)
        rates.append({"tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt})
    return {"rounds": rates}


def throughput(model_dir: str, out: str, n: int, max_new_tokens: int, rounds: int) -> None:
    """The colocated engine's side of ``bench/rollouts.py`` (run in the vLLM environment)."""
    from transformers import AutoTokenizer

    from models.generation.vllm_colocated import VLLMGenerator

    tok = AutoTokenizer.from_pretrained(model_dir)
    gen = VLLMGenerator(model_dir, dtype="float32", enforce_eager=True)
    res = timed_generation(gen, [chat(tok, q) for q in questions()], n, max_new_tokens, rounds)
    Path(out).write_text(json.dumps(res))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("colocated", help="colocated vLLM vs transformers, before and after one GRPO update")
    c.add_argument("--model", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--vl-model", default=None)
    b = sub.add_parser("build", help="build the tiny rollout model")
    b.add_argument("--out", required=True)
    t = sub.add_parser("throughput", help="colocated vLLM rollout tokens/s (bench/rollouts.py)")
    t.add_argument("--model", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--n", type=int, default=8)
    t.add_argument("--max-new-tokens", type=int, default=32)
    t.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(int(os.environ.get("RUBRICFLOW_THREADS", "1")))
    if args.cmd == "colocated":
        colocated(args.model, args.out, args.vl_model)
    elif args.cmd == "throughput":
        throughput(args.model, args.out, args.n, args.max_new_tokens, args.rounds)
    else:
        build_rollout_model(args.out)


if __name__ == "__main__":  # vLLM spawns helpers that re-import __main__: keep the guard
    main()
