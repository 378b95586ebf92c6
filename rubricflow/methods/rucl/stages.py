"""RuCL Phase II stages: GRPO with the curriculum (``rucl``), the outcome-only baseline (``rucl_outcome``, a
variant of ``rucl``) and the evaluation (``rucl_eval``). Thin bindings over ``rubricflow.methods.rucl.train`` and
``rubricflow.methods.rucl.evaluate``."""

from __future__ import annotations

from rubricflow.data.validate import require_gate
from rubricflow.judge.config import JudgeConfig
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.curriculum import switch_tags
from rubricflow.methods.rucl.evaluate import evaluate_policies
from rubricflow.methods.rucl.train import log_train_inputs, run_training
from rubricflow.pipeline.stage import StageContext, stage
from rubricflow.sections import DataConfig, GenerationConfig

# MLflow names of the training stage's end-of-run metrics that are not train/ (rubricflow.tracking.names): the
# accuracy tracked during training is on val (choose on val; rucl_eval reports test)
TRAIN_METRIC_NAMES = {
    "accuracy_before/": "val/accuracy_before/", "accuracy_after/": "val/accuracy_after/",
    "sampled_before/": "val/sampled_before/", "sampled_after/": "val/sampled_after/",
    "judge_failures_total": "judge/failures_total",
    "lambda_final": "curriculum/lambda_final", "transition_step": "curriculum/transition_step",
}


@stage("rucl", aliases=("train",), retries=3, judge=True, resumable=True, report_name=lambda cfg: cfg.rucl.name,
       metric_ns="train", metric_names=TRAIN_METRIC_NAMES)
def train_stage(
    rucl: RuCLConfig, judge: JudgeConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """RuCL Phase II: GRPO with the hybrid reward and the performance-triggered curriculum."""
    require_gate(data, ctx.reports_dir)
    log_train_inputs(ctx.run, rucl, data)
    out = run_training(rucl, judge, data, generation, ctx.reports_dir / rucl.name, run=ctx.run, seed=ctx.seed,
                       secret_resolver=ctx.secret_resolver)
    ctx.run.set_tags(switch_tags(out.get("transition_step")))
    return out


outcome_stage = train_stage.variant(
    "rucl_outcome",
    {"rucl.name": "rucl_outcome", "rucl.reward.mode": "outcome", "rucl.out_dir": "artifacts/models/rucl_outcome"},
    doc="The outcome-only GRPO baseline (alpha = 1, no judge): same seed, steps and prompts as `rucl`.",
)


@stage("rucl_eval", retries=3, judge=True, reads_test=True, metric_ns="test")
def eval_stage(
    rucl: RuCLConfig, judge: JudgeConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """Held-out accuracy, rubric pass rates and the correct-but-flawed rate: SFT vs the RL policies."""
    ctx.run.log_input(data.out_dir, split=rucl.eval_split, context="evaluation")
    return evaluate_policies(rucl, judge, data.out_dir, generation, ctx.secret_resolver)
