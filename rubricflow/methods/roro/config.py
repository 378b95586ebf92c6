"""RoRo parameters (the ``roro`` section of params.yaml): task, step models, routing, trajectories, pairs, the
Rubricor-Judge alternation, router GRPO and the evaluation sweep. Pydantic only (no heavy imports).

Every size is a parameter; the defaults are the tiny CPU profile, sized so that the whole RoRo pipeline runs in
minutes on 2 cores (docs/operations.md has the stage times). Ablations are single keys, e.g.
``dvc exp run -S roro.router.methods='[outcome-only]'`` (outcome-only routers),
``-S roro.pairs.order='[outcome,process,cost]'``, ``-S roro.rubricor_judge.rounds=3``,
``-S roro.rubricor_judge.score_mode=expected``, ``-S roro.steps.fifth_feature=none``.

Readings of what the paper leaves open (each alternative is a named value next to the chosen one):

* the Judge's process score is the paper's ``sum weight * score * 1[satisfied]`` over sampled judgments
  (``rubricor_judge.score_mode: sampled``); the probability-weighted reading is ``expected``;
* each alternation round is rejection-sampling fine-tuning (expert iteration), not RL
  (``rubricor_judge.optimizer: rft``; why: ``rubricflow.methods.roro.judge.alternation``);
* on the tiny profile the Rubricor fills a fixed list of criterion families (``rubricor_judge.fixed_families``);
* the router's fifth state feature is the step index (``steps.fifth_feature: step_index``; ``none`` keeps the four
  features the paper names);
* "same cost" for a process pair is the same number of LRM calls (``pairs.cost_unit: lrm_calls``; ``lrm_tokens``
  compares token counts).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rubricflow.grpo.config import GRPOConfig
from rubricflow.sections import MAX_BATCH, MAX_GROUP, MAX_TOKENS, Section

# The routers, in the order of every table and plot: those GRPO trains (`router.methods`), then the untrained
# baselines. CHECKED_ROUTERS read their process score off the checked steps (synthetic problems only).
TRAINED_ROUTERS = ("roro", "oracle-process", "oracle-noisy", "exact-reader", "outcome-only")
BASELINE_ROUTERS = ("threshold", "random")
ROUTERS = TRAINED_ROUTERS + BASELINE_ROUTERS
CHECKED_ROUTERS = ("oracle-process", "oracle-noisy", "exact-reader")
TrainedRouter = Literal[TRAINED_ROUTERS]  # type: ignore[valid-type]


class RoRoTaskConfig(Section):
    source: Literal["synthetic", "gsm8k"] = Field(
        "synthetic",
        description="'synthetic': multi-step arithmetic with checkable steps; 'gsm8k': real problems from "
        "`gsm8k_path` (outcome checkable, steps not) used as the held-out evaluation set.",
    )
    gsm8k_path: str | None = Field(
        None, description="GSM8K-style jsonl (`question`, `answer` ending '#### N'); required when source=gsm8k."
    )
    n_sft: int = Field(3000, ge=1, description="Synthetic problems the step models are fine-tuned on.")
    n_train: int = Field(32, ge=1, description="Problems for trajectories, training pairs and router GRPO.")
    n_val: int = Field(16, ge=1, description="Held-out problems whose pairs measure the Judge's pairwise accuracy.")
    n_test: int = Field(64, ge=1, description="Held-out problems for the accuracy-vs-cost evaluation.")
    min_ops: int = Field(
        3, ge=1,
        description="Fewest operations per synthetic problem (steps = ops + final). With 2 operations a problem has "
        "at most 8 routes and rarely two of them tie on outcome and cost while differing in process (a process "
        "pair; docs/operations.md, 'Measurements behind defaults').",
    )
    max_ops: int = Field(4, ge=1, description="Most operations per synthetic problem.")
    max_value: int = Field(9, ge=2, description="Every intermediate value stays in [0, max_value].")
    arg_max: int = Field(5, ge=1, description="Largest operand of Add / Subtract.")
    mul_max: int = Field(2, ge=0, description="Largest 'Multiply by' factor (below 2: no multiplication).")
    seed: int = Field(7, description="Problem generator seed (problems are a pure function of seed and sizes).")
    draw_per_unit: bool = Field(
        False,
        description="Studies only: every unit draws its own problems (task.seed = the unit's seed) and builds their "
        "routes, pairs and step cache under its own directory with the main pipeline's step models, so that the "
        "seeds cover the problems, routes and pairs (not the step models). False: every unit routes the main "
        "pipeline's problems. The scripted environment always rebuilds, its step models included.",
    )
    answer: Literal["value", "parity"] = Field(
        "value",
        description="What the question asks, read off the same step models and routes (the step models write the "
        "value chain either way): 'value' = the final number, so an accepted SLM error almost always makes the "
        "outcome wrong and the outcome nearly determines routing quality; 'parity' = whether the final number is "
        "even or odd, so a route with an accepted error still scores outcome 1 about half the time (the outcome is "
        "a noisy signal of routing quality, the paper's case against outcome-only rewards). Under 'parity' the "
        "primary metric is chain-exact accuracy (every step right), the outcome secondary. Synthetic problems only.",
    )

    @model_validator(mode="after")
    def _check(self) -> "RoRoTaskConfig":
        if self.max_ops < self.min_ops:
            raise ValueError(f"max_ops ({self.max_ops}) must be >= min_ops ({self.min_ops})")
        if self.answer == "parity" and self.source != "synthetic":
            raise ValueError("answer=parity needs source=synthetic (its primary metric, chain-exact accuracy, needs "
                             "checkable steps)")
        if self.source == "gsm8k" and not self.gsm8k_path:
            raise ValueError("source=gsm8k needs gsm8k_path (a jsonl with `question` and `answer` ending '#### N')")
        return self


class StepModelConfig(Section):
    source: Literal["tiny", "pretrained", "scripted"] = Field(
        "tiny",
        description="'tiny': a Qwen2 built offline and fine-tuned here; 'pretrained': a real model id/path; "
        "'scripted': the long-chain environment's step model, whose errors, uncertainty and costs per step type are "
        "set by `roro.scripted` (both models scripted or neither; rubricflow.methods.roro.env.scripted).",
    )
    path: str = Field(description="Tiny: directory the trained model is saved to. Pretrained: HF id or directory.")
    backend: Literal["transformers", "vllm"] = Field(
        "transformers", description="Step generation: transformers generate (CPU) or vLLM (GPU profile)."
    )
    hidden_size: int = Field(128, ge=16, description="Tiny only: hidden size.")
    num_layers: int = Field(2, ge=1, description="Tiny only: decoder layers.")
    num_heads: int = Field(4, ge=1, description="Tiny only: attention heads.")
    num_kv_heads: int = Field(2, ge=1, description="Tiny only: key/value heads.")
    vocab_size: int = Field(400, ge=300, description="Tiny only: BPE vocabulary of the offline tokenizer.")
    sft_steps: int = Field(400, ge=0, description="Tiny only: SFT steps at `lr`.")
    sft_decay_steps: int = Field(100, ge=0, description="Tiny only: further SFT steps at lr / 4 (a cheap decay).")
    target_step_acc: float = Field(
        0.0, ge=0, le=1,
        description="Tiny only: after sft_steps, keep training in blocks while the gold-prefix step accuracy on the "
        "val problems is below this (0 = fixed schedule).",
    )
    extra_block: int = Field(100, ge=1, description="Tiny only: steps per extra block (at lr / 2).")
    max_extra_steps: int = Field(0, ge=0, description="Tiny only: cap on the extra steps.")
    batch_size: int = Field(16, ge=1, le=MAX_BATCH, description="Tiny only: SFT sequences per step.")
    lr: float = Field(1e-3, gt=0, description="Tiny only: SFT learning rate.")
    warmup_steps: int = Field(40, ge=0, description="Tiny only: linear warmup steps of the first phase.")
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1, description="vLLM only: GPU memory fraction.")
    n_params: int = Field(
        0, ge=0, le=10**14,
        description="vLLM and scripted: parameter count for the FLOPs estimate (tiny/transformers: counted).",
    )


def _slm() -> StepModelConfig:
    return StepModelConfig(path="artifacts/roro/models/slm", hidden_size=64, num_layers=2, sft_steps=200,
                           sft_decay_steps=30, lr=3e-3, warmup_steps=20, target_step_acc=0.5, extra_block=50,
                           max_extra_steps=200)


def _lrm() -> StepModelConfig:
    # lr 1e-3 with a 40-step warmup: at 3e-3 the 3-layer model often stalled below 70% step accuracy
    return StepModelConfig(path="artifacts/roro/models/lrm", hidden_size=128, num_layers=3, sft_steps=350,
                           sft_decay_steps=50, lr=1e-3, warmup_steps=40, target_step_acc=0.9, extra_block=100,
                           max_extra_steps=200)


class ScriptedConfig(Section):
    """The long-chain environment (``roro.slm.source = roro.lrm.source = scripted``; the third reading of the task
    beside ``value`` and ``parity``): step models whose behaviour per step type is set here, so that a myopic
    uncertainty threshold is not near-optimal (rubricflow.methods.roro.env.scripted)."""

    seed: int = Field(
        0,
        description="Environment seed: every error, uncertainty and repair draw is a pure function of it, the model, "
        "the problem, the step and the carried value. A study unit sets it to its own seed (with the problems' "
        "seed), so the intervals cover the environment.",
    )
    formulate_steps: int = Field(
        2, ge=0, description="The first operations of a chain are 'formulation' steps (the paper's problem-"
        "formulation steps, where its LRM calls concentrate); the rest are 'compute' steps, then the final answer.",
    )
    slm_formulate_error: float = Field(0.3, ge=0, le=1, description="SLM error rate on a formulation step.")
    slm_compute_error: float = Field(0.08, ge=0, le=1, description="SLM error rate on a compute step.")
    lrm_error: float = Field(0.02, ge=0, le=1, description="LRM error rate on any operation step.")
    miscalibrated: Literal["formulate", "none"] = Field(
        "formulate",
        description="The step type whose SLM uncertainty does not see its errors: a wrong step's uncertainty is drawn "
        "from the right steps' range (confidently wrong), so a threshold on uncertainty cannot find those errors. "
        "'none': every step type calibrated (the control reading).",
    )
    right_uncertainty: list[float] = Field(
        default_factory=lambda: [0.0, 0.6], description="[low, high] of a right SLM step's uncertainty (uniform)."
    )
    wrong_uncertainty: list[float] = Field(
        default_factory=lambda: [0.4, 1.0],
        description="[low, high] of a wrong SLM step's uncertainty on a calibrated step type (uniform).",
    )
    formulate_tokens: int = Field(24, ge=1, description="Tokens of a formulation step (either model).")
    compute_tokens: int = Field(8, ge=1, description="Tokens of a compute step (either model).")
    final_tokens: int = Field(3, ge=1, description="Tokens of the SLM's final '#### N' step.")
    verify_tokens_per_op: int = Field(
        4, ge=1,
        description="The LRM's final step verifies the chain from the question: it costs this many tokens per "
        "operation of the problem, whether or not it repairs.",
    )
    lrm_repair: float = Field(
        0.5, ge=0, le=1,
        description="Probability that the LRM, called on the final step, re-derives the true answer from the question "
        "(a late repair of an error made earlier; the route's outcome is then right and its chain is not); else it "
        "restates the carried value.",
    )

    @model_validator(mode="after")
    def _check(self) -> "ScriptedConfig":
        for name in ("right_uncertainty", "wrong_uncertainty"):
            v = getattr(self, name)
            if len(v) != 2 or not 0.0 <= v[0] <= v[1] <= 1.0:
                raise ValueError(f"{name} {v}: expected [low, high] with 0 <= low <= high <= 1")
        return self


class StepsConfig(Section):
    max_step_tokens: int = Field(
        12, ge=1, description="Token cap of one step (a tiny arithmetic step is a few tokens)."
    )
    max_steps: int = Field(6, ge=1, description="Steps after which a solution is cut off (no final answer).")
    uncertainty: Literal["one_minus_min_maxprob", "one_minus_mean_maxprob", "mean_entropy", "max_entropy"] = Field(
        "one_minus_min_maxprob", description="SLM step uncertainty (see rubricflow.methods.roro.env.step_lm)."
    )
    token_norm: float = Field(16.0, gt=0, description="Router feature: step tokens are divided by this constant.")
    step_norm: float = Field(8.0, gt=0, description="Router feature: the step index is divided by this constant.")
    fifth_feature: Literal["step_index", "none"] = Field(
        "step_index",
        description="The router's fifth state feature. The paper's text we follow names four (current, min and mean "
        "prefix uncertainty, normalised step tokens) and a 5-dim state; 'step_index' (k / step_norm: where the "
        "decision falls, so early escalation can be learned) is our reading; 'none' sets it to 0 (the four named "
        "features only).",
    )
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="Prefixes per generate() call.")


class TrajectoriesConfig(Section):
    enumerate_routes: bool = Field(
        True,
        description="Collect every route of each train/val problem (2^steps; the step cache makes it cheap) instead of "
        "the routing policies below. Every pair of routes that reach the same answer with the same number of LRM "
        "calls but place them differently (a process pair) is then in the pool. Off: only the policies' routes "
        "(real step counts make 2^steps impossible; the gpu profile).",
    )
    random_rates: list[float] = Field(
        default_factory=lambda: [0.2, 0.5, 0.8], description="Random routers (P(call LRM) per step) collected."
    )
    random_repeats: int = Field(2, ge=1, description="Independent rollouts of each random router per problem.")
    thresholds: list[float] = Field(
        default_factory=lambda: [0.1, 0.3, 0.6], description="Uncertainty-threshold routers (call LRM if u > t)."
    )
    seed: int = Field(11, description="Seed of the random routers.")


class PairsConfig(Section):
    order: list[Literal["outcome", "cost", "process"]] = Field(
        default_factory=lambda: ["outcome", "cost", "process"],
        description="Lexicographic preference: the first criterion that separates two trajectories decides.",
    )
    cost_unit: Literal["lrm_calls", "lrm_tokens"] = Field(
        "lrm_calls",
        description="What 'cost' compares: 'lrm_calls' (the number of LRM steps; two routes with as many calls have "
        "the same cost, whichever steps they called) or 'lrm_tokens' (the LRM's generated tokens: calling the short "
        "final step instead of an operation step is then already a cost difference).",
    )
    cost_margin: int = Field(
        0, ge=0, description="Cost difference (in `cost_unit`) that must be exceeded for cost to decide a pair."
    )
    max_pairs_per_problem: int = Field(
        12, ge=1, description="Pairs kept per problem (balance=problem), or that times the problems (balance=split)."
    )
    balance: Literal["split", "problem"] = Field(
        "split",
        description="How the kept pairs are shared between the reasons (outcome, cost, process): 'split' = equal "
        "shares of the split's budget, drawn round-robin over problems (process pairs exist only in problems with "
        "several SLM errors, so round-robin within each problem leaves them a small share); 'problem' = round-robin "
        "within each problem.",
    )
    seed: int = Field(13, description="Seed of the pair subsampling.")


class RubricLMConfig(Section):
    source: Literal["tiny", "pretrained"] = Field(
        "tiny", description="'tiny': a Qwen2 built offline here; 'pretrained': start from `init` (HF id or directory)."
    )
    init: str | None = Field(None, description="Pretrained only: the model to start from.")
    path: str = Field(description="Where the trained model is saved.")
    hidden_size: int = Field(64, ge=16, description="Tiny Qwen2 hidden size.")
    num_layers: int = Field(2, ge=1, description="Tiny Qwen2 layers.")
    vocab_size: int = Field(500, ge=300, description="Vocabulary of the model's offline tokenizer.")
    warm_steps: int = Field(300, ge=0, description="Round-0 templated SFT steps (format, uninformative content).")
    rft_steps: int = Field(40, ge=0, description="SFT steps on the kept candidates in each round.")
    rft_lr: float = Field(1e-3, gt=0, description="Learning rate of the rejection-sampling SFT (gentler than warm-up).")
    batch_size: int = Field(16, ge=1, le=MAX_BATCH, description="SFT sequences per step.")
    lr: float = Field(3e-3, gt=0, description="SFT learning rate.")
    samples: int = Field(
        4, ge=1, le=MAX_GROUP, description="Candidates sampled per input in a rejection-sampling round."
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the candidates.")
    max_new_tokens: int = Field(
        48, ge=8, le=MAX_TOKENS, description="Generation cap of one rubric / judgment (in tokens)."
    )


def _judge() -> RubricLMConfig:
    return RubricLMConfig(path="artifacts/roro/judge", warm_steps=500)


def _rubricor() -> RubricLMConfig:
    return RubricLMConfig(path="artifacts/roro/rubricor", warm_steps=80, rft_steps=30, samples=4, max_new_tokens=96)


class RubricorJudgeConfig(Section):
    rounds: int = Field(2, ge=0, description="Alternation rounds (each: a Judge phase, then a Rubricor phase).")
    optimizer: Literal["rft"] = Field(
        "rft",
        description="How each phase optimises: 'rft' = rejection-sampling fine-tuning (expert iteration: sample K "
        "candidates, keep those that order the training pairs correctly, fine-tune on them), not RL (GRPO). Why: "
        "the signal is a pairwise order known only after both trajectories of a pair are judged; RFT optimises it "
        "with one SFT pass per phase, affordable on CPU (rubricflow.methods.roro.judge.alternation).",
    )
    judge: RubricLMConfig = Field(default_factory=_judge, description="The Judge LM.")
    rubricor: RubricLMConfig = Field(default_factory=_rubricor, description="The Rubricor LM.")
    warm_label_noise: float = Field(
        0.0, ge=0, le=0.5,
        description="Round-0 Judge targets: probability of flipping each criterion's literal reading (0.5 = pure "
        "noise). The warm start teaches what a criterion says, not which routes are good (the Rubricor's rubrics are "
        "random then); with noisy labels the tiny Judge did not learn to read a rubric at all (docs/operations.md, "
        "'Measurements behind defaults').",
    )
    score_mode: Literal["sampled", "expected"] = Field(
        "sampled",
        description="How a trajectory's process score is read. 'sampled' (the paper): each of `score_samples` sampled "
        "judgments scores sum(weight * score * 1[satisfied]) with score parsed as a number in [0, 1], and the score "
        "is their mean. 'expected': one greedy judgment, each criterion's score as written (parsed) times "
        "P(satisfied = true) from the Judge's token probabilities (judge.scoring.expected_scores).",
    )
    score_samples: int = Field(
        4, ge=1, le=MAX_GROUP, description="score_mode=sampled: judgments sampled per trajectory."
    )
    score_temperature: float = Field(1.0, ge=0, description="Sampling temperature of those judgments (0 = greedy).")
    fixed_families: bool = Field(
        True,
        description="Rubricor candidates must list the criterion families of `families` "
        "(rubricflow.methods.roro.judge.prompts.FAMILY_SETS) in order; the rubric is query-specific through its "
        "weights and the parameters of the score guidance. The paper writes free-form criteria; a tiny Rubricor and "
        "Judge cannot copy free text into judgments within the CPU budget, so the tiny profile fills this template. "
        "Off (the gpu profile): free-form rubrics of real models.",
    )
    families: Literal["four", "six"] = Field(
        "four",
        description="The criterion families of the warm start's rubric templates and of a fixed-family rubric "
        "(rubricflow.methods.roro.judge.prompts.FAMILY_SETS): 'four' (risky step, uncertain steps, few LRM steps, "
        "steps are right); 'six' adds 'no call on a sure step' and 'SLM steps are right', the visible traces of a "
        "wasted call and of an accepted SLM error; its rubrics and judgments are longer, so on the tiny profile six "
        "needs judge.max_new_tokens >= 72 and rubricor.max_new_tokens >= 128 (the warm start refuses shorter caps). "
        "What each set lets an exact reader reach on the process pairs: reports/studies/roro_family_ceiling.md.",
    )
    judge_reads: Literal["steps", "problem", "checked"] = Field(
        "steps",
        description="What the Judge reads besides the rubric: 'steps' = the route's steps (with writer and SLM "
        "uncertainty) only, the problem's numbers carried by the steps; 'problem' = a 'Problem:' line too (the "
        "paper's Judge reads the query), and the warm start's literal readings of 'steps are right' / 'SLM steps are "
        "right' check each step's operation and operand against it, so a step that misreads an operand (right "
        "arithmetic) reads as wrong; 'checked' = 'problem' with a calculator: each step line ends with its check "
        "against the problem ([right] / [wrong]), the output of a tool call a real Judge would make, which a tiny "
        "Judge cannot compute. Under 'problem' and 'checked' the literal readings are the same. Synthetic problems "
        "only: a GSM8K question's operations cannot be read off its text (the reading refuses it). The exact reader "
        "(roro.router.methods exact-reader) reads as the Judge does.",
    )
    tokenizer_reads: Literal["own", "checked"] = Field(
        "own",
        description="Which reading's warm-start texts train the Judge's and Rubricor's tokenizer: 'own' = judge_reads' "
        "(the tokenizer, hence the Rubricor's tokens, follows what the Judge reads); 'checked' = the 'checked' "
        "reading's texts and its check marks whatever the Judge reads (they hold every token any reading writes), so "
        "that two readings compared on one draw differ only in the Judge's input.",
    )
    rubricor_problems: int = Field(12, ge=1, description="Training problems per Rubricor phase.")
    select_on: Literal["val", "val_process", "last"] = Field(
        "val",
        description="Which phase's Judge and Rubricor are kept: 'val' = the best pairwise accuracy on the val "
        "problems' pairs, every category (test pairs are never read here; the kept Judge is measured on test pairs "
        "by roro_eval); 'val_process' = the best accuracy on the val process pairs (ties: the better overall), the "
        "pairs only the Judge's score orders in the router's reward (outcome and cost are terms of their own); "
        "'last' = the last phase.",
    )
    batch_size: int = Field(
        256, ge=1, le=MAX_BATCH, description="Prompts per generate() call (tiny LMs: big batches are cheap)."
    )
    seed: int = Field(17, description="Seed of the warm-start templates and candidate sampling.")


def _router_grpo() -> GRPOConfig:
    # scale_rewards "batch": chosen on val by `rubricflow study roro_router_tune` over group / batch / none
    # (reports/studies/roro_router_tune.md). Under "group" a group whose routes share one outcome is scaled up to
    # full-size cost-only advantages whatever the cost weight, and the routers collapsed to all-SLM.
    return GRPOConfig(
        steps=200, group_size=8, prompts_per_step=8, lr=1e-3, loss_agg="grpo", scale_rewards="batch",
        checkpoint_every=50, keep_checkpoints=1, clip_high=0.28, max_new_tokens=8, seed=19,
    )


class RouterConfig(Section):
    outputs = frozenset({"checkpoint_dir"})

    hidden: int = Field(128, ge=1, description="Router MLP hidden units (paper: 128).")
    init_call_bias: float = Field(0.0, description="Initial logit of 'call LRM' (0: P = 0.5 at the start).")
    start: Literal["coin", "threshold"] = Field(
        "coin",
        description="Where GRPO starts: 'coin' (the paper's: a fresh MLP, P(call LRM) = sigmoid(init_call_bias)) or "
        "'threshold' (the fresh MLP first cloned to the threshold policy of `eval.thresholds` that earns the most "
        "outcome - cost_weight * cost on the training problems, so GRPO starts at the one-feature rule and the "
        "process reward has to improve on it; the same start for every method at one cost weight: "
        "rubricflow.methods.roro.router.imitate).",
    )
    start_steps: int = Field(300, ge=1, description="start 'threshold': full-batch Adam steps of the cloning.")
    start_lr: float = Field(1e-2, gt=0, description="start 'threshold': learning rate of the cloning.")
    start_explore: float = Field(
        0.1, ge=0, lt=0.5,
        description="start 'threshold': the probability the cloned router keeps on the action the rule did not take "
        "(the cloning's target; label smoothing 2 x this): a router cloned to certainty samples the rule's route in "
        "every rollout, so every GRPO group is flat and the reward cannot move it.",
    )
    grpo: GRPOConfig = Field(default_factory=_router_grpo, description="GRPO for the router (shared updater).")
    methods: list[TrainedRouter] = Field(
        default_factory=lambda: ["roro", "outcome-only"],
        description="Routers trained at every swept cost weight: 'roro' (outcome + the learned Judge's process score "
        "- cost), 'outcome-only' (outcome - cost, no Judge) and 'oracle-process' (outcome + the process score an "
        "exact judge of the steps gives, 1 - (accepted SLM errors + wasted LRM calls) / steps, read off the step "
        "cache - cost: the upper bound on what any learned Judge could add; synthetic problems only). The Judge-"
        "quality dose-response (`rubricflow study roro_judge_dose`) adds 'oracle-noisy' (the oracle's score plus "
        "per-route Gaussian noise, clipped to [0, 1], its scale calibrated so the score orders `noisy_target_acc` "
        "of the val process pairs) and 'exact-reader' (an exact code-level reader of the warm Rubricor's rubrics: "
        "the best a Judge can do under them); both synthetic problems only (rubricflow.methods.roro.env.oracles).",
    )
    noisy_target_acc: float = Field(
        0.8, ge=0.5, le=1.0,
        description="'oracle-noisy' only: the val process-pair accuracy (ties 0.5) the corrupted oracle is calibrated "
        "to, by bisection on the noise scale for the noise draw of `roro.seed` (1.0, or any target at or above the "
        "oracle's own accuracy: no noise, the oracle itself; 0.5: the widest noise, a coin per route that carries "
        "nothing of its process, the control for a dense score without information). The accuracy reached is in the "
        "router summary.",
    )
    process_weight: float = Field(
        0.5, ge=0,
        description="Weight of the process score in the reward (the Judge's under the Rubricor's rubric, or the "
        "oracle's).",
    )
    cost_weight: float = Field(0.2, ge=0, description="Cost term weight of the main RoRo router (one of the sweep).")
    sweep_cost_weights: list[float] = Field(
        default_factory=lambda: [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.2],
        description="Cost weights swept for the accuracy-vs-cost curves (every method in `methods`; the evaluation "
        "keeps, per method, those chosen by `eval.cost_weight_rule`). The cost term is a fraction of the all-LRM "
        "cost; under batch-scaled GRPO the routers call nearly every step at the low end and none at the high end in "
        "both readings of the task (the studies' grid). At weights >= 1 - process_weight a wrong all-SLM route "
        "that fools the Judge completely (process score 1) out-earns the right all-LRM route it scores 0: the low-"
        "cost routers rely on the Judge not being fooled.",
    )
    checkpoint_dir: str = Field(
        ".rubricflow/checkpoints/roro",
        description="GRPO checkpoints (resume point); one sub-directory per run and seed whose key.json records what "
        "it was trained on, so a changed parameter, step model, Judge, problem set or training code never resumes a "
        "run made with other inputs (it starts fresh and says which part changed).",
    )

    @model_validator(mode="after")
    def _check(self) -> "RouterConfig":
        if not self.sweep_cost_weights:
            raise ValueError("sweep_cost_weights must list at least one cost weight")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods {self.methods} repeat a method")
        if self.grpo.engine.device != "cpu":
            raise ValueError(
                "grpo.engine.device: the router is a small MLP trained on the CPU (its rollouts sample on the CPU); "
                "expected 'cpu'"
            )
        return self


class RoRoEvalConfig(Section):
    split: Literal["test", "val"] = Field(
        "test",
        description="Problems the evaluation routes: 'test' (the final evaluation) or 'val' (a study that chooses, "
        "run under the test-split guard).",
    )
    baselines: list[Literal["threshold", "random"]] = Field(
        default_factory=lambda: ["threshold", "random"],
        description="Baseline curves evaluated beside the trained routers: uncertainty threshold, random router.",
    )
    thresholds: list[float] = Field(
        default_factory=lambda: [0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8],
        description="Uncertainty-threshold baseline: one curve point per threshold.",
    )
    random_rates: list[float] = Field(
        default_factory=lambda: [0.1, 0.25, 0.5, 0.75, 0.9], description="Random-router baseline curve points."
    )
    random_repeats: int = Field(3, ge=1, description="Rollouts per problem of each random router (averaged).")
    seed: int = Field(23, description="Seed of the random baselines.")
    cost_range: list[float] = Field(
        default_factory=lambda: [0.2, 0.8],
        description="The common cost range [low, high] (LRM cost as a fraction of the all-LRM cost) the methods are "
        "compared over, fixed before any result: `range_auc` is the mean accuracy of a method's hull over it, given "
        "only when the method's own points reach both ends (else n/a); the cost weights kept per method "
        "(`cost_weight_rule`) aim at spanning it.",
    )
    matched_costs: list[float] = Field(
        default_factory=lambda: [0.3, 0.5, 0.7],
        description="Costs (inside `cost_range`) where accuracies are compared (`acc_at_cost_<pct>`): a method's "
        "hull there, given only when it has points of its own on each side (else n/a; never a chord from an end "
        "of the curve).",
    )
    cost_weight_rule: Literal["val_span", "all"] = Field(
        "val_span",
        description="Which trained routers (one per swept cost weight) a method is evaluated with, chosen per "
        "method on the val problems: 'val_span' = those whose val LRM cost lies inside `cost_range`, plus the "
        "nearest one below it and the nearest one above it (so the kept points span the range when the sweep "
        "does; the test split is not read); 'all' = every swept weight (one shared grid for every method, whose "
        "points then cover different costs per method).",
    )
    judge_problems: int = Field(
        32, ge=0,
        description="Test problems whose route pairs (built like the training pairs) measure the kept Judge's "
        "pairwise accuracy per pair category (0: not measured).",
    )

    @model_validator(mode="after")
    def _check(self) -> "RoRoEvalConfig":
        if len(self.cost_range) != 2 or not 0.0 <= self.cost_range[0] < self.cost_range[1] <= 1.0:
            raise ValueError(f"cost_range {self.cost_range}: expected [low, high] with 0 <= low < high <= 1")
        lo, hi = self.cost_range
        outside = [c for c in self.matched_costs if not lo <= c <= hi]
        if outside:
            raise ValueError(f"matched_costs {outside} lie outside cost_range {self.cost_range}")
        return self


class RoRoConfig(Section):
    data_dir: str = Field("data/roro", description="Problems, trajectories, pairs and the step cache.")
    out_dir: str = Field("artifacts/roro", description="Models, rubrics, routers, metrics and plots.")
    seed: int = Field(1234, description="Seed of model initialisation and training.")
    task: RoRoTaskConfig = Field(default_factory=RoRoTaskConfig, description="Problems.")
    slm: StepModelConfig = Field(default_factory=_slm, description="The small step model (cheap, weaker).")
    lrm: StepModelConfig = Field(default_factory=_lrm, description="The large step model (costly, stronger).")
    steps: StepsConfig = Field(default_factory=StepsConfig, description="Step generation and router features.")
    trajectories: TrajectoriesConfig = Field(default_factory=TrajectoriesConfig, description="Routing policies.")
    pairs: PairsConfig = Field(default_factory=PairsConfig, description="Preference pair construction.")
    rubricor_judge: RubricorJudgeConfig = Field(
        default_factory=RubricorJudgeConfig, description="Rubricor and Judge LMs and their alternation."
    )
    router: RouterConfig = Field(default_factory=RouterConfig, description="Router MLP, reward and GRPO.")
    eval: RoRoEvalConfig = Field(default_factory=RoRoEvalConfig, description="Baselines and curves.")
    scripted: ScriptedConfig = Field(
        default_factory=ScriptedConfig, description="The long-chain environment's step models (source 'scripted')."
    )

    @property
    def scripted_env(self) -> bool:
        """Both step models are scripted (the long-chain environment): nothing to train, rebuilt from a seed."""
        return self.slm.source == "scripted"

    @model_validator(mode="after")
    def _check(self) -> "RoRoConfig":
        if (self.slm.source == "scripted") != (self.lrm.source == "scripted"):
            raise ValueError(f"slm.source={self.slm.source}, lrm.source={self.lrm.source}: the scripted environment "
                             "needs both step models scripted, or neither")
        if self.scripted_env:
            if self.task.source != "synthetic":
                raise ValueError("slm.source=scripted needs task.source=synthetic (it reads the question's operations)")
            if self.steps.max_steps < self.task.max_ops + 1:
                raise ValueError(f"steps.max_steps={self.steps.max_steps} cuts every {self.task.max_ops}-operation "
                                 "chain before its final answer; expected >= task.max_ops + 1 = "
                                 f"{self.task.max_ops + 1}")
            for name, spec in (("slm", self.slm), ("lrm", self.lrm)):
                if spec.n_params <= 0:
                    raise ValueError(f"{name}.n_params: a scripted step model needs a nominal parameter count for "
                                     "the FLOPs estimate; expected > 0")
        rj = self.rubricor_judge
        if self.task.source != "synthetic" and (rj.judge_reads != "steps" or rj.tokenizer_reads == "checked"):
            raise ValueError(f"rubricor_judge.judge_reads={rj.judge_reads}, tokenizer_reads={rj.tokenizer_reads} with "
                             f"task.source={self.task.source}: a reading of the problem (and a tokenizer of its texts) "
                             "needs synthetic problems, whose operations can be read off their text; use "
                             "judge_reads: steps and tokenizer_reads: own")
        if self.trajectories.enumerate_routes and self.task.source == "synthetic" and self.task.max_ops > 10:
            raise ValueError(f"trajectories.enumerate_routes with task.max_ops={self.task.max_ops} would collect up to "
                             f"2^{self.task.max_ops + 1} routes per problem; set it false (the policies' routes)")
        return self
