"""RuCL's study adapter and its default studies (``study.rucl``, ``study.rucl_tune``).

A unit trains from the shared SFT start with the variant's reward and curriculum (the same
:func:`rubricflow.methods.rucl.train.run_training` the ``rucl`` stage runs, so its resume key holds the judge
section), then scores the trained checkpoint with the final evaluation
(:func:`rubricflow.methods.rucl.evaluate.evaluate_policies`) on ``spec.eval_split``; an *untrained* variant (``sft``)
only evaluates its start checkpoint. The shared stages are not re-run per seed: the dataset, its validation stamp,
the SFT checkpoint and the rubric tiers come from the main pipeline's outputs (``dvc repro rucl_eval`` /
``make run``). Training checkpoints go under ``<rucl.checkpoint_dir>/../studies/<study>/<variant>/seed<k>/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricflow.data.validate import require_gate, stamp_path
from rubricflow.methods.rucl.curriculum import switch_tags
from rubricflow.methods.rucl.evaluate import evaluate_policies
from rubricflow.methods.rucl.train import TRAINING_CODE, log_train_inputs, run_training
from rubricflow.pipeline.stage import StageContext
from rubricflow.registry import StudyDecl
from rubricflow.study.adapter import SeedStart, StudyMethod, Unit
from rubricflow.study.spec import Claim, Precondition, Selection, StudySpec
from rubricflow.training.policy_start import build_base, warm_start
from rubricflow.util.hashing import content_hash

EVAL_NAME = "policy"  # the name of the unit's checkpoint in rucl.eval_policies

# Held-out metrics a RuCL study aggregates (rubricflow.methods.rucl.evaluate.evaluate_policies; the per-task and per
# question-type ones are kept in each unit's result too). Which read the reward's rubrics: s_f, s_a and
# correct_but_flawed_rubric come from the reward's judge and tiers (circular by construction); accuracy, the sampled
# readouts and diff_* from the answer alone; correct_but_flawed and clean_pass_at_k from the strict trace verifier,
# which shares no rubric or tier with the reward (it checks the same ground-truth facts some rubrics check).
METRICS = ["accuracy", "sampled_accuracy", "pass_at_k", "clean_pass_at_k", "diff_accuracy", "diff_sampled_accuracy",
           "correct_but_flawed", "correct_but_flawed_rubric", "s_f", "s_a", "switched", "switch_step"]


def unit_overrides(vcfg: Any, name: str, spec: StudySpec, unit: Unit, udir: Path) -> dict[str, Any]:
    out = str(udir / "model")
    policy = vcfg.rucl.init_from if unit.variant in spec.untrained else out
    return {
        # the GRPO trainer draws the prompt order, rollouts and minibatches from rucl.grpo.seed (the run-level `seed`
        # alone would leave every unit on the same trajectory: a study of one run, repeated)
        "rucl.grpo.seed": unit.seed,
        "rucl.name": "train",
        "rucl.out_dir": out,
        "rucl.checkpoint_dir": str(Path(vcfg.rucl.checkpoint_dir).parent / "studies" / name / unit.variant
                                   / f"seed{unit.seed}"),
        "rucl.eval_split": spec.eval_split,  # test for a reporting study, val for a selection study
        "rucl.eval_policies": {EVAL_NAME: policy},
    }


def shared_outputs(cfg: Any) -> dict[str, Path]:
    return {
        "data": Path(cfg.data.out_dir) / "manifest.json",
        "validate": stamp_path(cfg.reports_dir, cfg.data.out_dir),
        "rubrics": Path(cfg.rubrics.pool_path),
        "sft": Path(cfg.rucl.init_from) / "config.json",
        "stratify": Path(cfg.rucl.tiers_path),
    }


# ----------------------------------------------------------------------------------------------------------------
# a seed that covers the chain: its own base model, SFT warm start and tiers (study.<name>.per_seed_start)

def start_overrides(vcfg: Any, sdir: Path) -> dict[str, Any]:
    return {"rucl.init_from": str(sdir / "sft"), "rucl.tiers_path": str(sdir / "tiers.json")}


def start_inputs(ucfg: Any, seed: int) -> dict[str, Any]:
    return {"config": {"models": ucfg.models.essential_dump(), "sft": ucfg.sft.essential_dump(),
                       "rubrics": ucfg.rubrics.input_dump(),
                       "judge": ucfg.judge.essential_dump(), "generation": ucfg.generation.essential_dump(),
                       "data": ucfg.data.essential_dump()},
            "seed": seed, "data_set": content_hash(ucfg.data.out_dir), "pool": content_hash(ucfg.rubrics.pool_path)}


def build_start(ucfg: Any, seed: int, build_dir: Path, final_dir: Path) -> dict:
    """The seed's base model and SFT warm start (the foundation's recipe with the seed), then its tiers calibrated on
    that start (the stratify stage's recipe); returns the start's val accuracy per task and the tiers."""
    from rubricflow.methods.rucl.rubrics.build import stratify_pool

    build_base(ucfg.models, ucfg.data, build_dir / "base", seed)
    sft, _ = warm_start(ucfg.sft, ucfg.models, ucfg.data, ucfg.generation, build_dir / "base", build_dir / "sft", seed)
    rubrics = ucfg.rubrics.model_copy(update={"policy_path": str(build_dir / "sft"),
                                              "tiers_path": str(build_dir / "tiers.json"),
                                              "table_dir": str(build_dir / "rubrics")})
    strat = stratify_pool(rubrics, ucfg.judge, ucfg.data.out_dir, seed=seed)
    rows = strat.get("rows") or []
    tiers = {tier: "/".join(f"{r['id']}:{r['pass_rate']:.2f}" for r in rows if r.get("tier") == tier)
             for tier in ("foundational", "advanced")}
    return {**{f"sft_val_{k}": v for k, v in sft["accuracy_after"].items()},
            "tiers_foundational": tiers["foundational"], "tiers_advanced": tiers["advanced"],
            "pass_foundational": strat["metrics"].get("mean_pass_foundational"),
            "pass_advanced": strat["metrics"].get("mean_pass_advanced")}


SEED_START = SeedStart(overrides=start_overrides, inputs=start_inputs, build=build_start,
                       code=("rubricflow.training.policy_start", "rubricflow.training.sft",
                             "rubricflow.methods.rucl.rubrics", "rubricflow.judge", "models.tiny"))


def judge_identity(judge: Any) -> dict[str, Any]:
    """What of the judge decides a unit's rewards and verdicts: its essential settings, the server it asks (another
    server may serve another model under the same name) and the failure settings (which judgments count)."""
    return {**judge.essential_dump(), "server": judge.openai.base_url if judge.backend == "openai" else None,
            "failure": {"max_failed_frac": judge.max_failed_frac, "failure_window": judge.failure_window}}


def input_parts(ucfg: Any, unit: Unit) -> dict[str, Any]:
    return {
        "config": {"rucl": ucfg.rucl.model_dump(mode="json"), "judge": judge_identity(ucfg.judge),
                   "generation": ucfg.generation.essential_dump(), "data": ucfg.data.model_dump(mode="json")},
        "seed": unit.seed,
        "init_policy": content_hash(ucfg.rucl.init_from),
        "tiers": content_hash(ucfg.rucl.tiers_path),
        "data_set": content_hash(ucfg.data.out_dir),
    }


def run_unit(ucfg: Any, unit: Unit, udir: Path, run: Any, secret_resolver=None) -> dict:
    """One RuCL unit: train on the unit config (unless untrained), then the final evaluation on
    ``rucl.eval_split``."""
    ctx = StageContext.of(ucfg, run, secret_resolver)
    require_gate(ucfg.data, ctx.reports_dir)
    train = None
    if Path(ucfg.rucl.eval_policies[EVAL_NAME]) != Path(ucfg.rucl.init_from):
        log_train_inputs(run, ucfg.rucl, ucfg.data)
        train = run_training(ucfg.rucl, ucfg.judge, ucfg.data, ucfg.generation, udir / "train", run=run,
                             seed=unit.seed, secret_resolver=secret_resolver)
    run.set_tags(switch_tags((train or {}).get("transition_step")))  # an untrained variant never switched
    run.log_input(ucfg.data.out_dir, split=ucfg.rucl.eval_split, context="evaluation")
    ev = evaluate_policies(ucfg.rucl, ucfg.judge, ucfg.data.out_dir, ucfg.generation, secret_resolver)
    metrics = dict(ev[EVAL_NAME])
    metrics.update(start_calibration(ucfg.rucl.tiers_path))
    if train is not None:  # whether and when the curriculum switched (a seed without a switch is reported, not dropped)
        metrics["switched"] = float(train.get("transition_step") is not None)
        metrics["switch_step"] = train.get("transition_step")
        metrics["lambda_positive_share"] = train.get("lambda_positive_share")
        metrics["rubric_to_wrong"] = train.get("final/rubric_to_wrong")
        metrics["hacking_warning"] = float(bool((train.get("hacking") or {}).get("warn")))
        if ucfg.rucl.curriculum.peak == 0.0:  # lambda held at 0: the switch of any margin replays exactly
            metrics.update(margin_switches(udir / "train" / "steps.jsonl", ucfg.rucl.curriculum))
    return {"metrics": metrics, "eval_samples": ev["eval_samples"], "rubrics": ev["rubrics"], "train": train}


def start_calibration(tiers_path: str | Path) -> dict[str, float | None]:
    """The start's pass order from its tiers file (``rubricflow.methods.rucl.rubrics.stratify.pass_order``):
    ``start_pass_perception``, ``start_pass_deduction``, ``start_perception_first`` (1.0 / 0.0; None without both
    kinds) and ``start_tiers_perception_first``; None each for a tiers file written before it was recorded."""
    from rubricflow.methods.rucl.rubrics.pool import load_pool

    cal = load_pool(tiers_path).provenance.get("calibration") or {} if Path(tiers_path).exists() else {}
    return {"start_pass_perception": cal.get("mean_pass_perception"),
            "start_pass_deduction": cal.get("mean_pass_deduction"),
            "start_perception_first": cal.get("perception_first"),
            "start_tiers_perception_first": cal.get("tiers_perception_first")}


MARGIN_GRID = (0.02, 0.04, 0.06, 0.08, 0.10, 0.15)  # rucl_switch_tune: the relative threshold's candidate margins


def margin_metric(margin: float, window_test: str = "every") -> str:
    return f"switch_{'' if window_test == 'every' else 'mean_'}m{round(margin * 100):02d}"


def margin_switches(steps_jsonl: Path, curriculum: Any) -> dict[str, float | None]:
    """``switch_mXX`` / ``switch_mean_mXX``: the step a relative threshold with margin XX/100 switches at on this
    run's batch S_F series (:func:`rubricflow.methods.rucl.curriculum.switch_step`) under the window test ``every`` /
    ``mean``, for every margin of :data:`MARGIN_GRID`; None: never. Exact for a run with lambda held at 0
    (``peak = 0``), whose trajectory every margin shares up to its switch."""
    from rubricflow.methods.rucl.curriculum import switch_step
    from rubricflow.util.io import read_jsonl

    series = [r.get("curriculum/s_f_batch") for r in read_jsonl(steps_jsonl)]
    return {margin_metric(m, test): switch_step(series, curriculum, threshold_rule="relative", margin=m,
                                                window_test=test)
            for test in ("every", "mean") for m in MARGIN_GRID}


ADAPTER = StudyMethod(
    name="rucl",
    run_unit=run_unit,
    unit_overrides=unit_overrides,
    reserved_keys=("rucl.grpo.seed", "rucl.name", "rucl.out_dir", "rucl.checkpoint_dir", "rucl.eval_policies",
                   "rucl.eval_split"),
    shared_outputs=shared_outputs,
    input_parts=input_parts,
    # training, the judge, the evaluation and the independent verifier
    code=(*TRAINING_CODE, "rubricflow.judge", "rubricflow.evaluation.heldout", "rubricflow.evaluation.trace_check"),
    sections=("rucl",),
    shared_hint="run the main pipeline first (`dvc repro rucl_eval` or `make run`): the data and the rubric pool (and, "
    "unless the study builds a start per seed, the SFT model and the rubric tiers) are shared by every unit",
    seed_start=SEED_START,
)


# ----------------------------------------------------------------------------------------------------------------
# default studies


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
