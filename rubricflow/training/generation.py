"""The ``generation`` section bound to the generation factory (``models.generation.make_generator``).

``generator_for(generation, model, processor, model_path)`` hands the section's fields to the factory (the models
layer does not know the config sections): the transformers or cached backend on ``model``, or vLLM colocated (an
engine loaded from ``model_path``, the policy's starting checkpoint) or through the rollout server. Stages call
``sync_weights`` at the start of every step, so an engine always samples from the weights being trained, also after
a resume.
"""

from __future__ import annotations

from rubricflow.sections import GenerationConfig

# Backends that generate with the model object they are given (a vLLM engine holds its own copy of the weights).
IN_MEMORY = ("transformers", "cached")


def generator_for(generation: GenerationConfig, model, processor, model_path: str | None = None,
                  batch_size: int | None = None, *, in_memory: bool = False):
    """The backend ``generation.backend`` names, with the section's settings; ``batch_size`` defaults to
    ``generation.eval_batch_size``. ``in_memory``: generate with ``model`` itself (evaluation of the model being
    trained or just loaded): a ``vllm`` section then uses the transformers backend."""
    from models.generation import make_generator  # torch: keep importing this module light

    g = generation
    backend = "transformers" if in_memory and g.backend not in IN_MEMORY else g.backend
    return make_generator(
        backend, model, processor, model_path=model_path, mode=g.vllm_mode,
        batch_size=batch_size or g.eval_batch_size, server_url=g.vllm_server_url, sync_dir=g.vllm_sync_dir,
        dtype=g.vllm_dtype, max_model_len=g.vllm_max_model_len, enforce_eager=g.vllm_enforce_eager,
        sleep_mode=g.vllm_sleep_mode, sleep_level=g.vllm_sleep_level,
        gpu_memory_utilization=g.vllm_gpu_memory_utilization, tensor_parallel_size=g.vllm_tensor_parallel_size,
    )
