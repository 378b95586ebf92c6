import pytest


@pytest.fixture(scope="session")
def rollout_models(tmp_path_factory):
    """The tiny text model vLLM's CPU kernels accept (``text``) and a tiny Qwen2.5-VL (``vl``), saved once."""
    from models.tiny import build_tiny_vl, save
    from rubricflow.testing.toy_task import toy_corpus
    from rubricflow.testing.vllm_rollouts import build_rollout_model, rollout_dims

    root = tmp_path_factory.mktemp("vllm-rollouts")
    build_rollout_model(root / "text")
    model, proc = build_tiny_vl(toy_corpus(), rollout_dims())
    save(model, proc, root / "vl")
    return root
