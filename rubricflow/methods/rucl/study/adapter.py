"""RuCL's study adapter: what a unit of a RuCL study runs.

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
from rubricflow.methods.rucl.curriculum import switch_step, switch_tags
from rubricflow.methods.rucl.evaluate import evaluate_policies
from rubricflow.methods.rucl.rubrics.pool import load_pool
from rubricflow.methods.rucl.study.seed_start import SEED_START
from rubricflow.methods.rucl.study.specs import MARGIN_GRID, margin_metric
from rubricflow.methods.rucl.train import TRAINING_CODE, log_train_inputs, run_training
from rubricflow.pipeline.stage import StageContext
from rubricflow.study.adapter import StudyMethod, Unit
from rubricflow.study.spec import StudySpec
from rubricflow.util.hashing import content_hash
from rubricflow.util.io import read_jsonl

EVAL_NAME = "policy"  # the name of the unit's checkpoint in rucl.eval_policies


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
    cal = load_pool(tiers_path).provenance.get("calibration") or {} if Path(tiers_path).exists() else {}
    return {"start_pass_perception": cal.get("mean_pass_perception"),
            "start_pass_deduction": cal.get("mean_pass_deduction"),
            "start_perception_first": cal.get("perception_first"),
            "start_tiers_perception_first": cal.get("tiers_perception_first")}


def margin_switches(steps_jsonl: Path, curriculum: Any) -> dict[str, float | None]:
    """``switch_mXX`` / ``switch_mean_mXX``: the step a relative threshold with margin XX/100 switches at on this
    run's batch S_F series (:func:`rubricflow.methods.rucl.curriculum.switch_step`) under the window test ``every`` /
    ``mean``, for every margin of :data:`MARGIN_GRID`; None: never. Exact for a run with lambda held at 0
    (``peak = 0``), whose trajectory every margin shares up to its switch."""
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
