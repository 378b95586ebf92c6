"""``make_generator``: the one place a generation backend is chosen by name.

``rubricflow.training.generation.generator_for`` hands it the fields of the ``generation`` config section (this layer
does not know the config sections).
"""

from __future__ import annotations

from models.generation.cached import CachedSampler
from models.generation.contract import GenerationBackend
from models.generation.hf import TransformersGenerator
from models.generation.vllm_client import VLLMServerGenerator
from models.generation.vllm_colocated import VLLMGenerator

BACKENDS = ("transformers", "cached", "vllm")


def make_generator(backend: str, model, processor, model_path: str | None = None, *, mode: str = "colocate",
                   batch_size: int = 64, server_url: str | None = None, sync_dir: str | None = None,
                   **vllm_kw) -> GenerationBackend:
    """The backend named by ``backend``: ``transformers`` or ``cached`` (text-only policies) on ``model``, or
    ``vllm`` in ``mode`` ``colocate`` (an engine loaded from ``model_path``) | ``server`` (a rollout server at
    ``server_url``, weights synced through ``sync_dir``).

    ``vllm_kw`` go to ``VLLMGenerator`` (colocate). Unknown names and unsupported combinations raise naming them.
    """
    if backend == "transformers":
        return TransformersGenerator(model, processor, batch_size=batch_size)
    if backend == "cached":
        return CachedSampler(model, processor, batch_size=batch_size)
    if backend == "vllm":
        if mode == "colocate":
            if not model_path:
                raise ValueError("generation.backend=vllm (colocate) needs the policy's model directory (model_path)")
            return VLLMGenerator(model_path, **vllm_kw)
        if mode == "server":
            tp = vllm_kw.get("tensor_parallel_size", 1)
            if tp != 1:
                raise ValueError(
                    f"generation.vllm_tensor_parallel_size={tp} applies to vllm_mode=colocate; in server mode the "
                    "rollout server takes --tensor-parallel-size itself (models.generation.vllm_server)"
                )
            if vllm_kw.get("sleep_mode"):
                raise ValueError("generation.vllm_sleep_mode applies to vllm_mode=colocate (a rollout server keeps "
                                 "its own devices); set it to false in server mode")
            return VLLMServerGenerator(server_url or "", processor, sync_dir or "")
        raise ValueError(f"generation.vllm_mode: unknown mode {mode!r}; expected 'colocate' or 'server'")
    raise ValueError(f"generation.backend: unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
