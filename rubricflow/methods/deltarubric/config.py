"""``DeltaRubricConfig``: the ``deltarubric`` section of params.yaml (pydantic only; no heavy imports).

Sizes default to the tiny CPU profile: the whole pipeline (pairs, SFT, multi-role GRPO, evaluation before and
after training) fits a few minutes on 2 CPU cores with the tiny Qwen2.5-VL and 56 px images. The paper's values
(N = M = 5, lambda = 0.4, relative planner reward) are the defaults; every size is a parameter.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rubricflow.sections import MAX_BATCH, MAX_GROUP, MAX_TOKENS, Section, SFTSchedule
from rubricflow.grpo.config import GRPOConfig
from rubricflow.methods.deltarubric.modes import TrainedJudge

# The package's code as its cached warm starts, study units and training checkpoints key it (``code_hash``): every
# module but the study declarations (``study_specs``), which reach a unit through its variant's config, so declaring
# a study keeps what earlier studies cached.
PACKAGE_CODE = ("rubricflow.methods.deltarubric", "-rubricflow.methods.deltarubric.study_specs")


class PairsConfig(Section):
    outputs = frozenset({"out_dir"})  # the pairs are hashed by content where they matter

    out_dir: str = Field(
        "data/deltarubric/pairs", description="Where the synthetic pairs (parquet + images) are written."
    )
    tasks: list[Literal["counting", "barchart", "geometry"]] = Field(
        default_factory=lambda: ["counting", "barchart"],
        description="Synthetic tasks the pairs are built on (geometry is the hardest to read at 56 px).",
    )
    train: int = Field(256, ge=0, description="Training pairs per task (SFT targets and GRPO prompts).")
    val: int = Field(16, ge=0, description="Validation pairs per task (the planner probe during training).")
    test: int = Field(48, ge=0, description="Held-out pairs per task (the before/after accuracy table).")
    partial_frac: float = Field(
        0.3, ge=0, le=1,
        description="Fraction of pairs where both responses are wrong (the lower severity is preferred).",
    )
    image_size: int = Field(56, ge=28, le=1024, description="Square image side in pixels (56 px = 4 visual tokens).")
    seed: int = Field(1234, description="Generator seed; the pairs are a pure function of seed and sizes.")
    form: Literal["narrow", "wide"] = Field(
        "narrow",
        description="Which pairs (rubricflow.methods.deltarubric.synthetic). 'narrow': the tasks' own images (3 "
        "colours, 3 bars) and partial pairs of two independent errors, the lower severity preferred; every claim key "
        "of a counting pair fits the 4-check budget, so an instance-independent checklist of every key separates "
        "every pair (issue 39). 'wide': a task where the checklist must be chosen: `keys` colours (counting, 3x3 "
        "grid) or bars (bar charts, tallest minus shortest) per image, and partial pairs whose responses both misread "
        "`confounds` keys differently and differ in one decisive key only the better one reads right "
        "(docs/deltarubric_planning.md). Counting and barchart only.",
    )
    n_keys: int = Field(
        10, ge=5, le=12,
        description="form 'wide' only: perception keys per image (colours or bars). 10: more than twice the 4 "
        "checks, so a fixed checklist of the first keys covers a misread key less than half the time.",
    )
    confounds: int = Field(
        3, ge=1, le=6,
        description="form 'wide' only: keys both responses of a partial pair misread, each with a different wrong "
        "value (claims that differ but decide nothing), besides the decisive key.",
    )
    balance_tol: float = Field(
        0.05, ge=0, le=0.5, description="Data gate: allowed |fraction of A-preferred pairs - 0.5| per split."
    )


class DRSFTConfig(SFTSchedule):
    outputs = frozenset({"out_dir", "base_dir"})

    out_dir: str = Field("artifacts/deltarubric/sft", description="Where the warm-started checkpoint is saved.")
    base_dir: str = Field(
        "artifacts/deltarubric/base",
        description="Tiny profile: where the freshly built base model (tokenizer trained on DeltaRubric's prompts) "
        "is saved. Pretrained policies are loaded from models.policy.path instead.",
    )
    init_from: str | None = Field(
        None,
        description="Policy the warm start continues from (e.g. the foundation SFT, artifacts/models/sft). None: a "
        "fresh tiny base (tokenizer trained on DeltaRubric's texts, `base_dir`) or, for pretrained policies, "
        "models.policy.path. The tiny profile uses a fresh 64-wide base: continuing the 128-wide foundation SFT read "
        "no better and cost more per step (docs/operations.md, \"DeltaRubric warm start\").",
    )
    hidden_size: int | None = Field(
        64,
        ge=16,
        description="Tiny base only (init_from None): width of DeltaRubric's fresh base model (None = "
        "models.policy.hidden_size).",
    )
    num_layers: int | None = Field(
        None,
        ge=1,
        description="Tiny base only (init_from None): depth of DeltaRubric's fresh base model (None = "
        "models.policy.num_layers).",
    )
    induction_steps: int = Field(
        0,
        ge=0,
        description="Tiny base only: steps of induction pretraining of the fresh base before the warm start "
        "(rubricflow.training.induction: copy the tokens that follow a random sequence's span found by its content; "
        "batch_size and lr as the warm start's). 0 = none. Without it the tiny verifier did not learn to copy a "
        "response's claim for a checked key on the wide pairs (bench/copy_probe.py, docs/deltarubric_planning.md).",
    )
    induction_at: Literal["base", "after_reading"] = Field(
        "base",
        description="When the induction pretraining runs: 'base' on the fresh base before any warm-start step; "
        "'after_reading' once the reading phase of a warm start to a bar has met its bar, before the evidence phase "
        "(the later phases keep the reading examples). On the wide bar charts a base pretrained first learned to read "
        "the images far more slowly than a fresh one (docs/deltarubric_planning.md).",
    )
    induction_pool: Literal["random", "task"] = Field(
        "random",
        description="The tokens the induction sequences are drawn from: 'random', a seeded sample of the tokenizer's "
        "ordinary tokens; 'task', the most frequent ones of the warm start's own texts (prompts and targets), so the "
        "copy forms on the embeddings the evidence lines use. As many as the induction task's pool either way.",
    )
    steps: int = Field(
        400, ge=0,
        description="SFT optimizer steps (their cost per step: docs/operations.md, \"DeltaRubric warm start\").",
    )
    batch_size: int = Field(16, ge=1, le=MAX_BATCH, description="Sequences per SFT step.")
    perception_images: int = Field(
        0,
        ge=0,
        description="Images per task rendered in memory for the worked-reading warm-up examples (read prompt -> the "
        "trace of the image's ground truth, the verifier's first line; seeded apart from every pair image). 0 = none.",
    )
    perception_steps: int = Field(
        0,
        ge=0,
        description="With perception_images: optimizer steps of a first phase on the reading examples alone (short "
        "sequences, about a fifth of a role example's cost), before the role examples. 0 = mix them into the role "
        "examples instead.",
    )
    perception_batch_size: int = Field(32, ge=1, le=MAX_BATCH, description="Sequences per step of the reading phase.")
    planner: bool = Field(True, description="Include planner examples (reference checklists from facts).")
    planner_target_noise: float = Field(
        0.0,
        ge=0,
        le=1,
        description="A start with room: the share of TRAIN pairs whose planner target is a non-separating checklist "
        "(checks on claims both responses agree on, targets.agreed_checks) instead of the reference checklist, so "
        "the warm-started planner separates the responses only part of the time and RL has checklists to improve. "
        "Drawn per pair from (seed, pair id); pairs with fewer than two agreed claims keep the reference; val and "
        "test are never touched. The verifier also executes that checklist (one more example, verdict by "
        "`noise_verdict`), so it is trained under both kinds of checklist. 0 = always the reference checklist (a "
        "planner that imitates ground-truth checklists: little room, most planner groups flat).",
    )
    noise_verdict: Literal["coin", "preferred"] = Field(
        "coin",
        description="With planner_target_noise: the verdict of the verifier's example under a non-separating "
        "checklist. 'coin': a coin flip seeded by (seed, pair id): its evidence lines favour neither response, so a "
        "verifier that follows what it is given cannot tell, and only a separating checklist makes it right (the "
        "planner's reward then varies with its checklist). 'preferred': the right verdict anyway, from the "
        "verifier's own reading (its checklist then changes nothing; the agreed-claims control stays high).",
    )
    evidence_form: Literal["keyed", "restated", "quoted"] = Field(
        "keyed",
        description="The verifier's evidence lines in its warm-start targets (targets.evidence_lines): 'keyed' = "
        "`<i>. image <key> = <v>, A <key> = <a> yes|no, B <key> = <b> yes|no -> <favours>`; 'restated' = the check's "
        "text first (`<i>. count the purple shapes. image purple = ...`), so the key is a few tokens back rather than "
        "in check i of the prompt (the wide pairs' 10 colours). 'quoted' = the verifier has a lookup tool "
        "(rubricflow.methods.deltarubric.lookup): the policy reads the image in a call of its own (the read prompt) "
        "and the verifier's prompt, in warm start, training and evaluation alike, quotes per check the checked key's "
        "value in that reading and in each response; the verifier writes no reading, restates each quote with every "
        "claim marked yes / no against the image's value, the favoured response, then the verdict. The planner and "
        "the no-rubric, static and reading judges are unchanged; the generative judge gets the same tool (it names 2-4 "
        "keys in a tool call, the tool appends their quotes, it marks them and gives the verdict), so it differs "
        "from DeltaRubric in the planner role only. All parse alike (one "
        "`... -> <favours>` line per check).",
    )
    evidence_tally: bool = Field(
        False,
        description="Each evidence line of the verifier's and the generative judge's targets ends with the running "
        "verdict of the lines so far (targets.tallied): `... -> neither, so far even`, `... -> A, so far A` (the "
        "response more lines favour up to there, `even` on a tie), so the final verdict copies the last line's tally "
        "where it names a response, and each tally is one step from the previous one and the line's favour, instead "
        "of a search over up to four lines from one token. The static judge's criteria lines are not evidence lines "
        "and stay as they are. False = the lines end at their favour (the targets of the code before the flag).",
    )
    verifier_variants: int = Field(
        1, ge=0, description="Extra verifier examples per pair with a shuffled / extended checklist."
    )
    no_rubric: bool = Field(True, description="Include no-rubric verdict examples (the baseline's format).")
    static: bool = Field(True, description="Include static-rubric examples (five fixed criteria).")
    reading: bool = Field(
        True,
        description="Include reading-judge examples (the verifier's worked reading, then the verdict; no checklist).",
    )
    generative: bool = Field(
        False,
        description="Include generative-judge examples (issue 39, item 3b; the paper's no-rubric baseline: its own "
        "reading lines of the keys where the responses disagree, one comparison line per key, then the verdict; no "
        "planner role, no checklist). Off by default so the main pipeline's warm start is unchanged; without them "
        "the `generative` judge mode is evaluated untaught.",
    )
    generative_order: Literal["fixed", "shuffled"] = Field(
        "fixed",
        description="The order of the generative judge's keys in its targets: 'fixed' = the facts' order "
        "(perception, intermediate, answer); 'shuffled' = drawn per pair and example from (seed, pair id), so the "
        "key order carries no position cue.",
    )
    equal_mode_examples: bool = Field(
        False,
        description="Every judge mode gets as many examples per pair as the verifier (1 + verifier_variants): the "
        "no-rubric, static, reading and generative judges, and the exhaustive mode (the verifier executing the "
        "static-exhaustive checklist, which otherwise has no examples). Variant v shows the responses swapped when v "
        "is odd (the verdict follows), and a shuffled generative order draws its keys anew per variant; a mode with "
        "nothing else to vary repeats an example. False = one example per pair and mode (the verifier gets "
        "1 + verifier_variants), as before: a control taught less by construction.",
    )
    bar_reading: float = Field(
        0.0, ge=0, le=1,
        description="Warm start to a bar (rubricflow.methods.deltarubric.bars): the val reading exactness to reach, "
        "the share of val pair images whose greedy read (read prompt) states every claim key of the facts right. "
        "0 = no reading bar. With every bar 0 the warm start is the fixed schedule (perception_steps, then steps).",
    )
    bar_oracle: float = Field(
        0.0, ge=0, le=1,
        description="Warm start to a bar: the val oracle-checklist accuracy to reach (the verifier given the "
        "reference checklist picks the preferred response, greedy). 0 = no oracle bar.",
    )
    bar_planner: float = Field(
        0.0, ge=0, le=1,
        description="Warm start to a bar, the last phase only (its examples add the planner's): the share of val "
        "pairs whose greedy planner output is a valid checklist of checks the task knows (every check one of the "
        "check templates, so the verifier and the lookup tool can execute it). 0 = no planner bar: the last phase "
        "then ends as soon as the reading and oracle bars hold, which can leave the planner a single block.",
    )
    bar_generative: float = Field(
        0.0, ge=0, le=1,
        description="Warm start to a bar, from the comparison phase on (its examples add the generative judge's): "
        "the generative control's counterpart of the oracle bar, the share of val pairs where the generative judge "
        "with the lookup tool, its tool call naming the reference checklist's keys, gives the preferred verdict "
        "(greedy). The control is then taught to execute a good choice of keys as far as the verifier is taught to "
        "execute a good checklist; its own choice is left to it, as the planner's is. Needs evidence_form quoted and "
        "generative. 0 = no generative bar.",
    )
    block_steps: int = Field(
        100, ge=1,
        description="With a bar: optimizer steps per block; the bars are measured on val after every block. Each "
        "block restarts the learning-rate schedule (warmup, then `schedule` to the block's end; fresh AdamW moments), "
        "so every measurement is of a cooled-down checkpoint.",
    )
    max_steps: int = Field(
        2000, ge=1, description="With a bar: the cap of each phase's steps (whole blocks; the last one may be cut)."
    )
    max_restarts: int = Field(
        2, ge=0,
        description="With a bar: a start that misses its bar at a phase's cap is restarted from a fresh base with "
        "init seed seed + 1000 * k (k = 1..max_restarts; every attempt is reported); after the last one the stage "
        "fails naming the bar, the value reached and the parameters to change. A policy loaded from init_from or "
        "models.policy.path keeps its weights: only the data order changes with the init seed.",
    )
    bar_pairs: int = Field(0, ge=0, description="With a bar: val pairs measured (0 = the whole val split).")
    verdict_weight: float = Field(
        1.0, ge=1.0, le=100.0,
        description="The SFT loss weight of the verdict token (the A or B after `verdict: ` that ends a judge's "
        "target, every judge mode alike); every other token weighs 1 and the loss is still divided by the token "
        "count. 1 = the plain mean. Above 1 for a verifier that writes its evidence lines right but ends on one "
        "constant verdict: the verdict is one token of a target of about a hundred.",
    )

    @model_validator(mode="after")
    def _quoted_reads(self) -> "DRSFTConfig":
        if self.evidence_form == "quoted" and self.perception_images <= 0:
            raise ValueError("evidence_form=quoted: the lookup tool quotes the policy's own reading, which only the "
                             "read task's examples teach (the verifier writes none); set perception_images > 0")
        if self.bar_generative > 0 and not (self.evidence_form == "quoted" and self.generative):
            raise ValueError("bar_generative: the generative judge's bar measures it with the lookup tool; set "
                             "evidence_form=quoted and generative=True, or bar_generative=0")
        return self


def _dr_grpo() -> GRPOConfig:
    """DeltaRubric's GRPO defaults (a partial ``deltarubric.train.grpo`` keeps them: rubricflow.sections.Section)."""
    return GRPOConfig(
        group_size=5,  # unused: a role's groups are the N checklists of a pair and the M verdicts of a checklist
        prompts_per_step=2, steps=20, lr=1e-3, scale_rewards="batch", loss_agg="grpo", max_new_tokens=128,
        checkpoint_every=0,
    )


class DRTrainConfig(Section):
    outputs = frozenset({"out_dir"})

    out_dir: str = Field("artifacts/deltarubric/policy", description="Where the GRPO-trained policy is saved.")
    n_checklists: int = Field(5, ge=1, le=MAX_GROUP, description="N: checklists sampled from the planner per pair.")
    m_verdicts: int = Field(5, ge=1, le=MAX_GROUP, description="M: checklist-guided verifier samples per checklist.")
    k_no_rubric: int = Field(
        5, ge=1, le=MAX_GROUP, description="K: no-rubric verdicts per pair, the baseline of both rewards (verifier "
        "verdict m is paired with no-rubric sample m mod K; K = M pairs each verdict with its own sample)."
    )
    judge: TrainedJudge = Field(
        "deltarubric",
        description="What GRPO trains: 'deltarubric' (planner + verifier, no-rubric verdicts sampled as the rewards' "
        "baseline), or one single-step judge mode alone (N*M verdicts per pair, reward = correctness, same steps, "
        "pairs and optimiser): the paper's trained baselines 'no_rubric' / 'static', or 'reading', the reading "
        "judge (the verifier's worked reading of the image, then the verdict, no checklist: the control for whether "
        "the checklist adds to the same reading).",
    )
    guidance_lambda: float = Field(
        0.4, ge=0, description="lambda of the verifier's guidance bonus (the paper's 0.4; sensitivity 0/0.2/0.4/0.6)."
    )
    guidance: Literal["paired", "pair_rate"] = Field(
        "paired",
        description="Verifier bonus (rubricflow.methods.deltarubric.rewards): 'paired' = lambda for a right guided "
        "verdict whose paired no-rubric verdict was wrong (varies within a group); 'pair_rate' = lambda * (1 - acc0) "
        "per right verdict (a per-group factor that group scaling cancels; the reading built first).",
    )
    planner_reward: Literal["improvement", "shift", "absolute"] = Field(
        "improvement",
        description="Planner quality (rubricflow.methods.deltarubric.rewards): 'improvement' = sign(acc_c - acc0), "
        "whether the checklist improves on the no-rubric judge (the paper's relative reward); 'shift' = acc_c - acc0 "
        "(the reading built first: group centring makes it identical to absolute); 'absolute' = acc_c (the ablation).",
    )
    algorithm: Literal["grpo", "dapo"] = Field(
        "grpo",
        description="Overrides grpo.loss_agg / clip: 'grpo' = per-sequence mean, symmetric clip (clip_low); "
        "'dapo' = token-mean loss with clip-higher (grpo.clip_high).",
    )
    planner_max_tokens: int = Field(40, ge=4, le=MAX_TOKENS, description="Completion cap of planner checklists.")
    verifier_max_tokens: int = Field(
        160, ge=4, le=MAX_TOKENS, description="Completion cap of verifier outputs (all judge modes; the worked reading "
        "and 4 evidence lines take up to 126 tokens on the tiny counting pairs)."
    )
    probe_every: int = Field(
        5, ge=0, description="Planner probe on validation pairs every N steps (0 = start and end only)."
    )
    probe_pairs: int = Field(16, ge=1, description="Validation pairs in the planner probe.")
    grpo: GRPOConfig = Field(
        default_factory=_dr_grpo,
        description="GRPO optimiser / engine settings. prompts_per_step = preference pairs per step; group_size is "
        "unused (a role's groups are the N checklists of a pair and the M verdicts of a checklist: n_checklists, "
        "m_verdicts); scale_rewards 'batch' centres per group and divides by the role's batch std, which keeps the "
        "guidance bonus effective (rubricflow.methods.deltarubric.rewards); loss_agg and the clip are set by "
        "`algorithm`; max_new_tokens is the dr_grpo normaliser.",
    )


class DREvalConfig(Section):
    out_dir: str = Field("artifacts/deltarubric/eval", description="Where evaluation tables (json) are written.")
    test_pairs: int = Field(0, ge=0, description="Held-out synthetic pairs evaluated (0 = the whole split).")
    split: Literal["test", "val"] = Field(
        "test",
        description="Split of the synthetic pairs a study unit is evaluated on: 'test' to report, 'val' to choose "
        "(a selection study, run under the test-split guard). The pipeline's eval stage reports on test.",
    )
    benchmarks: list[str] = Field(
        default_factory=list,
        description="Ingested benchmark pair directories (rubricflow ingest --format vlrewardbench|mmrewardbench) "
        "evaluated as well; a missing directory is an error.",
    )
    benchmark_limit: int = Field(0, ge=0, description="Pairs per benchmark (0 = all).")
    exhaustive: Literal["budget", "all"] = Field(
        "budget",
        description="The static-exhaustive judge mode (`exhaustive`: every claim key of the pair's task as a check, "
        "in the facts' fixed order, executed by the verifier; the control that isolates the planner): 'budget' = "
        "the first 4 checks, what a planner may write; 'all' = every key, beyond the planner's budget (a wide pair "
        "has up to 16 checks: raise train.verifier_max_tokens).",
    )
    batch_size: int = Field(64, ge=1, le=MAX_BATCH, description="Prompts per generate() call.")


class DeltaRubricConfig(Section):
    pairs: PairsConfig = Field(default_factory=PairsConfig, description="Synthetic preference pairs and their gate.")
    sft: DRSFTConfig = Field(default_factory=DRSFTConfig, description="Warm start on templated plans and verdicts.")
    train: DRTrainConfig = Field(default_factory=DRTrainConfig, description="Multi-role GRPO.")
    eval: DREvalConfig = Field(default_factory=DREvalConfig, description="Judge accuracy tables.")

    @property
    def verifier_quotes(self) -> bool:
        """Whether the verifier has the lookup tool (``sft.evidence_form: quoted``) wherever it runs."""
        return self.sft.evidence_form == "quoted"


def effective_grpo(cfg: DRTrainConfig) -> GRPOConfig:
    """The GRPO config the updater runs with: ``algorithm`` sets the loss aggregation and the clip range."""
    g = cfg.grpo.model_copy()
    if cfg.algorithm == "dapo":
        return g.model_copy(update={"loss_agg": "dapo"})
    return g.model_copy(update={"loss_agg": "grpo", "clip_high": g.clip_low})


def role_max_tokens(cfg: DRTrainConfig) -> dict[str, int]:
    """Completion caps per role (``planner``, ``verifier``), as rollouts, probes and evaluations pass them."""
    return {"planner": cfg.planner_max_tokens, "verifier": cfg.verifier_max_tokens}
