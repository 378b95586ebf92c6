"""The factory (models.generation.factory): backends by name, unsupported combinations refused by name."""

import pytest

from models.errors import BackendUnavailable
from models.generation import make_generator
from models.generation.cached import CachedSampler
from models.generation.hf import TransformersGenerator
from rubricflow.testing.toy_task import build_toy_policy
from tests.ops_helpers import free_port


def test_in_process_backends_by_name_on_the_model_given():
    model, tok = build_toy_policy("text")
    for name, cls in (("transformers", TransformersGenerator), ("cached", CachedSampler)):
        g = make_generator(name, model, tok, batch_size=5)
        assert type(g) is cls and g.name == name and g.model is model and g.batch_size == 5
    vl, proc = build_toy_policy("vl")
    with pytest.raises(ValueError, match=r"generation.backend=cached serves text-only causal LMs"):
        make_generator("cached", vl, proc)
    with pytest.raises(ValueError, match=r"generation.backend: unknown backend 'tgi'; expected one of transformers, "
                                         r"cached, vllm"):
        make_generator("tgi", model, tok)


def test_unsupported_vllm_combinations_refuse_by_name(tmp_path):
    with pytest.raises(ValueError, match=r"vllm_tensor_parallel_size=2 applies to vllm_mode=colocate"):
        make_generator("vllm", None, None, mode="server", tensor_parallel_size=2)
    with pytest.raises(ValueError, match=r"vllm_sleep_mode applies to vllm_mode=colocate"):
        make_generator("vllm", None, None, mode="server", sleep_mode=True)
    with pytest.raises(ValueError, match=r"generation.vllm_mode: unknown mode 'remote'"):
        make_generator("vllm", None, None, mode="remote")
    with pytest.raises(ValueError, match=r"needs the policy's model directory"):
        make_generator("vllm", None, None, mode="colocate")
    port = free_port()  # nothing listens here once the socket closes
    with pytest.raises(BackendUnavailable, match=rf"no rollout server answers at http://127.0.0.1:{port}"):
        make_generator("vllm", None, None, mode="server", server_url=f"http://127.0.0.1:{port}",
                       sync_dir=str(tmp_path))

