"""RuCL on a text policy (a causal LM, no images): the arith task, its one-shot prompts, LoRA adapters on the top
layers only, and a saved policy that loads like any checkpoint."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, load_tiers, save_pool
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.train import train_rucl

TIERS = {"W11": "foundational", "W14": "foundational", "W01": "foundational", "W06": "foundational",
         "W04": "advanced", "W05": "advanced"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """An arith dataset, a tiny Qwen2 text model warm-started on gold traces (with the task's demonstration in every
    prompt, as at rollout time), and a tiers file of the text pool."""
    import dataclasses

    from models.processor import chat_prompt
    from models.tiny import TinyDims, build_tiny_text, save
    from rubricflow.data.arith import task_demo
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.data.traces import render_trace
    from rubricflow.sections import SFTSchedule
    from rubricflow.training.sft import SFTExample, train_sft

    root = tmp_path_factory.mktemp("text")
    samples = build_synthetic_dataset(root / "data", ["arith"], {"train": 24, "val": 4}, seed=1, image_size=56)
    corpus = ([s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
              + list(task_demo("arith")))
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                                  vocab_size=400))
    ex = [SFTExample(chat_prompt(tok, s.question, demo=task_demo(s.task)), render_trace(s.facts, s.answer))
          for s in samples if s.split == "train"]
    train_sft(model, tok, ex, SFTSchedule(steps=30, batch_size=12, lr=3e-3, warmup_steps=3, schedule="constant"))
    save(model, tok, root / "init")
    rub = [dataclasses.replace(r, tier=TIERS[r.id]) for r in load_default_pool(
        "rubricflow/methods/rucl/resources/rubric_pool_text.json").rubrics if r.id in TIERS]
    save_pool(RubricPool(rub, {"source": "test"}), root / "tiers.json")
    return root


@pytest.mark.slow
def test_rucl_trains_a_text_policy_with_lora_on_the_top_layer_and_saves_a_plain_checkpoint(setup):
    from safetensors.torch import load_file

    from models.loader import load_policy

    root = setup
    cfg = RuCLConfig.model_validate({
        "init_from": str(root / "init"), "tiers_path": str(root / "tiers.json"), "out_dir": str(root / "out"),
        "checkpoint_dir": str(root / "ck"), "eval_samples": 4,
        "lora": {"rank": 4, "alpha": 8, "top_layers": 1},
        "curriculum": {"threshold": 0.3, "window": 2, "ramp_steps": 2, "peak": 0.5, "shape": "linear"},
        "grpo": {"group_size": 4, "prompts_per_step": 3, "steps": 3, "max_new_tokens": 32, "lr": 5e-3,
                 "checkpoint_every": 0, "engine": {"kind": "torch"}},
    })
    res = train_rucl(cfg, root / "data", ProgrammaticJudge(), load_tiers(root / "tiers.json"), root / "reports",
                     seed=0)
    assert res["steps"] == 3 and set(res["accuracy_before"]) == {"arith", "overall"}
    rows = [json.loads(x) for x in (root / "reports" / "steps.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["reward/total"]) and r["judge/failures"] == 0 for r in rows)
    assert any(r["loss"] != 0 for r in rows)  # some group had different rewards: the adapters moved
    model, tok = load_policy(root / "out")
    assert not hasattr(tok, "image_processor") and model.config.model_type == "qwen2"
    before, after = (load_file(str(root / "init" / "model.safetensors")),
                     load_file(str(root / "out" / "model.safetensors")))
    assert set(before) == set(after) and not any("lora" in k for k in after)  # merged, plain names
    # only the top layer (1 of 2) had adapters: layer 0 is bit-identical, layer 1's adapted projections moved
    for k in before:
        if ".layers.0." in k or "embed" in k:
            assert torch.equal(before[k], after[k]), k
    assert not torch.equal(before["model.layers.1.self_attn.q_proj.weight"],
                           after["model.layers.1.self_attn.q_proj.weight"])


def test_lora_rank_zero_is_full_fine_tuning_and_a_missing_peft_is_named(monkeypatch):
    import sys

    from models.errors import BackendUnavailable
    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.grpo.lora import apply_lora, merge_lora
    from rubricflow.methods.rucl.config import LoRAConfig

    model, _ = build_tiny_text(["a = 1"] * 5, TinyDims(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                                        vocab_size=320))
    assert apply_lora(model, LoRAConfig()) is model and merge_lora(model) is model
    wrapped = apply_lora(model, LoRAConfig(rank=2, top_layers=1))
    trainable = [n for n, p in wrapped.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and ".layers.1." in n for n in trainable)
    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(BackendUnavailable, match="needs the `peft` package"):
        apply_lora(model, LoRAConfig(rank=2))
