"""RuCL's default studies (``study.rucl``, ``study.rucl_tune``, the GRPO canary, the switch and GRPO tunes and
``study.rucl_intended``): their variants, claims and preconditions, and the grids and chosen values of the tunes, each
next to the rule that chose it. Every value a default study is built from is defined here (the ``params`` stage
depends on this module: ``rubricflow.config.config_sources``)."""

from __future__ import annotations

from typing import Any

from rubricflow.registry import StudyDecl
from rubricflow.study.spec import Claim, Precondition, Selection, StudySpec

# Held-out metrics a RuCL study aggregates (rubricflow.methods.rucl.evaluate.evaluate_policies; the per-task and per
# question-type ones are kept in each unit's result too). Which read the reward's rubrics: s_f, s_a and
# correct_but_flawed_rubric come from the reward's judge and tiers (circular by construction); accuracy, the sampled
# readouts and diff_* from the answer alone; correct_but_flawed and clean_pass_at_k from the strict trace verifier,
# which shares no rubric or tier with the reward (it checks the same ground-truth facts some rubrics check).
METRICS = ["accuracy", "sampled_accuracy", "pass_at_k", "clean_pass_at_k", "diff_accuracy", "diff_sampled_accuracy",
           "correct_but_flawed", "correct_but_flawed_rubric", "s_f", "s_a", "switched", "switch_step"]


MARGIN_GRID = (0.02, 0.04, 0.06, 0.08, 0.10, 0.15)  # rucl_switch_tune: the relative threshold's candidate margins


def margin_metric(margin: float, window_test: str = "every") -> str:
    return f"switch_{'' if window_test == 'every' else 'mean_'}m{round(margin * 100):02d}"


def rucl_spec() -> StudySpec:
    """The RuCL study: every seed trains its own start (base model, SFT warm start, tiers), shared by its variants.
    Claims fixed before any run (issue: "RL that visibly learns")."""
    return StudySpec(
        method="rucl",
        variants={
            "sft": {},  # untrained: the seed's own SFT start, evaluated as is
            "outcome": {"rucl.reward.mode": "outcome"},
            "uniform": {"rucl.reward.mode": "uniform"},
            "rucl-sigmoid": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "sigmoid"},
            "rucl-linear": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "linear"},
            # control: the RuCL rewards permuted within each batch (the reward-response link broken)
            "permuted": {"rucl.reward.mode": "rucl", "rucl.reward.shuffle_control": True},
        },
        untrained=["sft"],
        metrics=list(METRICS),
        claims=[
            Claim(a="rucl-sigmoid", b="sft", metric="sampled_accuracy", direction="higher"),
            Claim(a="rucl-sigmoid", b="sft", metric="accuracy", direction="higher"),
            Claim(a="outcome", b="sft", metric="sampled_accuracy", direction="higher"),
            Claim(a="rucl-sigmoid", b="outcome", metric="correct_but_flawed", direction="lower"),
            Claim(a="rucl-sigmoid", b="outcome", metric="accuracy", direction="higher", margin=0.01),
            Claim(a="rucl-sigmoid", b="uniform", metric="sampled_accuracy", direction="higher"),
            Claim(a="rucl-sigmoid", b="outcome", metric="diff_sampled_accuracy", direction="higher"),
            Claim(a="rucl-sigmoid", b="permuted", metric="sampled_accuracy", direction="higher"),
        ],
        # the curriculum is what RuCL adds to the uniform rubric reward: without a switch that leaves room for updates
        # under lambda > 0, "RuCL > uniform" tests nothing
        preconditions=[Precondition(
            name="curriculum engages", variant="rucl-sigmoid", metric="switch_step", direction="lower",
            threshold=39, min_share=0.8, gates=["rucl-sigmoid vs uniform (sampled_accuracy)"],
            description="lambda_t > 0 for at least a third of the 60 GRPO steps: the switch at step 39 or earlier "
            "(lambda acts from the step after it; a switch at the last step is no switch), on at least 4 of 5 seeds; "
            "a seed with no switch does not meet it")],
        per_seed_start=True,
        out_dir="artifacts/studies/rucl",
    )


# The tiny profile's GRPO lr (and passes per rollout batch) are chosen by this study, on val, by a rule fixed before
# any run: the score is the mean val *sampled* accuracy (the RL objective) over outcome-only and RuCL rewards (so the
# choice favours neither), and a setting is eligible only if its greedy val accuracy stays within 0.02 of the SFT
# start's (RL may not buy sampled accuracy by breaking the mode). The grid holds lrs where the engine learns on this
# budget (the canary's 3e-4) and one on each side; ties go to the first setting listed (the lower lr).
TUNE_SETTINGS = {"lr1e-4": {"rucl.grpo.lr": 1e-4}, "lr3e-4": {"rucl.grpo.lr": 3e-4},
                 "lr1e-3": {"rucl.grpo.lr": 1e-3},
                 "lr3e-4-ep2": {"rucl.grpo.lr": 3e-4, "rucl.grpo.inner_epochs": 2}}


def tune_variants(tune: dict[str, dict[str, Any]], base: dict[str, Any] | None = None
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """A tune's variants and its selection's settings: the untrained ``sft`` start, then each setting trained with
    the outcome-only and the RuCL reward (``<mode>-<setting>``, so the choice favours neither), all over ``base``."""
    base = dict(base or {})
    variants: dict[str, dict[str, Any]] = {"sft": dict(base)}
    settings: dict[str, list[str]] = {}
    for setting, over in tune.items():
        for mode in ("outcome", "rucl"):
            variants[f"{mode}-{setting}"] = {**base, "rucl.reward.mode": mode, **over}
            settings.setdefault(setting, []).append(f"{mode}-{setting}")
    return variants, settings


def rucl_tune_spec() -> StudySpec:
    variants, settings = tune_variants(TUNE_SETTINGS)
    return StudySpec(
        method="rucl",
        seeds=[11, 22],
        variants=variants,
        untrained=["sft"],
        metrics=["sampled_accuracy", "accuracy", "pass_at_k", "correct_but_flawed"],
        eval_split="val",
        selection=Selection(metric="sampled_accuracy", direction="higher", settings=settings,
                            guard_metric="accuracy", guard_baseline="sft", guard_margin=0.02),
        out_dir="artifacts/studies/rucl_tune",
    )


def grpo_canary_spec() -> StudySpec:
    """Does GRPO learn on this budget? Outcome-only GRPO on a small fixed prompt set (16 per task), scored on those
    prompts (sampled, the training temperature), against the same run with the rewards permuted within the batch."""
    canary = {"rucl.reward.mode": "outcome", "rucl.train_limit": 16, "rucl.grpo.lr": 3e-4, "rucl.grpo.steps": 40,
              "rucl.grpo.prompts_per_step": 8}
    return StudySpec(
        method="rucl",
        variants={"start": {"rucl.train_limit": 16}, "real": canary,
                  "permuted": {**canary, "rucl.reward.shuffle_control": True}},
        untrained=["start"],
        metrics=["sampled_accuracy", "accuracy", "pass_at_k", "sampled_accuracy/counting", "sampled_accuracy/barchart"],
        claims=[Claim(a="real", b="start", metric="sampled_accuracy", direction="higher"),
                Claim(a="real", b="permuted", metric="sampled_accuracy", direction="higher")],
        eval_split="train",
        out_dir="artifacts/studies/grpo_canary",
    )


# ----------------------------------------------------------------------------------------------------------------
# RuCL as the paper intends: perception-first tiers, a curriculum that engages, GRPO with a KL term, an outcome-gated
# variant, the hacking monitor and the answer-relevant readout. Every unit of these studies (and every seed's start)
# reads the tiers perception-first and switches on the start-relative threshold; the values chosen on val are written
# next to the rule that chose them, and the rule was written before its runs.

INTENDED_STEPS = 150  # the GRPO budget of the intended studies, fixed before any run
INTENDED_BASE: dict[str, Any] = {"rubrics.tier_rule": "kind", "rucl.curriculum.threshold_rule": "relative",
                                 "rucl.curriculum.window_test": "mean", "rucl.grpo.steps": INTENDED_STEPS}
SWITCH_BY = INTENDED_STEPS // 3  # the tune's rule: a margin whose switch leaves >= 2/3 of the budget to lambda > 0


def rucl_switch_tune_spec() -> StudySpec:
    """Chooses the relative threshold's margin on val seeds. One run per seed holds lambda at 0 (``peak = 0``) for
    the whole budget; every margin of :data:`MARGIN_GRID` has the same trajectory up to its own switch, so each
    unit reports the step each margin would switch at under both window tests (``switch_mXX``: every score of the
    window; ``switch_mean_mXX``: the window's mean; exact). The rule: the largest margin whose switch comes by step
    :data:`SWITCH_BY` (a third of the budget) on every tune seed; a larger margin asks for more evidence that the
    foundational tier improved, and the switch must still leave most of the budget to the advanced tier (the study's
    precondition asks for lambda > 0 on at least a third of the steps). Written first for the paper's window test
    (every score); on seeds 11 and 22 its replays left no margin in the rule (seed 11: 0.02 switched at step 60;
    batch S_F moves by about +-0.09 from step to step at 128 responses), so the rule was revised, after seeing them,
    to the window's mean (docs/rucl_intended.md); the intended study then confirms on fresh seeds."""
    held = {**INTENDED_BASE, "rucl.reward.mode": "rucl", "rucl.curriculum.peak": 0.0}
    return StudySpec(
        method="rucl",
        seeds=[11, 22, 33],
        variants={"held": held},
        untrained=[],
        metrics=[margin_metric(m, t) for t in ("every", "mean") for m in MARGIN_GRID] + [
            "start_pass_perception", "start_pass_deduction", "start_perception_first", "accuracy",
            "sampled_accuracy", "relevant_flaw_rate"],
        eval_split="val",
        per_seed_start=True,
        out_dir="artifacts/studies/rucl_switch_tune",
    )


# The margin chosen by rucl_switch_tune's rule (reports/studies/rucl_switch_tune.md): the window-mean switch by step 50
# on seeds 11, 22, 33 holds for 0.02 (steps 15, 15, 6) and 0.04 (28, 19, 45), not for 0.06 (seed 33: 83).
INTENDED_MARGIN = 0.04
# One setting at a time from the current GRPO (no KL, group std): the KL term at the GRPO paper's weight, and batch-std
# advantages (RoRo's and DeltaRubric's choice); the interaction is not tuned (the CPU budget of a tune).
GRPO_SETTINGS = {"kl0-group": {"rucl.grpo.beta": 0.0, "rucl.grpo.scale_rewards": "group"},
                 "kl04-group": {"rucl.grpo.beta": 0.04, "rucl.grpo.scale_rewards": "group"},
                 "kl0-batch": {"rucl.grpo.beta": 0.0, "rucl.grpo.scale_rewards": "batch"}}


def rucl_grpo_tune_spec() -> StudySpec:
    """Chooses the KL weight and the advantage scaling on val seeds 11, 22 with the intended configuration
    (perception-first tiers, the tuned margin, 150 steps). The rule, written before the runs, is rucl_tune's: each
    setting trained with outcome-only and RuCL rewards (so the choice favours neither), scored by the mean val sampled
    accuracy (the RL objective), eligible only if its greedy val accuracy stays within 0.02 of the SFT start's; ties
    go to the first setting listed (the current one)."""
    variants, settings = tune_variants(GRPO_SETTINGS, {**INTENDED_BASE, "rucl.curriculum.margin": INTENDED_MARGIN})
    return StudySpec(
        method="rucl",
        seeds=[11, 22],
        variants=variants,
        untrained=["sft"],
        metrics=["sampled_accuracy", "accuracy", "relevant_flaw_rate", "lambda_positive_share", "switch_step",
                 "rubric_to_wrong", "start_perception_first"],
        eval_split="val",
        selection=Selection(metric="sampled_accuracy", direction="higher", settings=settings,
                            guard_metric="accuracy", guard_baseline="sft", guard_margin=0.02),
        per_seed_start=True,
        out_dir="artifacts/studies/rucl_switch_tune",  # the tune seeds' starts, built once
    )


# The lr, KL weight and advantage scaling, chosen on val before any unit of this study ran (docs/rucl_intended.md):
# at lr 1e-4 no setting of rucl_grpo_tune kept greedy val accuracy within 0.02 of the start's; lr 3e-5 did
# (reports/studies/rucl_lr_tune.md), and at 3e-5 the rule picked beta 0.04 with group std
# (reports/studies/rucl_grpo_tune-lr3e-5.md; the three settings' scores within 0.004).
INTENDED_LR = 3e-5
INTENDED_BETA = 0.04
INTENDED_SCALE = "group"
INTENDED = {**INTENDED_BASE, "rucl.curriculum.margin": INTENDED_MARGIN, "rucl.grpo.lr": INTENDED_LR,
            "rucl.grpo.beta": INTENDED_BETA, "rucl.grpo.scale_rewards": INTENDED_SCALE}
INTENDED_METRICS = ["relevant_flaw_rate", "accuracy", "sampled_accuracy", "pass_at_k", "clean_pass_at_k",
                    "correct_but_flawed", "correct_but_flawed_relevant", "diff_sampled_accuracy", "s_f", "s_a",
                    "lambda_positive_share", "switch_step", "rubric_to_wrong", "hacking_warning",
                    "start_perception_first", "start_pass_perception", "start_pass_deduction"]


def rucl_intended_spec() -> StudySpec:
    """RuCL as the paper intends, pre-registered before any of its runs: perception-first tiers on each seed's own
    start, the start-relative switch, GRPO with the tuned KL weight and advantage scaling, 150 steps. Variants differ
    from ``rucl`` in one thing each: the reward (outcome-only, uniform rubrics), the schedule (foundational-only:
    lambda held at 0, which separates the schedule from the tiers' content), the gate (correct_only, beyond the
    paper) or the reward-response link (permuted). Claims (Holm): RuCL leaves fewer right-for-the-wrong-reasons
    answers than outcome-only (answer-relevant flaw rate), costs at most 0.01 of greedy accuracy against it, beats
    foundational-only and uniform in sampled accuracy, and the gate lowers the flaw rate. Preconditions: the tiers
    are perception-first (the start passes perception before deduction) on >= 4 of 5 seeds, gating every claim;
    the curriculum engages (lambda > 0 on >= 1/3 of the steps) on >= 4 of 5 seeds, gating the schedule claims."""
    rucl = {**INTENDED, "rucl.reward.mode": "rucl"}
    schedule = ["rucl vs foundational-only (sampled_accuracy)", "rucl vs uniform (sampled_accuracy)"]
    claims = [Claim(a="rucl", b="outcome", metric="relevant_flaw_rate", direction="lower"),
              Claim(a="rucl", b="outcome", metric="accuracy", direction="higher", margin=0.01),
              Claim(a="rucl", b="foundational-only", metric="sampled_accuracy", direction="higher"),
              Claim(a="rucl", b="uniform", metric="sampled_accuracy", direction="higher"),
              Claim(a="rucl-gated", b="rucl", metric="relevant_flaw_rate", direction="lower")]
    return StudySpec(
        method="rucl",
        seeds=[1111, 2222, 3333, 4444, 5555],
        variants={
            "sft": dict(INTENDED),
            "outcome": {**INTENDED, "rucl.reward.mode": "outcome"},
            "uniform": {**INTENDED, "rucl.reward.mode": "uniform"},
            "rucl": rucl,
            "rucl-gated": {**rucl, "rucl.reward.gate": "correct_only"},
            "foundational-only": {**rucl, "rucl.curriculum.peak": 0.0},
            "permuted": {**rucl, "rucl.reward.shuffle_control": True},
        },
        untrained=["sft"],
        metrics=list(INTENDED_METRICS),
        claims=claims,
        preconditions=[
            Precondition(name="tiers perception-first", variant="rucl", metric="start_perception_first",
                         direction="higher", threshold=1.0, min_share=0.8, gates=[c.key for c in claims],
                         description="the seed's start passes perception rubrics more often than deduction rubrics "
                         "on its calibration samples (so perception-first tiers are the paper's order, not imposed), "
                         "on at least 4 of 5 seeds"),
            Precondition(name="curriculum engages", variant="rucl", metric="lambda_positive_share",
                         direction="higher", threshold=1 / 3, min_share=0.8, gates=schedule,
                         description="lambda_t > 0 on at least a third of the 150 GRPO steps (a switch at the last "
                         "step is no switch), on at least 4 of 5 seeds"),
        ],
        per_seed_start=True,
        out_dir="artifacts/studies/rucl_intended",
    )


STUDIES = (
    StudyDecl("rucl", rucl_spec,
              "The RuCL study: SFT start, outcome-only, uniform rubrics, sigmoid and linear curriculum, and the "
              "permuted-reward control; every seed trains its own start (base model, SFT, tiers), shared by its "
              "variants."),
    StudyDecl("grpo_canary", grpo_canary_spec,
              "The GRPO canary (`rubricflow study grpo_canary`): outcome-only GRPO on 32 fixed prompts against the "
              "same run with permuted rewards; sampled accuracy on those prompts before and after."),
    StudyDecl("rucl_switch_tune", rucl_switch_tune_spec,
              "Chooses the start-relative curriculum threshold's margin on val seeds 11, 22, 33: lambda held at 0 "
              "for the 150-step budget, every margin's switch step replayed from the run; the largest margin that "
              "switches by step 50 on every seed (perception-first tiers)."),
    StudyDecl("rucl_grpo_tune", rucl_grpo_tune_spec,
              "Chooses the KL weight (0 or 0.04) and the advantage scaling (group or batch std) on val seeds 11, 22 "
              "with perception-first tiers and the tuned switch: each setting with outcome-only and RuCL rewards, "
              "the best mean val sampled accuracy among those whose greedy val accuracy stays within 0.02 of the "
              "start's."),
    StudyDecl("rucl_intended", rucl_intended_spec,
              "RuCL as the paper intends (pre-registered, seeds 1111-5555; a second set by --seeds): perception-first "
              "tiers on each seed's start, the start-relative switch, 150 steps; sft, outcome-only, uniform, RuCL, "
              "RuCL gated, foundational-only and permuted; claims on the answer-relevant flaw rate, greedy accuracy "
              "and sampled accuracy, gated by the tiers' pass order and the curriculum engaging."),
    StudyDecl("rucl_tune", rucl_tune_spec,
              "Chooses the tiny profile's GRPO lr (1e-4, 3e-4, 1e-3; 3e-4 with two passes per batch) on val: each "
              "setting trained with outcome-only and RuCL rewards on seeds 11, 22 (not the study's seeds), scored by "
              "mean val sampled accuracy, eligible only with greedy val accuracy within 0.02 of the SFT start "
              "(`rubricflow study rucl_tune`; the winner is `selected` in reports/studies/rucl_tune.md)."),
)
