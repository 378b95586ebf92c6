"""RuCL Phase II stages: GRPO with the curriculum (``rucl``), the outcome-only baseline (``rucl_outcome``, a
variant of ``rucl``) and the evaluation (``rucl_eval``). Thin bindings over ``rubricflow.methods.rucl.train`` and
``rubricflow.methods.rucl.evaluate``."""

from __future__ import annotations

from pathlib import Path

from rubricflow.data.validate import require_gate
from rubricflow.judge.config import JudgeConfig
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.sections import DataConfig, GenerationConfig
from rubricflow.stage import StageContext, stage


@stage("rucl", aliases=("train",), retries=3, judge=True, resumable=True, report_name=lambda cfg: cfg.rucl.name)
def train_stage(
    rucl: RuCLConfig, judge: JudgeConfig, data: DataConfig, generation: GenerationConfig, ctx: StageContext
) -> dict:
    """RuCL Phase II: GRPO with the hybrid reward and the performance-triggered curriculum."""
    from rubricflow.methods.rucl.rubrics.pool import load_tiers
    from rubricflow.methods.rucl.train import train_rucl

    require_gate(data, ctx.reports_dir)
    backend, rubrics = None, []
    if rucl.reward.mode != "outcome" or Path(rucl.tiers_path).exists():
        rubrics = load_tiers(rucl.tiers_path)
    if rucl.reward.mode != "outcome":
        from rubricflow.judge.factory import make_judge

        backend = make_judge(judge, ctx.secret_resolver, image_root=data.out_dir)
    return train_rucl(rucl, data.out_dir, backend, rubrics, ctx.reports_dir / rucl.name, generation,
                      run=ctx.run, seed=ctx.seed, judge_cfg=judge)


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
    from rubricflow.methods.rucl.evaluate import evaluate_policies

    return evaluate_policies(rucl, judge, data.out_dir, generation, ctx.secret_resolver)
