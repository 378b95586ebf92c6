"""Induction pretraining (rubricflow.training.induction): the task's examples, the pool, and that training on it
teaches a fresh tiny model to copy by content."""

import random

import pytest

from rubricflow.training.induction import (InductionTask, copy_accuracy, example, pretrain_induction, text_pool,
                                          token_pool)


class _Tok:
    all_special_ids = [0, 1]

    def __len__(self):
        return 40


def test_the_target_follows_the_prefix_at_a_varying_offset():
    pool, sep = list(range(2, 40)), 99
    task = InductionTask(min_len=10, max_len=20, prefix=2, copy=4)
    offsets = set()
    for i in range(200):
        prompt, target = example(random.Random(i), pool, sep, task)
        cut = prompt.index(sep)
        seq, prefix = prompt[:cut], prompt[cut + 1:]
        assert 10 <= len(seq) <= 20 and len(prefix) == 2 and len(target) == 4
        starts = [s for s in range(len(seq) - 1) if seq[s:s + 2] == prefix and seq[s + 2:s + 6] == target]
        assert starts, (seq, prefix, target)  # the target is what follows the prefix in the sequence
        offsets.add(len(prompt) - starts[0])
    assert len(offsets) > 10  # no fixed distance back finds the span


def test_the_pool_is_a_seeded_sample_of_ordinary_tokens_and_the_separator_is_not_in_it():
    pool, sep = token_pool(_Tok(), 8, seed=3)
    assert len(pool) == 8 and sep not in pool and not {0, 1} & {*pool, sep}
    assert token_pool(_Tok(), 8, seed=3) == (pool, sep)
    assert token_pool(_Tok(), 8, seed=4) != (pool, sep)
    with pytest.raises(ValueError, match="ordinary tokens"):
        token_pool(_Tok(), 38)


def test_a_text_pool_is_the_texts_own_tokens_and_its_separator_is_outside_them():
    class Tok(_Tok):
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [0] + [ord(c) - 90 for c in text]}  # 0 is special; "a" -> 7, "b" -> 8, ...

    pool, sep = text_pool(Tok(), ["ab", "ba", "ad"], seed=1)
    assert pool == [7, 8, 10] and sep not in pool and sep not in (0, 1) and 0 <= sep < 40
    assert text_pool(Tok(), ["ab", "ba", "ad"], seed=1, size=2)[0] == [7, 8]  # "a" thrice, then "b" (before "d")
    with pytest.raises(ValueError, match="distinct ordinary tokens"):
        text_pool(Tok(), ["aaa"])


def test_the_task_refuses_a_sequence_too_short_for_its_span():
    with pytest.raises(ValueError, match="min_len"):
        InductionTask(min_len=6, prefix=2, copy=6)
    with pytest.raises(ValueError, match="pool"):
        InductionTask(pool=1)


def test_pretraining_teaches_a_fresh_tiny_model_to_copy_by_content():
    import torch

    from models.tiny import TinyDims, build_tiny_text

    torch.set_num_threads(1)
    corpus = [f"C = {i % 8}, D = {(i * 3) % 8}. read the height of bar E. verdict: A" for i in range(100)]
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                                  vocab_size=300), seed=0)
    task = InductionTask(min_len=8, max_len=16, prefix=2, copy=3, pool=16)
    out = pretrain_induction(model, tok, 600, 16, 3e-3, seed=0, task=task)
    assert out["chance"] == pytest.approx(1 / 16)
    assert out["copy_acc_before"] < 2 * out["chance"]
    # well above chance after 600 steps (the circuit keeps forming long after: 2000+ steps in bench/copy_probe.py)
    assert out["copy_acc_after"] > 2 * out["chance"] and out["copy_acc_after"] > out["copy_acc_before"] + 0.05
    assert copy_accuracy(model, tok, seed=1, task=task, pool_seed=0) == pytest.approx(out["copy_acc_after"])
    with pytest.raises(ValueError, match="steps"):
        pretrain_induction(model, tok, 0, 16, 1e-2)
