"""A toy task and tiny policies for GRPO tests, the multi-process check and the TRL comparison bench.

Prompts ask for a word; the reward of a completion is the fraction of its tokens that are one target token
(dense and always varied within a group, so a few GRPO steps visibly move a random tiny policy). Policies are the
production architectures at toy size (models.tiny): Qwen2 for text, Qwen2.5-VL with a 56 px image for the VLM.
"""

from __future__ import annotations

from pathlib import Path

TARGET_WORD = "yes"
WORDS = ["yes", "no", "red", "green", "blue", "two", "three", "four"]


def toy_corpus() -> list[str]:
    lines = [f"Say {w} please. {w} {w} {w}" for w in WORDS]
    lines += [f"{a} and {b}, {b} or {a}." for a in WORDS for b in WORDS]
    lines += [f"{i} + {j} = {i + j}. \\boxed{{{i + j}}}" for i in range(10) for j in range(10)]
    return lines * 4


def toy_prompts(n: int = 16) -> list[dict]:
    """``n`` prompt records ``{"id", "question"}`` (ids ``toy-000``...)."""
    return [{"id": f"toy-{i:03d}", "question": f"Say {WORDS[i % len(WORDS)]} please. ({i})"} for i in range(n)]


def toy_dims(hidden: int = 32, layers: int = 1, vocab: int = 320):
    from models.tiny import TinyDims

    return TinyDims(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=2,
        num_kv_heads=1,
        vocab_size=vocab,
        vision_hidden_size=32,
        vision_depth=1,
        max_positions=512,
    )


def build_toy_policy(kind: str = "text", hidden: int = 32, layers: int = 1, vocab: int = 320, seed: int = 0):
    """``(model, processor)``: a tiny Qwen2 (``kind="text"``, processor = tokenizer) or Qwen2.5-VL (``"vl"``)."""
    from models.tiny import build_tiny_text, build_tiny_vl

    dims = toy_dims(hidden, layers, vocab)
    if kind == "text":
        return build_tiny_text(toy_corpus(), dims, seed=seed)
    if kind == "vl":
        return build_tiny_vl(toy_corpus(), dims, seed=seed)
    raise ValueError(f"kind: expected 'text' or 'vl', got {kind!r}")


def save_toy_policy(out_dir: str | Path, kind: str = "text", **kw) -> Path:
    from models.tiny import save

    model, proc = build_toy_policy(kind, **kw)
    return save(model, proc, out_dir)


def target_token_id(tokenizer) -> int:
    ids = tokenizer(TARGET_WORD, add_special_tokens=False)["input_ids"]
    return int(ids[0])


def toy_reward(actions: list[int], target_id: int) -> float:
    """Fraction of completion tokens equal to ``target_id`` (0 for an empty completion)."""
    return sum(1 for a in actions if a == target_id) / len(actions) if actions else 0.0


def chat_prompt(processor, question: str, with_image: bool = False) -> str:
    if hasattr(processor, "chat_prompt"):
        return processor.chat_prompt(question, n_images=1 if with_image else 0)
    tok = processor
    return tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True)
