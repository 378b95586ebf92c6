"""The RuCL tests' shared set-up: a counting dataset, a tiny SFT'd Qwen2.5-VL and a tiers file."""

import dataclasses

import pytest

from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, save_pool

TIERS = {"C17": "foundational", "C18": "foundational", "C05": "foundational",
         "C08": "advanced", "C11": "advanced", "C20": "advanced"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A counting dataset, a tiny Qwen2.5-VL warm-started by 40 SFT steps, and a tiers file."""
    from models.tiny import TinyDims, build_tiny_vl, save
    from rubricflow.data.schema import load_images
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.data.traces import render_trace
    from rubricflow.sections import SFTSchedule
    from rubricflow.training.sft import SFTExample, train_sft

    root = tmp_path_factory.mktemp("rucl")
    samples = build_synthetic_dataset(root / "data", ["counting"], {"train": 24, "test": 4}, seed=1, image_size=56)
    corpus = [s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
    model, proc = build_tiny_vl(corpus, TinyDims(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                                 vocab_size=400, vision_hidden_size=32, vision_depth=1))
    train = [s for s in samples if s.split == "train"]
    ex = [SFTExample(proc.chat_prompt(s.question, 1), render_trace(s.facts, s.answer), load_images(root / "data", s))
          for s in train]
    train_sft(model, proc, ex, SFTSchedule(steps=40, batch_size=16, lr=3e-3, warmup_steps=5, schedule="constant"))
    save(model, proc, root / "sft")
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in load_default_pool().rubrics if r.id in TIERS]
    save_pool(RubricPool(rub, {"source": "test"}), root / "tiers.json")
    return root
