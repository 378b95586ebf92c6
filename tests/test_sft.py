"""The SFT learning-rate schedule (rubricflow.training.sft.lr_factor), by hand; the SFT stage on a text policy with
LoRA."""

import math
import re

import pytest

from rubricflow.training.sft import lr_factor, optimizer_step


def test_warmup_then_constant():
    assert [lr_factor(s, 10, 4) for s in range(6)] == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    assert lr_factor(9, 10, 0) == 1.0  # no warmup: 1 throughout


def test_warmup_then_cosine_to_zero_at_the_last_step():
    steps, warm = 10, 2
    f = [lr_factor(s, steps, warm, "cosine") for s in range(steps)]
    assert f[:2] == pytest.approx([0.5, 1.0])  # warmup (step 1 is the last warmup step)
    # after warmup: 0.5 * (1 + cos(pi * (s - 2) / 8)) for s = 2..9
    assert f[2] == pytest.approx(1.0)  # the first step after warmup runs at the peak
    assert f[6] == pytest.approx(0.5)  # halfway through the decay
    assert f[9] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))  # 0.03806: the last step, just above 0
    assert lr_factor(10, steps, warm, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(f[1:], f[2:]))  # monotone after warmup
    with pytest.raises(ValueError, match="'linear'"):
        lr_factor(0, 10, 2, "linear")


def test_an_update_clips_the_gradient_and_stops_on_a_non_finite_loss():
    import torch

    w = torch.nn.Parameter(torch.zeros(3))
    model = torch.nn.Module()
    model.w = w
    opt = torch.optim.SGD([w], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    assert optimizer_step(model, opt, sched, (w * torch.tensor([30.0, 40.0, 0.0])).sum(), "SFT", 0) == 0.0
    assert torch.allclose(w.detach(), torch.tensor([-0.6, -0.8, 0.0]))  # the gradient (30, 40, 0) clipped to norm 1
    optimizer_step(model, opt, sched, (w * torch.tensor([30.0, 40.0, 0.0])).sum(), "SFT", 1, clip=None)
    assert torch.allclose(w.detach(), torch.tensor([-30.6, -40.8, 0.0]))  # sft.grad_clip null: the whole gradient
    optimizer_step(model, opt, sched, (w * torch.tensor([3.0, 4.0, 0.0])).sum(), "SFT", 2, clip=10.0)
    assert torch.allclose(w.detach(), torch.tensor([-33.6, -44.8, 0.0]))  # under the clip: untouched
    with pytest.raises(FloatingPointError, match=r"induction pretraining: loss became nan at step 7"):
        optimizer_step(model, opt, sched, w.sum() * float("nan"), "induction pretraining:", 7)


def test_the_sft_stage_warm_starts_a_text_policy_with_lora_and_saves_a_plain_checkpoint(tmp_path):
    """The smol profile's warm start, on a tiny Qwen2 text model: the task's demonstration is in every prompt (as at
    rollout time), only the adapted top layer moves, and the saved checkpoint has merged weights under plain names."""
    import torch
    from safetensors.torch import load_file

    from models.tiny import TinyDims, build_tiny_text, save
    from rubricflow.methods.foundation import stages as foundation
    from rubricflow.training.policy_start import sft_examples
    from rubricflow.data.arith import DEMO
    from rubricflow.data.schema import read_dataset
    from rubricflow.data.traces import render_trace
    from rubricflow.sections import DataConfig, GenerationConfig, ModelsConfig, SFTConfig
    from rubricflow.pipeline.stage import StageContext

    ctx = StageContext(reports_dir=tmp_path / "reports", artifacts_dir=tmp_path / "artifacts")
    data = DataConfig.model_validate({"out_dir": str(tmp_path / "data"), "tasks": ["arith"], "min_split_size": 4,
                                      "splits": {"train": 16, "val": 4, "test": 4, "calib": 4}})
    foundation.data_stage.fn(data, ctx)
    foundation.validate_stage.fn(data, ctx)
    samples = read_dataset(data.out_dir, split="train")
    corpus = [s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples] + list(DEMO)
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                                  vocab_size=400))
    save(model, tok, tmp_path / "init")
    ex = sft_examples(tok, data.out_dir, samples[:2])
    assert all(e.prompt.index(DEMO[1]) < e.prompt.index(s.question) for e, s in zip(ex, samples))
    assert ex[0].target == render_trace(samples[0].facts, samples[0].answer)
    assert re.search(r"s = \d+ [-+*] \d+ = \d+, t = \d+ [-+*] \d+ = \d+\.", ex[0].target)  # the working shown

    models = ModelsConfig.model_validate({"policy": {"source": "pretrained", "arch": "qwen2",
                                                     "path": str(tmp_path / "init")}})
    sft = SFTConfig(out_dir=str(tmp_path / "sft"), steps=3, batch_size=4, lr=5e-2, warmup_steps=0, eval_samples=4,
                    lora={"rank": 2, "alpha": 4, "top_layers": 1})
    rep = foundation.sft_stage.fn(sft, models, data, GenerationConfig(max_new_tokens=8), ctx)
    assert rep["eval_split"] == "val" and set(rep["accuracy_after"]) == {"arith", "overall"}
    before = load_file(str(tmp_path / "init" / "model.safetensors"))
    after = load_file(str(tmp_path / "sft" / "model.safetensors"))
    assert set(before) == set(after) and not any("lora" in k for k in after)
    for k in before:
        if ".layers.0." in k or "embed" in k:
            assert torch.equal(before[k], after[k]), k
    assert not torch.equal(before["model.layers.1.self_attn.q_proj.weight"],
                           after["model.layers.1.self_attn.q_proj.weight"])


def test_train_sft_tokenises_each_drawn_target_once_and_trains_on_its_own_ids(monkeypatch):
    """A warm start to a bar calls ``train_sft`` once per block on tens of thousands of examples: a target is
    tokenised when first drawn, once however often it is drawn (the loss weights read the same ids), and every
    sequence trains on the ids of its own example's target."""
    import rubricflow.training.sft as sft
    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.sections import SFTSchedule

    texts = [f"a{i} b{i % 7} c{i % 3}" for i in range(200)]
    model, tok = build_tiny_text(texts + [f"q{i} ->" for i in range(200)],
                                 TinyDims(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, vocab_size=300),
                                 seed=0)
    real_ids, real_encode = sft.target_ids, sft.encode_pairs

    def run(n: int, steps: int, batch_size: int):
        examples = [sft.SFTExample(prompt=f"q{i} ->", target=texts[i]) for i in range(n)]
        calls, seen = [], []
        monkeypatch.setattr(sft, "target_ids", lambda proc, text: calls.append(text) or real_ids(proc, text))
        monkeypatch.setattr(sft, "encode_pairs", lambda proc, prompts, images, targets: seen.extend(
            zip(prompts, targets)) or real_encode(proc, prompts, images, targets))
        weighed = []
        sft.train_sft(model, tok, examples, SFTSchedule(steps=steps, batch_size=batch_size, lr=1e-2, warmup_steps=0),
                      seed=3, weight_fn=lambda text, ids: weighed.append((text, ids)))
        target_of = {e.prompt: e.target for e in examples}
        assert len(seen) == steps * batch_size
        assert all(ids == real_ids(tok, target_of[p]) for p, ids in seen)  # its own example's ids
        assert all(ids == real_ids(tok, text) for text, ids in weighed) and len(weighed) == steps * batch_size
        return calls, {p for p, _ in seen}

    calls, drawn = run(200, 6, 4)
    assert len(calls) == len(drawn) <= 24  # the drawn targets only, not the 200
    calls, drawn = run(10, 6, 4)  # 24 draws of 10 examples: each drawn more than once, tokenised once
    assert sorted(calls) == sorted(texts[int(p[1:].split()[0])] for p in drawn) and len(drawn) == 10
