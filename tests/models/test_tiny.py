"""Tiny production-architecture models: offline build, save/load round-trip, generation hygiene."""

import pytest
import torch

from models.generation import GenRequest, TransformersGenerator, suppressed_token_ids
from models.loader import ModelNotFound, load_policy
from models.tiny import TinyDims, build_tiny_text, build_tiny_vl, save

CORPUS = ["How many red shapes are there? red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}"] * 20
DIMS = TinyDims(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, vision_hidden_size=32, vocab_size=320)


@pytest.fixture(scope="module")
def vl(tmp_path_factory):
    from PIL import Image

    model, proc = build_tiny_vl(CORPUS, DIMS, seed=0)
    out = save(model, proc, tmp_path_factory.mktemp("tinyvl"))
    imgs = [Image.new("RGB", (56, 56), c) for c in ((255, 0, 0), (0, 0, 255))]
    return model, proc, out, imgs


def test_tiny_vl_is_the_production_architecture(vl):
    model, proc, out, _ = vl
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert model.config.model_type == "qwen2_5_vl"
    assert (out / "config.json").exists() and (out / "preprocessor_config.json").exists()
    assert (out / "tokenizer.json").exists()


def test_save_load_roundtrip_gives_identical_logits(vl):
    model, proc, out, imgs = vl
    model2, proc2 = load_policy(out)
    prompts = [proc.chat_prompt("How many red shapes?"), proc.chat_prompt("How many blue shapes are there?")]
    enc = proc(prompts, [[imgs[0]], [imgs[1]]])
    enc2 = proc2(prompts, [[imgs[0]], [imgs[1]]])
    for k in enc:
        assert torch.equal(enc[k], enc2[k]), k
    with torch.no_grad():
        a = model.eval()(**enc).logits
        b = model2(**enc2).logits
    assert a.shape[-1] == len(proc.tokenizer)
    assert torch.equal(a, b)


def test_image_placeholders_expand_to_visual_tokens(vl):
    _, proc, _, imgs = vl
    enc = proc([proc.chat_prompt("q")], [[imgs[0]]])
    # 56 px, 14 px patches merged 2x2 -> 4 visual tokens
    assert int((enc["input_ids"] == proc.image_token_id).sum()) == 4
    assert int(enc["mm_token_type_ids"].sum()) == 4
    with pytest.raises(ValueError, match="image placeholders"):
        proc([proc.chat_prompt("q", n_images=2)], [[imgs[0]]])


def test_generation_never_emits_vision_tokens(vl):
    model, proc, _, imgs = vl
    banned = suppressed_token_ids(proc.tokenizer)
    assert proc.image_token_id in banned and len(banned) >= 5
    # Make the vision tokens the most likely next tokens by far; suppression must still keep them out.
    with torch.no_grad():
        bias = torch.zeros(model.lm_head.out_features)
        bias[banned] = 50.0
        model.lm_head.bias = torch.nn.Parameter(bias)
    try:
        gen = TransformersGenerator(model, proc, batch_size=8)
        outs = gen.generate([GenRequest(proc.chat_prompt("q"), [imgs[0]])] * 4, n=4, max_new_tokens=12, seed=0)
        toks = [t for o in outs for c in o for t in c.token_ids]
        assert len(toks) > 0
        assert not set(toks) & set(banned)
    finally:
        model.lm_head.bias = None


def test_tiny_text_model_roundtrip(tmp_path):
    model, tok = build_tiny_text(CORPUS, DIMS, seed=0)
    out = save(model, tok, tmp_path / "txt")
    m2, t2 = load_policy(out)
    ids = tok(["red = 2, green = 1"], return_tensors="pt")
    assert t2("red = 2, green = 1")["input_ids"] == ids["input_ids"][0].tolist()
    with torch.no_grad():
        assert torch.equal(model(**ids).logits, m2(**ids).logits)
    assert type(m2).__name__ == "Qwen2ForCausalLM"


def test_missing_model_is_reported_by_name(tmp_path):
    with pytest.raises(ModelNotFound, match="no config.json"):
        load_policy(tmp_path)
    with pytest.raises(ModelNotFound, match="Qwen/Qwen2.5-VL-7B-Instruct"):
        load_policy("Qwen/Qwen2.5-VL-7B-Instruct")
