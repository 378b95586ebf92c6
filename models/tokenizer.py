"""Offline tokenizer for the tiny models.

A byte-level BPE is trained locally with the `tokenizers` library on text from the synthetic tasks and wrapped
as transformers' ``Qwen2Tokenizer``, which carries Qwen's own normalizer (NFC) and pre-tokenizer (the Qwen
split regex + byte-level), so that ``AutoTokenizer`` re-encodes identically after a save/load round-trip.
Qwen's special tokens (chat and vision markers) are added with Qwen's names, so prompts built for the tiny model
have exactly the shape of prompts for Qwen2.5-VL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

# Qwen2 / Qwen2.5-VL special tokens, in Qwen's order.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
VISION_TOKENS = [t for t in SPECIAL_TOKENS
                 if t.startswith(("<|vision", "<|image", "<|video", "<|box", "<|quad", "<|object"))]

# A Qwen2-VL style chat template (the same turn markers and vision placeholders as Qwen2.5-VL-Instruct).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_QWEN_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 1024):
    """Train a byte-level BPE on ``corpus`` and return a ``transformers`` Qwen2Tokenizer."""
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    vocab = bpe.get_vocab()
    # merges in rank order, as (left, right) pairs
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" "))
              for m in json.loads(bpe.to_str())["model"]["merges"]]
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = 4096
    return tok
