"""RuCL Phase I stages: the candidate pool (``rubrics``) and its calibration into tiers (``stratify``). Thin
bindings over ``rubricflow.methods.rucl.rubrics.build``."""

from __future__ import annotations

from rubricflow.data.validate import require_gate
from rubricflow.judge.config import JudgeConfig
from rubricflow.methods.rucl.rubrics.config import RubricsConfig
from rubricflow.pipeline.stage import StageContext, stage
from rubricflow.sections import DataConfig


@stage("rubrics", judge=True)
def rubrics_stage(rubrics: RubricsConfig, judge: JudgeConfig, data: DataConfig, ctx: StageContext) -> dict:
    """RuCL Phase I: write the generalized rubric candidate pool (default pool or a teacher in O(1) calls)."""
    from rubricflow.methods.rucl.rubrics.build import write_pool  # build loads torch (policy sampling)

    if rubrics.teacher is not None:  # the teacher sees example questions of the calib split
        ctx.run.log_input(data.out_dir, split="calib", context="calibration")
    out = write_pool(rubrics, judge, data.out_dir, secret_resolver=ctx.secret_resolver)
    ctx.run.log_artifact(out["paths"]["pool"], "rubrics")
    return {**out["metrics"], "source": out["source"]}


@stage("stratify", retries=3, judge=True, metric_ns="judge")
def stratify_stage(rubrics: RubricsConfig, judge: JudgeConfig, data: DataConfig, ctx: StageContext) -> dict:
    """Calibrate candidates on policy samples: coverage, pass rate, filter, keep k, foundational/advanced tiers."""
    from rubricflow.methods.rucl.rubrics.build import stratify_pool  # build loads torch (policy sampling)

    require_gate(data, ctx.reports_dir)
    ctx.run.log_input(data.out_dir, split="calib", context="calibration")
    out = stratify_pool(rubrics, judge, data.out_dir, secret_resolver=ctx.secret_resolver, seed=ctx.seed)
    for p in out["paths"].values():
        ctx.run.log_artifact(p, "rubrics")
    return dict(out["metrics"])
