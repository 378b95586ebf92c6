"""RuCL parameters (the ``rucl`` section of params.yaml): reward mode and weights, curriculum, GRPO, paths.

Ablations are single keys: ``dvc exp run -S rucl.reward.mode=outcome`` (outcome-only GRPO),
``-S rucl.reward.mode=uniform`` (all rubrics equally weighted), ``-S rucl.curriculum.shape=linear``,
``-S rucl.reward.alpha=0.5``, ``-S rucl.curriculum.window=10``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rubricflow.sections import Section
from rubricflow.sections import LoRAConfig  # rucl.lora; shared with sft.lora
from rubricflow.grpo.config import GRPOConfig


# The reward's vocabulary, once (rubricflow.methods.rucl.rewards checks its arguments against it).
REWARD_MODES = ("rucl", "uniform", "outcome")
REWARD_GATES = ("none", "correct_only")
RewardMode = Literal[REWARD_MODES]  # type: ignore[valid-type]
Gate = Literal[REWARD_GATES]  # type: ignore[valid-type]


class RewardConfig(Section):
    mode: RewardMode = Field(
        "rucl",
        description="'rucl': outcome + tiered rubrics with the curriculum weight; 'uniform': all kept rubrics "
        "weighted equally (no tiers); 'outcome': final-answer correctness only (alpha = 1, no judge calls).",
    )
    alpha: float = Field(0.7, ge=0, le=1, description="Weight of the outcome term (paper: 0.7 best).")
    gate: Gate = Field(
        "none",
        description="'none': the paper's composition (every response earns its rubric term); 'correct_only' (beyond "
        "the paper): r = outcome * (alpha + (1 - alpha) * rubric), the rubric term only ranks correct answers, so a "
        "consistent wrong answer earns nothing and an all-wrong group has no advantage "
        "(rubricflow/methods/rucl/rewards.py).",
    )
    shuffle_control: bool = Field(
        False,
        description="Control experiment: permute the rewards within each rollout batch before the advantages "
        "(breaks the reward-response link; a working reward signal must beat this control).",
    )
    advanced_monitor: int | None = Field(
        16, ge=0,
        description="Monitoring sample of the advanced tier: while the curriculum holds lambda_t = 0 (mode 'rucl'), "
        "only this many completions per step are judged on the advanced rubrics (a fixed pseudo-random pick by "
        "completion id), the rest on the foundational ones alone; the rewards are the same (the advanced tier has "
        "weight 0 before the switch) and S_A is still measured, on the sample, at a fraction of the judge tokens. "
        "After the switch every completion is judged on both tiers. None: every completion on every rubric, always.",
    )


class CurriculumConfig(Section):
    threshold_rule: Literal["absolute", "relative"] = Field(
        "absolute",
        description="'absolute' (the paper): switch when the batch S_F exceeded `threshold` at every step of the "
        "window; 'relative' (calibrated to the start): the threshold is the mean batch S_F of the first `window` steps "
        "(the start's level, measured on the training batches) plus `margin`, so the switch asks for the same gain "
        "over the start whatever level a seed starts at (rubricflow/methods/rucl/curriculum.py).",
    )
    threshold: float = Field(
        0.9, ge=0, le=1, description="Batch foundational score that must be exceeded at every step of the window "
        "(threshold_rule 'absolute')."
    )
    window_test: Literal["every", "mean"] = Field(
        "every",
        description="'every' (the paper): the batch S_F exceeded the threshold at every step of the window; 'mean': "
        "the window's mean S_F exceeded it. The paper's batch is 1024 responses; at the tiny profile's 128 a batch "
        "S_F moves by about +-0.09 from step to step, so 'every' waits for a run of lucky batches, and the mean "
        "of a 5-step window (640 responses) has about the noise of the paper's one batch.",
    )
    margin: float = Field(
        0.05, ge=0, le=1, description="threshold_rule 'relative': the gain in batch S_F over the start's level that "
        "must hold at every step of the window."
    )
    window: int = Field(20, ge=1, description="Sliding window of steps guarding the switch (paper: 20 best).")
    ramp_steps: int = Field(50, ge=0, description="Steps over which lambda ramps from 0 to peak after the switch.")
    peak: float = Field(0.5, ge=0, le=1, description="Final advanced-rubric weight lambda_max (held after the ramp).")
    shape: Literal["sigmoid", "linear"] = Field("sigmoid", description="Ramp shape (paper: sigmoid beats linear).")
    steepness: float = Field(10.0, gt=0, description="Sigmoid ramp steepness (rescaled to hit 0 and 1 exactly).")


class RuCLConfig(Section):
    outputs = frozenset({"name", "out_dir", "checkpoint_dir", "eval_samples", "eval_policies", "eval_split", "eval_k",
                         "eval_seed"})

    name: str = Field(
        "rucl",
        pattern=r"^[a-z][a-z0-9_]*$",
        description="Run name: the report (reports/<name>.json, reports/<name>/) and MLflow stage name; variants "
        "such as the outcome-only baseline use their own name and out_dir.",
    )
    init_from: str = Field("artifacts/models/sft", description="Policy checkpoint to start from (the SFT model).")
    tiers_path: str = Field(
        "artifacts/rubrics/tiers.json",
        description="Rubric tiers written by the stratify stage (foundational/advanced).",
    )
    out_dir: str = Field("artifacts/models/rucl", description="Where the trained policy and checkpoints are written.")
    checkpoint_dir: str = Field(
        ".rubricflow/checkpoints/rucl",
        description="Training checkpoints (resume point); one sub-directory per run name and seed whose key.json "
        "records what it was trained on (sections, SFT policy, tiers, data, training code): a run with other inputs "
        "starts fresh and says which part changed.",
    )
    train_split: Literal["train", "val", "test", "calib"] = Field("train", description="Dataset split for rollouts.")
    train_limit: int | None = Field(
        None, ge=1,
        description="Use only the first N problems per task of the training split as prompts (a small fixed prompt "
        "set: the GRPO canary); evaluating on `train` then scores exactly those. None: the whole split.",
    )
    eval_samples: int = Field(
        64, ge=0,
        description="Val samples per task for the greedy and sampled accuracy tracked during training (0 = skip). The "
        "final evaluation (rucl_eval, study units) always scores every problem of its split.",
    )
    eval_k: int = Field(
        8, ge=0,
        description="Samples per problem for the sampled readouts (sampled accuracy, pass@k, clean pass@k) at the GRPO "
        "temperature, in training-time tracking and the final evaluation (0 = greedy only). GRPO moves the sampled "
        "distribution before the greedy mode.",
    )
    eval_seed: int = Field(
        0, description="Sampling seed of the sampled readouts: every policy is evaluated on the same draws of noise."
    )
    eval_split: Literal["test", "val", "train"] = Field(
        "test",
        description="Split evaluate_policies scores the policies on: 'test' in rucl_eval and reporting studies (the "
        "final evaluation); a selection study (`study.<name>.eval_split: val`) sets 'val'; the canary sets 'train' "
        "(its own fixed prompts, `train_limit`).",
    )
    eval_policies: dict[str, str] = Field(
        default_factory=lambda: {
            "sft": "artifacts/models/sft",
            "outcome": "artifacts/models/rucl_outcome",
            "rucl": "artifacts/models/rucl",
        },
        description="rucl_eval: policies compared on held-out samples, name -> checkpoint directory.",
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Hybrid reward.")
    lora: LoRAConfig = Field(
        default_factory=LoRAConfig, description="LoRA adapters on the policy (rank 0 = full fine-tuning); the saved "
        "policy has them merged."
    )
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig, description="Advanced-rubric schedule.")
    grpo: GRPOConfig = Field(
        # the tiny profile's lr is chosen on val by `rubricflow study rucl_tune` (params.yaml); a 7B
        # policy wants lr around 1e-6 (gpu profile)
        default_factory=lambda: GRPOConfig(lr=2e-4, steps=40, group_size=8, prompts_per_step=8, max_new_tokens=48,
                                           checkpoint_every=10),
        description="GRPO optimisation and engine.",
    )
