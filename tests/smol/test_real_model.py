"""Opt-in check of the real model (skipped, naming why, until `rubricflow fetch-model` has written it): the float32
conversion loads as a Llama checkpoint with the GGUF's 134.5 M parameters and stops generating at <|im_end|>."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricflow.util.env import PROJECT_ROOT

MODEL = Path(PROJECT_ROOT) / "artifacts" / "models" / "smollm2-135m-instruct"


@pytest.mark.slow
def test_fetched_smollm2_loads_and_follows_the_stop_token_contract():
    if not (MODEL / "model.safetensors").exists():
        pytest.skip(f"{MODEL} is not there: the real model is opt-in (`rubricflow --profile smol fetch-model`)")
    from models.generation import GenRequest, TransformersGenerator, stop_ids
    from models.loader import load_policy
    from models.processor import chat_prompt

    model, tok = load_policy(MODEL)
    assert model.config.model_type == "llama" and sum(p.numel() for p in model.parameters()) == 134_515_008
    assert not getattr(model.config, "quantization_config", None)  # the GGUF quantizer was detached
    eos, _ = stop_ids(tok)
    assert eos == tok.convert_tokens_to_ids("<|im_end|>") == model.generation_config.eos_token_id
    (out,), = TransformersGenerator(model, tok).generate([GenRequest(chat_prompt(tok, "Say hi."))], max_new_tokens=24,
                                                         temperature=0)
    assert out.finished and eos not in out.token_ids and out.text.strip()
