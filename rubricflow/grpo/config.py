"""GRPO and engine parameters (pydantic sections; every field documented; no heavy imports).

A method's config (e.g. ``rucl.grpo``) holds one ``GRPOConfig``; its ``engine`` field picks DeepSpeed or plain
torch. Defaults follow TRL/verl/DAPO practice and are small enough for the tiny CPU profile.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rubricflow.sections import MAX_BATCH, MAX_GROUP, MAX_TOKENS, Section


class EngineConfig(Section):
    kind: Literal["deepspeed", "torch"] = Field(
        "torch",
        description="Training engine: 'deepspeed' (ZeRO, multi-process, CPU or GPU) or 'torch' (plain AdamW, "
        "one process).",
    )
    zero_stage: int = Field(0, ge=0, le=3, description="DeepSpeed ZeRO stage (0 = plain data parallel).")
    bf16: bool = Field(False, description="DeepSpeed bf16 mixed precision (GPU profiles; fp32 on CPU is the default).")
    offload_optimizer: bool = Field(
        False,
        description="DeepSpeed ZeRO optimizer-state offload to CPU (uses DeepSpeedCPUAdam; needs zero_stage >= 1; "
        "the cpu_adam op is JIT-compiled once into TORCH_EXTENSIONS_DIR).",
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="Micro-batches per optimizer step (the updater splits each minibatch into this many)."
    )
    dist_backend: Literal["gloo", "nccl"] = Field(
        "gloo", description="torch.distributed backend: 'gloo' on CPU, 'nccl' on GPUs."
    )
    cpu_shm_comm: bool = Field(
        False,
        description="CPU only: DeepSpeed's shared-memory all-reduce op for several local processes. It is JIT-compiled "
        "on first use (minutes; cached in TORCH_EXTENSIONS_DIR); off = plain gloo all-reduce.",
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu",
        description="engine.kind=torch only: where the policy trains ('cuda' = the current CUDA device; an error "
        "where torch sees none). DeepSpeed places the module on its own accelerator.",
    )
    adam_betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    adam_eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")

    @model_validator(mode="after")
    def _check(self) -> "EngineConfig":
        if self.offload_optimizer and self.zero_stage == 0:
            raise ValueError("offload_optimizer needs zero_stage >= 1 (DeepSpeed offloads ZeRO optimizer partitions)")
        if self.kind == "deepspeed" and self.device != "cpu":
            raise ValueError(
                "device applies to kind=torch only: DeepSpeed places the module on its own accelerator "
                "(CUDA where there is one); remove engine.device"
            )
        return self


class GRPOConfig(Section):
    group_size: int = Field(
        8, ge=2, le=MAX_GROUP,
        description="Completions sampled per prompt (one advantage group; at least 2: a group of one has no "
        "advantage, so nothing would train).",
    )
    prompts_per_step: int = Field(8, ge=1, le=MAX_BATCH, description="Prompts per training step (per process).")
    steps: int = Field(50, ge=0, description="Training steps (one rollout batch + its GRPO update each).")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate (constant after warmup, as in RuCL's verl runs).")
    warmup_steps: int = Field(0, ge=0, description="Linear LR warmup, in optimizer steps.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    clip_low: float = Field(0.2, ge=0, lt=1, description="Lower clip: ratio >= 1 - clip_low for negative advantages.")
    clip_high: float = Field(
        0.28, ge=0,
        description="Upper clip: ratio <= 1 + clip_high for positive advantages (DAPO clip-higher; 0.2 = PPO).",
    )
    beta: float = Field(
        0.0, ge=0, description="k3 KL coefficient to the frozen reference (0 = no reference model is kept or run)."
    )
    loss_agg: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "dapo",
        description="Token-loss aggregation: 'grpo' sequence mean then batch mean; 'dr_grpo' sum / "
        "(max_new_tokens * n_seqs); 'dapo' token mean over the minibatch.",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="Advantage scaling: divide by the group std, the (per-role) batch std, or not at all (Dr. GRPO).",
    )
    adv_eps: float = Field(1e-4, gt=0, description="Added to the std before dividing the centred rewards.")
    inner_epochs: int = Field(1, ge=1, description="Passes over each rollout batch (PPO epochs, 'mu' in GRPO).")
    minibatch_size: int = Field(
        0, ge=0, le=MAX_BATCH * MAX_GROUP,
        description="Episodes per optimizer step (0 = the whole rollout batch in one step).",
    )
    micro_batch_size: int = Field(
        0, ge=0, le=MAX_BATCH * MAX_GROUP,
        description="Episodes per forward/backward (memory bound; 0 = minibatch / engine grad accumulation).",
    )
    max_grad_norm: float = Field(1.0, ge=0, description="Gradient clipping norm (0 = off).")
    max_new_tokens: int = Field(
        48, ge=1, le=MAX_TOKENS, description="Completion length cap (also the dr_grpo normaliser)."
    )
    temperature: float = Field(1.0, gt=0, description="Rollout sampling temperature (log-probs use the same).")
    top_p: float = Field(1.0, gt=0, le=1, description="Rollout nucleus sampling.")
    checkpoint_every: int = Field(10, ge=0, description="Save a checkpoint every N steps (0 = only at the end).")
    keep_checkpoints: int = Field(2, ge=1, description="How many most recent checkpoints to keep.")
    eval_every: int = Field(0, ge=0, description="Run the method's evaluation every N steps (0 = only at the end).")
    seed: int = Field(1234, description="Seed of the prompt order, rollouts and minibatch shuffles.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Training engine (DeepSpeed or torch).")

    # the judge off the critical path (docs/operations.md, "Judging off the critical path")
    operational = frozenset({"stream_rewards"})  # the same rewards and update either way
    # the lr is constant after warmup, so a longer budget continues the same trajectory
    resumable = frozenset({"steps", "checkpoint_every", "keep_checkpoints", "eval_every"})
    stream_rewards: bool = Field(
        False,
        description="Score each group of completions as soon as it is generated when the method's reward takes "
        "groups incrementally (a server-backed judge): judging overlaps generation, and the rewards, advantages and "
        "update are the same as scoring the whole batch after generation. It has something to overlap when a "
        "step's rollouts span several generation batches (generation.eval_batch_size below prompts_per_step * "
        "group_size completions). Streamed judge calls share judge.openai.concurrency and run on an event loop in "
        "a thread of the trainer, waiting on non-blocking HTTP. Off by default (it changes nothing but the step "
        "time); with a server-backed judge and a step that spans several generation batches streamed steps are "
        "faster (bench/judge_pipeline.py, docs/bench/judge_pipeline-epyc2.txt).",
    )
    one_step_off: bool = Field(
        False,
        description="One-step-off pipelining, an algorithmic change: the rollouts of step t+1 (generation and their "
        "judging) start while step t is judged and updated, so the judge and the update leave the critical path, "
        "at the cost of a policy lag of one step (step t+1 is sampled from the policy before update t; the loss "
        "takes its ratio against the policy being updated, with no correction for the lag). The lag is logged per "
        "step (pipeline/policy_lag). Needs a second copy of the policy for generation; one process only. Off: "
        "every step samples from the current policy.",
    )
