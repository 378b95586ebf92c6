"""DeltaRubric pipeline stages: pairs -> sft -> train -> eval.

Each is a ``@stage`` (``rubricflow.pipeline.stage``: MLflow child run, ``reports/<name>.json``) taking the
``deltarubric`` section (and the shared ones it reads), run by the CLI (``rubricflow deltarubric-<stage>``), dvc.yaml
and the Prefect flow. Each binds its sections to the logic (imported when the stage runs: it loads torch):

* ``deltarubric_pairs``  ``synthetic.write_pair_set``: ``deltarubric.pairs.out_dir`` (parquet + images), gated by
                         ``validate_pairs``; its report adds ``planning.checklist_room`` (the separating shares of
                         the exhaustive, reference and random checklists: does the planner have something to choose);
* ``deltarubric_sft``    ``warmstart.warm_start``: the tiny base model (``sft.base_dir``, tokenizer trained on
                         DeltaRubric's texts) and the warm-started policy (``sft.out_dir``); the loss curve
                         (``reports/plots/deltarubric_sft_loss.json``);
* ``deltarubric_train``  ``train.run_training``: the multi-role GRPO policy (``train.out_dir``) and its curves
                         (``reports/plots/deltarubric_train.json``: per-step role metrics and the planner probe);
* ``deltarubric_eval``   ``evaluate.evaluate_policies``: the judge tables (every mode of ``modes.MODES``) of the
                         SFT and trained policies on the held-out synthetic pairs and every benchmark in
                         ``eval.benchmarks`` (``eval.out_dir/eval.json``).

Training, warm start and evaluation refuse pairs that fail the data gate.
"""

from __future__ import annotations

from pathlib import Path

from rubricflow.data.pairs import read_pairs, validate_pairs
from rubricflow.methods.deltarubric.config import DeltaRubricConfig
from rubricflow.pipeline.stage import StageContext, stage
from rubricflow.sections import GenerationConfig, ModelsConfig


def _gate(dr: DeltaRubricConfig) -> None:
    """Fail before any training if the pairs are missing or fail the data gate."""
    validate_pairs(Path(dr.pairs.out_dir), balance_tol=dr.pairs.balance_tol)


def log_train_inputs(run, dr: DeltaRubricConfig) -> None:
    """Log the pairs training reads to ``run`` as MLflow inputs: train, and val (the planner probe)."""
    run.log_input(dr.pairs.out_dir, split="train", context="training")
    run.log_input(dr.pairs.out_dir, split="val", context="evaluation")


def _checkpoint_dir(ctx: StageContext) -> Path:
    """One checkpoint root per seed; what it was trained on is checked by ``train.resume_parts`` (``key.json``)."""
    return ctx.artifacts_dir / "deltarubric" / "checkpoints" / f"train-seed{ctx.seed}"


@stage("deltarubric_pairs", reads_test=True)
def pairs_stage(deltarubric: DeltaRubricConfig, ctx: StageContext) -> dict:
    """Generate the synthetic preference pairs and run the data gate before publishing them."""
    from rubricflow.methods.deltarubric.planning import checklist_room
    from rubricflow.methods.deltarubric.synthetic import write_pair_set

    out = write_pair_set(deltarubric.pairs)
    return {**out, "checklist_room": checklist_room(read_pairs(deltarubric.pairs.out_dir))}


@stage("deltarubric_sft", retries=1, metric_ns="train")
def sft_stage(deltarubric: DeltaRubricConfig, models: ModelsConfig, ctx: StageContext, log_fn=None) -> dict:
    """Warm start on templated plans / verdicts from facts (the judge table after SFT is part of the eval stage)."""
    from rubricflow.methods.deltarubric.warmstart import warm_start

    _gate(deltarubric)
    ctx.run.log_input(deltarubric.pairs.out_dir, split="train", context="training")
    return warm_start(deltarubric, models, ctx.seed, ctx.reports_dir, ctx.run, log_fn=log_fn)


@stage("deltarubric_train", retries=3, resumable=True, outputs=("deltarubric.train.out_dir",), metric_ns="train")
def train_stage(
    deltarubric: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, ctx: StageContext, log_fn=None
) -> dict:
    """Multi-role GRPO from the SFT checkpoint; saves the policy and the per-step role metrics."""
    from rubricflow.methods.deltarubric.train import run_training

    _gate(deltarubric)
    log_train_inputs(ctx.run, deltarubric)
    return run_training(deltarubric, models, generation, ctx.seed, _checkpoint_dir(ctx), ctx.reports_dir, ctx.run,
                        log_fn=log_fn)


@stage("deltarubric_eval", retries=2, judge=True, reads_test=True, metric_ns="test")
def eval_stage(
    deltarubric: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """Judge accuracy in every mode (no-rubric / static / DeltaRubric / oracle / the agreed-claims control) of the
    SFT and the trained policy on the held-out synthetic pairs and every configured benchmark; writes the tables and
    prints them."""
    from rubricflow.methods.deltarubric.evaluate import eval_pair_sets, evaluate_policies

    _gate(deltarubric)
    for d, split, _ in eval_pair_sets(deltarubric).values():
        ctx.run.log_input(d, split=split, context="evaluation")
    return evaluate_policies(deltarubric, models, generation)

