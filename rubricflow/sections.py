"""Config sections shared by every pipeline: data, models, SFT, generation, tracking.

Method sections live next to their owners (``rubricflow/<method>/config.py``); ``rubricflow.config`` composes all
of them into ``Config`` and is imported only by the entry points (``tasks/``, ``flows/``) and tests. Core modules
take the section they need from here (or from their method's config module), never the composed ``Config``.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import Field

from rubricflow.section import ConfigError, Section

__all__ = [
    "ConfigError", "DataConfig", "GenerationConfig", "LoRAConfig", "ModelSpec", "ModelsConfig", "Profile", "SFTConfig",
    "SplitSizes", "TrackingConfig",
]


class Profile(str, Enum):
    tiny = "tiny"
    gpu = "gpu"
    smol = "smol"


# ----------------------------------------------------------------------------------------------------------------
# Data


class SplitSizes(Section):
    train: int = Field(2000, ge=0, description="Training samples per task (SFT examples and RL prompts).")
    val: int = Field(
        64, ge=0, description="Validation samples per task: every choice (SFT budget, GRPO lr, phases) is made here."
    )
    test: int = Field(128, ge=0, description="Held-out samples per task, read only by the final evaluations.")
    calib: int = Field(48, ge=0, description="Calibration samples per task (rubric coverage / pass rates).")


class DataConfig(Section):
    out_dir: str = Field("data/synthetic", description="Where the synthetic dataset (parquet + images) is written.")
    tasks: list[Literal["counting", "barchart", "geometry", "arith"]] = Field(
        default_factory=lambda: ["counting", "barchart"],
        description="Synthetic tasks to generate. geometry is available but the tiny 56 px policy cannot "
        "read it (its perception stayed at 0-6% after SFT; rubricflow/data/synthetic.py), so RL on it would measure "
        "noise: it is left out by default. arith is text only (multi-step word problems, rubricflow/data/arith.py; "
        "the smol profile's task).",
    )
    splits: SplitSizes = Field(default_factory=SplitSizes, description="Samples per split and task.")
    image_size: int = Field(
        56, ge=28, le=1024, description="Square image side in pixels (56 px = 4 visual tokens for Qwen2.5-VL)."
    )
    seed: int = Field(1234, description="Generator seed; the dataset is a pure function of seed and sizes.")
    min_split_size: int = Field(8, ge=1, description="Validation gate: smallest allowed non-empty split.")


# ----------------------------------------------------------------------------------------------------------------
# Models


class ModelSpec(Section):
    source: Literal["tiny", "pretrained"] = Field(
        "tiny", description="'tiny': built offline from a production architecture config; 'pretrained': a real id/path."
    )
    arch: Literal["qwen2_5_vl", "qwen2", "llama"] = Field(
        "qwen2_5_vl", description="Architecture family (llama: SmolLM2, the smol profile's real text model)."
    )
    path: str = Field(
        "artifacts/models/base-vl",
        description="Tiny: directory the built model is saved to. Pretrained: HF model id or local directory.",
    )
    hidden_size: int = Field(128, ge=16, description="Tiny only: text hidden size.")
    num_layers: int = Field(2, ge=1, description="Tiny only: text decoder layers.")
    num_heads: int = Field(4, ge=1, description="Tiny only: attention heads.")
    vision_hidden_size: int = Field(64, ge=16, description="Tiny only: vision tower width.")
    vision_depth: int = Field(2, ge=1, description="Tiny only: vision tower blocks.")
    vocab_size: int = Field(640, ge=300, description="Tiny only: BPE vocabulary size of the offline tokenizer.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype at load time.")


class ModelsConfig(Section):
    policy: ModelSpec = Field(default_factory=ModelSpec, description="The (vision-)language policy trained by RL.")


# ----------------------------------------------------------------------------------------------------------------
# SFT warm start


class LoRAConfig(Section):
    rank: int = Field(
        0, ge=0, le=512,
        description="LoRA rank of the policy's adapters (peft); 0 = no LoRA, full fine-tuning (the tiny profile).",
    )
    alpha: float = Field(32.0, gt=0, description="LoRA scaling numerator (the update is scaled by alpha / rank).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapters' input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        description="Linear layers that get adapters (Llama/Qwen2 names).",
    )
    top_layers: int | None = Field(
        None, ge=1,
        description="Adapt only the top this-many decoder layers (the backward pass then stops there: cheaper on "
        "CPU); None = every layer.",
    )


class SFTConfig(Section):
    out_dir: str = Field("artifacts/models/sft", description="Where the SFT checkpoint is saved.")
    steps: int = Field(300, ge=0, description="Optimizer steps.")
    batch_size: int = Field(32, ge=1, description="Sequences per step.")
    lr: float = Field(3e-3, gt=0, description="AdamW peak learning rate (after warmup; see `schedule`).")
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps.")
    schedule: Literal["constant", "cosine"] = Field(
        "cosine",
        description="Learning rate after warmup: 'cosine' decays to 0 at the last step, so the saved checkpoint is "
        "the end of a cooled-down run rather than a point on a noisy constant-lr trajectory; 'constant' keeps it.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    eval_samples: int = Field(
        96, ge=1, description="Val samples per task for the before/after accuracy (SFT trains: it never reads test)."
    )
    lora: LoRAConfig = Field(
        default_factory=LoRAConfig,
        description="LoRA adapters for the warm start of a real policy (merged into the weights before saving); "
        "rank 0 (the default) = full fine-tuning, as for the tiny model.",
    )


# ----------------------------------------------------------------------------------------------------------------
# Generation


class GenerationConfig(Section):
    backend: Literal["transformers", "vllm"] = Field(
        "transformers", description="Rollout engine: transformers generate, or vLLM (mode: vllm_mode)."
    )
    max_new_tokens: int = Field(48, ge=1, description="Completion length cap.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature for rollouts (0 = greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling for rollouts.")
    eval_batch_size: int = Field(64, ge=1, description="Prompts per generate() call in evaluation.")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="vLLM: 'colocate' runs vllm.LLM in each trainer process (vLLM installed there; weights streamed "
        "in process); 'server' talks to a rollout server (models.rollout_server) in its own environment over HTTP, "
        "weights synced through a safetensors file in vllm_sync_dir.",
    )
    vllm_server_url: str = Field(
        "http://127.0.0.1:8001", description="vLLM server mode: base URL of the rollout server."
    )
    vllm_sync_dir: str = Field(
        ".rubricflow/vllm-sync",
        description="vLLM server mode: folder for the weight files, seen by trainer and server at the same path "
        "(a shared volume; /dev/shm on one host).",
    )
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="vLLM colocate: engine dtype ('auto' = the checkpoint's; float32 on CPU)."
    )
    vllm_max_model_len: int | None = Field(
        None, ge=1, description="vLLM colocate: context length the engine reserves for (None = the model's)."
    )
    vllm_enforce_eager: bool = Field(False, description="vLLM colocate: no CUDA graphs / compilation.")
    vllm_sleep_mode: bool = Field(
        False,
        description="vLLM colocate: the engine sleeps after each rollout (frees its GPU memory for the update) and "
        "wakes to receive the new weights. GPU only: refused by name where vLLM has no sleep mode (CPU).",
    )
    vllm_sleep_level: Literal[1, 2] = Field(
        1, description="vLLM sleep level: 1 offloads weights to host memory, 2 discards them (all are re-sent)."
    )
    vllm_gpu_memory_utilization: float = Field(0.45, gt=0, le=1, description="vLLM colocate: GPU memory fraction.")
    vllm_tensor_parallel_size: int = Field(
        1, ge=1,
        description="vLLM colocate: must be 1 (one engine per trainer rank); a tensor-parallel engine runs as the "
        "rollout server (its --tensor-parallel-size).",
    )


# ----------------------------------------------------------------------------------------------------------------
# Tracking


class TrackingConfig(Section):
    experiment: str = Field("rubricflow", description="MLflow experiment name.")
    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI; default is the SQLite store under .rubricflow/mlflow."
    )
