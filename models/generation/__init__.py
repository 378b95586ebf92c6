"""Generation backends behind one contract.

* ``contract``: ``GenRequest``, ``Completion`` (the stop-token contract), the ``GenerationBackend`` protocol
  (``generate``, ``sync_weights``), the stop-token helpers; ``BackendUnavailable`` for a missing backend.
* ``hf``: ``TransformersGenerator`` (``generation.backend: transformers``), batched ``model.generate``; text and
  vision-language policies; synced generation under ZeRO-3.
* ``cached``: ``CachedSampler`` (``generation.backend: cached``), a lean KV-cache sampling loop for text-only
  policies.
* ``vllm_colocated``: ``VLLMGenerator`` (``backend: vllm``, ``vllm_mode: colocate``), ``vllm.LLM`` in the trainer
  process; ``vllm_worker`` is its worker extension (weight sync).
* ``vllm_server``: the same generator behind HTTP, run in vLLM's own environment
  (``python -m models.generation.vllm_server``); ``vllm_client``: ``VLLMServerGenerator`` (``vllm_mode: server``),
  the trainer's side, which imports no vLLM.
* ``zero3``: the ZeRO-3 helpers (``zero3_world``, ``full_parameters``) the backends' weight syncs use.
* ``factory``: ``make_generator``, the backend chosen by name.

Imports go one way: backends import the contract, the factory imports the backends, nothing imports back.
"""

from models.generation.contract import (
    EOS_TOKEN,
    BackendUnavailable,
    Completion,
    GenerationBackend,
    GenRequest,
    stop_ids,
    suppressed_token_ids,
    trim_at_stop,
)
from models.generation.factory import make_generator
from models.generation.hf import TransformersGenerator

__all__ = ["EOS_TOKEN", "BackendUnavailable", "Completion", "GenRequest", "GenerationBackend", "TransformersGenerator",
           "make_generator", "stop_ids", "suppressed_token_ids", "trim_at_stop"]
