"""Config sections: the ``Section`` base every section derives from, ``ConfigError``, and the sections shared by
every pipeline (data, models, SFT, generation, tracking).

Method sections live next to their owners (``rubricflow/<method>/config.py``); ``rubricflow.config`` composes all
of them into ``Config`` and is imported only by the entry points (``tasks/``, ``flows/``) and tests. Core modules
take the section they need from here (or from their method's config module), never the composed ``Config``.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "MAX_BATCH", "MAX_COUNT", "MAX_GROUP", "MAX_TOKENS",
    "ConfigError", "Section", "DataConfig", "GenerationConfig", "LoRAConfig", "ModelSpec", "ModelsConfig",
    "DEFAULT_PROFILE", "SFTConfig", "SFTSchedule", "SplitSizes", "TrackingConfig",
]


# ----------------------------------------------------------------------------------------------------------------
# The base section

class ConfigError(ValueError):
    """Invalid parameters; the message names the file and the dotted key."""


_UNIONS = (Union, types.UnionType)


def _strip(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _takes_bool(tp: Any) -> bool:
    tp = _strip(tp)
    if tp is bool or tp is Any or tp is object:
        return True
    if get_origin(tp) is Literal:
        return any(isinstance(a, bool) for a in get_args(tp))
    if get_origin(tp) in _UNIONS:
        return any(_takes_bool(a) for a in get_args(tp))
    return False


def _numeric(tp: Any) -> bool:
    tp = _strip(tp)
    if get_origin(tp) in _UNIONS:
        return any(_numeric(a) for a in get_args(tp))
    return tp is int or tp is float


def _bool_in(tp: Any, value: Any) -> str | None:
    """Where ``value`` puts a boolean into a number slot of type ``tp`` ("" for the value itself, "[i]" for an
    item), or None. Pydantic's lax mode would take ``true`` for 1 there."""
    if isinstance(value, bool):
        return "" if _numeric(tp) and not _takes_bool(tp) else None
    tp = _strip(tp)
    if get_origin(tp) in _UNIONS:
        options = [a for a in get_args(tp) if a is not type(None)]
        if len(options) != 1:
            return None
        tp = _strip(options[0])
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(value, Mapping) and origin in (dict, Mapping) and len(args) == 2:
        items = [(f"[{k!r}]", args[1], v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)) and origin is tuple and args and args[-1] is not Ellipsis:
        items = [(f"[{i}]", t, v) for i, (t, v) in enumerate(zip(args, value))]
    elif isinstance(value, (list, tuple)) and origin in (list, tuple, set, frozenset, Sequence) and args:
        items = [(f"[{i}]", args[0], v) for i, v in enumerate(value)]
    else:
        return None
    for where, item_tp, item in items:
        inner = _bool_in(item_tp, item)
        if inner is not None:
            return where + inner
    return None


# Upper bounds of sizes and counts, checked at validation so that an absurd value fails naming its key before any
# model is loaded. MAX_COUNT applies to every integer field that declares no upper bound of its own (seeds and byte
# sizes aside);
# the per-step sizes (sequences, prompts, completions per prompt, tokens per completion) declare tighter ones.
MAX_COUNT = 1_000_000
MAX_BATCH = 4096  # sequences / prompts / pairs handled in one step or one generate() call
MAX_GROUP = 256  # completions sampled per prompt
MAX_TOKENS = 131_072  # tokens of one completion or context


def _has_upper_bound(info: Any) -> bool:
    return any(hasattr(m, "le") or hasattr(m, "lt") for m in getattr(info, "metadata", ()))


def _not_a_count(name: str) -> bool:
    """Seeds and byte sizes: integers that are not counts of work."""
    return name == "seed" or name.endswith(("_seed", "_bytes"))


class Section(BaseModel):
    """A params.yaml section: unknown keys are errors, assignments are validated, enums dump as values.

    Numbers are read strictly where YAML is loose: a boolean is not a number (``steps: true`` would otherwise be
    1) and a float must be finite (``.inf``, ``nan``, ``"inf"`` are refused). A field that means "no limit" with
    infinity opts in with ``Field(..., allow_inf_nan=True)``. Strings still convert (``lr: "1e-4"``). An integer
    field without an upper bound of its own takes at most ``MAX_COUNT`` (seeds and ``*_bytes`` sizes aside).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=True, allow_inf_nan=False)

    # What a key (a resume key, a study unit's or start's hash) leaves out, declared once per section; tests check
    # every name is a field.
    # - operational: how a result is fetched or served (concurrency, timeouts, caches, server addresses), not what
    #   is computed; no key includes them (:meth:`essential_dump`).
    # - outputs: where results go or what is read out afterwards (paths, run names, evaluation sizes); inputs of
    #   nothing the key covers (:meth:`input_dump`).
    # - resumable: what may change between an interrupted run and its resumption without changing what is trained
    #   (the step budget, the checkpoint cadence) (:meth:`resume_dump`).
    operational: ClassVar[frozenset[str]] = frozenset()
    outputs: ClassVar[frozenset[str]] = frozenset()
    resumable: ClassVar[frozenset[str]] = frozenset()

    def essential_dump(self, leave_out: tuple[str, ...] = ("operational",)) -> dict[str, Any]:
        """``model_dump(mode="json")`` without the fields the declarations named in ``leave_out`` list, at every
        level of nested sections."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            if any(name in getattr(self, decl) for decl in leave_out):
                continue
            value = getattr(self, name)
            if isinstance(value, Section):
                out[name] = value.essential_dump(leave_out)
            else:
                out[name] = self.model_dump(mode="json", include={name})[name]
        return out

    def input_dump(self) -> dict[str, Any]:
        """What a result computed from this section depends on: no operational and no output fields."""
        return self.essential_dump(("operational", "outputs"))

    def resume_dump(self) -> dict[str, Any]:
        """What a resumed run must share with the interrupted one: :meth:`input_dump` without the resumable
        fields."""
        return self.essential_dump(("operational", "outputs", "resumable"))

    # Partial nested sections keep the defaults their owner gave them (below); a section whose keys replace the
    # default's whole (the composed `study` section) opts out.
    merge_partial_defaults: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _partial_keeps_owner_defaults(cls, data: Any) -> Any:
        """A partial nested section (``rucl: {grpo: {steps: 5}}``, ``--set rucl.grpo.steps=5``, a profile listing a
        few keys) is merged onto the defaults its owner's ``default_factory`` sets (RuCL's ``GRPOConfig(lr=2e-4,
        ...)``), not onto the nested class's own defaults: one mechanism for every method's defaults. Only the
        values the factory set explicitly are merged, recursively into nested sections; a key given replaces the
        default's value whole otherwise (a dict- or list-valued setting is not merged)."""
        if not cls.merge_partial_defaults or not isinstance(data, Mapping):
            return data
        out = dict(data)
        for name, field in cls.model_fields.items():
            given = out.get(name)
            sub = _section_type(field.annotation)
            if not isinstance(given, Mapping) or sub is None or field.default_factory is None:
                continue
            default = field.default_factory()
            if isinstance(default, Section):
                out[name] = _merge_explicit(default, given)
        return out

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, (bool, list, tuple, Mapping)) and info.field_name in cls.model_fields:
            where = _bool_in(cls.model_fields[info.field_name].annotation, value)
            if where is not None:
                at = f" (item {where})" if where else ""
                raise PydanticCustomError("bool_not_number", "Input should be a number, not a boolean" + at)
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _bounded_counts(cls, value: Any, info: ValidationInfo) -> Any:
        if type(value) is int and value > MAX_COUNT and info.field_name in cls.model_fields \
                and not _not_a_count(info.field_name) and not _has_upper_bound(cls.model_fields[info.field_name]):
            raise PydanticCustomError(
                "count_too_large", "Input should be less than or equal to {limit} (the largest count a setting "
                "takes without a bound of its own)", {"limit": MAX_COUNT})
        return value


def _section_type(annotation: Any) -> type[Section] | None:
    """The Section class a field holds (``X`` or ``X | None``), else None."""
    for t in (annotation, *get_args(annotation)):
        if isinstance(t, type) and issubclass(t, Section):
            return t
    return None


def _merge_explicit(default: Section, given: Mapping) -> dict:
    """``given`` over the values ``default`` was built with explicitly, recursing into nested sections."""
    out = dict(given)
    for key in default.model_fields_set:
        value = getattr(default, key)
        if key not in out:
            out[key] = value.model_dump() if isinstance(value, Section) else value
        elif isinstance(value, Section) and isinstance(out[key], Mapping):
            out[key] = _merge_explicit(value, out[key])
    return out


# ----------------------------------------------------------------------------------------------------------------
# Profiles


# A profile is a name: one of the ``profiles`` keys of params.yaml (rubricflow.config.resolve_raw checks it,
# rubricflow.config.profile_names lists them). This one is used where params.yaml names none.
DEFAULT_PROFILE = "tiny"


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


class SFTSchedule(Section):
    """The one shape of SFT settings (``rubricflow.training.sft.train_sft`` takes it): every method's SFT section is
    one (a subclass, with its own defaults where they differ), and a multi-phase recipe builds one per phase."""

    steps: int = Field(300, ge=0, description="Optimizer steps.")
    batch_size: int = Field(32, ge=1, le=MAX_BATCH, description="Sequences per step.")
    lr: float = Field(3e-3, gt=0, description="AdamW peak learning rate (after warmup; see `schedule`).")
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps.")
    schedule: Literal["constant", "cosine"] = Field(
        "cosine",
        description="Learning rate after warmup: 'cosine' decays to 0 at the last step, so the saved checkpoint is "
        "the end of a cooled-down run rather than a point on a noisy constant-lr trajectory; 'constant' keeps it.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float | None = Field(
        1.0, gt=0,
        description="Clip the gradient's global norm to this before each AdamW step; null = no clipping (a tiny "
        "model forming an attention circuit from scratch may need the unclipped spikes: docs/deltarubric_planning.md).",
    )


class SFTConfig(SFTSchedule):
    out_dir: str = Field("artifacts/models/sft", description="Where the SFT checkpoint is saved.")
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
    operational = frozenset({"vllm_gpu_memory_utilization", "vllm_server_url", "vllm_sync_dir", "vllm_sleep_mode",
                             "vllm_sleep_level", "vllm_enforce_eager", "vllm_max_model_len"})

    backend: Literal["transformers", "cached", "vllm"] = Field(
        "transformers",
        description="Rollout engine (models.generation): 'transformers' (model.generate; text and vision-language "
        "policies); 'cached' (a lean KV-cache sampling loop, text-only: refused for a vision-language policy and "
        "under ZeRO-3 with several ranks; greedy decoding gives transformers' tokens, sampling draws other samples "
        "from the same distribution); 'vllm' (mode: vllm_mode). The greedy accuracy evaluations (sft, rucl) generate "
        "with the model in memory: with 'cached' when set here, else with transformers.",
    )
    max_new_tokens: int = Field(48, ge=1, le=MAX_TOKENS, description="Completion length cap.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature for rollouts (0 = greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling for rollouts.")
    eval_batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="Prompts per generate() call in evaluation.")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate",
        description="vLLM: 'colocate' runs vllm.LLM in each trainer process (vLLM installed there; weights streamed "
        "in process); 'server' talks to a rollout server (models.generation.vllm_server) in its own environment "
        "over HTTP, weights synced through a safetensors file in vllm_sync_dir.",
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
        None, ge=1, le=MAX_TOKENS,
        description="vLLM colocate: context length the engine reserves for (None = the model's).",
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
# Cluster


class ClusterConfig(Section):
    """What one study unit asks of a Ray cluster (``rubricflow study NAME --ray ADDRESS``; docs/operations.md,
    "Run a study on a Ray cluster"). None of it changes a unit's result."""

    operational = frozenset({"unit_cpus", "unit_gpus", "unit_retries"})

    unit_cpus: int = Field(
        1, ge=1, description="CPUs Ray reserves for one study unit; the unit's torch threads are set to this count.",
    )
    unit_gpus: float = Field(0, ge=0, description="GPUs Ray reserves for one study unit (the gpu profile: 1).")
    unit_retries: int = Field(
        3, ge=0,
        description="Times Ray reruns a unit whose worker process or node died (on another node; the unit resumes "
        "from its latest checkpoint). A unit that raises is retried by Prefect instead.",
    )


# ----------------------------------------------------------------------------------------------------------------
# Tracking


class TrackingConfig(Section):
    experiment: str = Field("rubricflow", description="MLflow experiment name.")
    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI; default is the SQLite store under .rubricflow/mlflow."
    )
