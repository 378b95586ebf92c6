"""RuCL Phase II stages: GRPO with the curriculum (``rucl``), the outcome-only baseline (``rucl_outcome``, a
variant of ``rucl``) and the evaluation (``rucl_eval``). Thin bindings over ``rubricflow.methods.rucl.train`` and
``rubricflow.methods.rucl.evaluate``."""

from __future__ import annotations

from rubricflow.data.validate import require_gate
from rubricflow.judge.config import JudgeConfig
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.evaluate import evaluate_policies
from rubricflow.methods.rucl.train import log_train_inputs, run_training
from rubricflow.sections import DataConfig, GenerationConfig
from rubricflow.stage import StageContext, stage


@stage("rucl", aliases=("train",), retries=3, judge=True, resumable=True, report_name=lambda cfg: cfg.rucl.name)
def train_stage(
    rucl: RuCLConfig, judge: JudgeConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """RuCL Phase II: GRPO with the hybrid reward and the performance-triggered curriculum."""
    require_gate(data, ctx.reports_dir)
    log_train_inputs(ctx.run, rucl, data)
    return run_training(rucl, judge, data, generation, ctx.reports_dir / rucl.name, run=ctx.run, seed=ctx.seed,
                        secret_resolver=ctx.secret_resolver)


outcome_stage = train_stage.variant(
    "rucl_outcome",
    {"rucl.name": "rucl_outcome", "rucl.reward.mode": "outcome", "rucl.out_dir": "artifacts/models/rucl_outcome"},
    doc="The outcome-only GRPO baseline (alpha = 1, no judge): same seed, steps and prompts as `rucl`.",
)


@stage("rucl_eval", retries=3, judge=True, reads_test=True)
def eval_stage(
    rucl: RuCLConfig, judge: JudgeConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """Held-out accuracy, rubric pass rates and the correct-but-flawed rate: SFT vs the RL policies."""
    ctx.run.log_input(data.out_dir, split=rucl.eval_split, context="evaluation")
    return evaluate_policies(rucl, judge, data.out_dir, generation, ctx.secret_resolver)
