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
from rubricflow.hashing import content_hash
from rubricflow.methods.rucl.evaluate import evaluate_policies
from rubricflow.methods.rucl.train import TRAINING_CODE, run_training
from rubricflow.registry import StudyDecl
from rubricflow.stage import StageContext
from rubricflow.study.adapter import StudyMethod, Unit
from rubricflow.study.spec import Claim, Selection, StudySpec

EVAL_NAME = "policy"  # the name of the unit's checkpoint in rucl.eval_policies

# Held-out metrics of rubricflow.methods.rucl.evaluate.score_responses a study aggregates (accuracy/<task> are kept
# too); correct_but_flawed is the independent strict verifier, correct_but_flawed_rubric the reward judge's rate.
METRICS = ["accuracy", "correct_but_flawed", "correct_but_flawed_rubric", "s_f", "s_a"]


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
        "sft": Path(cfg.rucl.init_from) / "config.json",
        "stratify": Path(cfg.rucl.tiers_path),
    }


def input_parts(ucfg: Any, unit: Unit) -> dict[str, Any]:
    return {
        "config": {"rucl": ucfg.rucl.model_dump(mode="json"), "judge": ucfg.judge.essential_dump(),
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
        train = run_training(ucfg.rucl, ucfg.judge, ucfg.data, ucfg.generation, udir / "train", run=run,
                             seed=unit.seed, secret_resolver=secret_resolver)
    ev = evaluate_policies(ucfg.rucl, ucfg.judge, ucfg.data.out_dir, ucfg.generation, secret_resolver)
    return {"metrics": ev[EVAL_NAME], "eval_samples": ev["eval_samples"], "rubrics": ev["rubrics"], "train": train}


ADAPTER = StudyMethod(
    name="rucl",
    run_unit=run_unit,
    unit_overrides=unit_overrides,
    reserved_keys=("rucl.grpo.seed", "rucl.name", "rucl.out_dir", "rucl.checkpoint_dir", "rucl.eval_policies",
                   "rucl.eval_split"),
    shared_outputs=shared_outputs,
    input_parts=input_parts,
    # training, the judge, the evaluation and the independent verifier
    code=(*TRAINING_CODE, "rubricflow.judge", "rubricflow.evaluation", "rubricflow.trace_check"),
    sections=("rucl",),
    shared_hint="run the main pipeline first (`dvc repro rucl_eval` or `make run`): the data, the SFT model and the "
    "rubric tiers are shared by every unit",
)


# ----------------------------------------------------------------------------------------------------------------
# default studies


def rucl_spec() -> StudySpec:
    return StudySpec(
        method="rucl",
        variants={
            "sft": {},  # untrained: the SFT start, evaluated as is (see `untrained`)
            "outcome": {"rucl.reward.mode": "outcome"},
            "uniform": {"rucl.reward.mode": "uniform"},
            "rucl-sigmoid": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "sigmoid"},
            "rucl-linear": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "linear"},
            "shuffled": {"rucl.reward.mode": "rucl", "rucl.reward.shuffle_control": True},
        },
        untrained=["sft"],
        metrics=list(METRICS),
        claims=[
            Claim(a="rucl-sigmoid", b="outcome", metric="accuracy", direction="higher"),
            Claim(a="rucl-sigmoid", b="uniform", metric="accuracy", direction="higher"),
            Claim(a="rucl-sigmoid", b="outcome", metric="correct_but_flawed", direction="lower"),
            Claim(a="rucl-sigmoid", b="shuffled", metric="accuracy", direction="higher"),
        ],
        out_dir="artifacts/studies/rucl",
    )


# The tiny profile's GRPO learning rate and sampling temperature are chosen by this study, on val. A setting is one
# (lr, temperature) pair trained under both outcome-only and RuCL rewards, so the choice favours neither method.
# The grid first spanned 1e-4..1e-3; its best setting was its lowest lr, so it was extended downwards (3e-5, 1e-5)
# rather than stopping at the grid's edge.
TUNE_LRS = {"lr1e-5": 1e-5, "lr3e-5": 3e-5, "lr1e-4": 1e-4, "lr3e-4": 3e-4, "lr1e-3": 1e-3}


def rucl_tune_spec() -> StudySpec:
    variants: dict[str, dict[str, Any]] = {}
    grid = [(name, lr, 1.0) for name, lr in TUNE_LRS.items()] + [("lr3e-4-t0.7", 3e-4, 0.7)]
    for setting, lr, temp in grid:
        for mode in ("outcome", "rucl"):
            variants[f"{mode}-{setting}"] = {"rucl.reward.mode": mode, "rucl.grpo.lr": lr,
                                             "rucl.grpo.temperature": temp}
    settings: dict[str, list[str]] = {}
    for v in variants:
        settings.setdefault(v.split("-", 1)[1], []).append(v)
    return StudySpec(
        method="rucl",
        seeds=[11, 22, 33],
        variants=variants,
        metrics=["accuracy", "correct_but_flawed"],
        eval_split="val",
        selection=Selection(metric="accuracy", direction="higher", settings=settings),
        out_dir="artifacts/studies/rucl_tune",
    )


STUDIES = (
    StudyDecl("rucl", rucl_spec,
              "The RuCL study: SFT start, outcome-only, uniform rubrics, sigmoid and linear curriculum, and the "
              "shuffled-reward control, each trained from the shared SFT checkpoint once per seed."),
    StudyDecl("rucl_tune", rucl_tune_spec,
              "Chooses the tiny profile's GRPO lr (1e-5 .. 1e-3) and temperature (1.0; 0.7 at lr 3e-4) on val: each "
              "setting trained with outcome-only and RuCL rewards on seeds 11, 22, 33 (not the study's seeds), scored "
              "by mean val accuracy (`rubricflow study rucl_tune`; the winner is `selected` in "
              "reports/studies/rucl_tune.md)."),
)
