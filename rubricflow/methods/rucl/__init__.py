"""RuCL (stratified rubric-based curriculum learning).

Phase I (``rubrics/``): a generalized rubric pool, calibration on policy samples, coverage filtering and
foundational / advanced tiers. Phase II: GRPO with the hybrid reward ``alpha * outcome + (1 - alpha) * rubric``
(``rewards.py``, scored by ``scoring.RubricScorer``) and the performance-triggered curriculum on the advanced weight
(``curriculum.py``), wired to rollouts, the judge and the GRPO engine by ``rollout.py`` and ``train.py``.
"""

from rubricflow.methods.rucl import stages
from rubricflow.methods.rucl.commands import COMMANDS
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.rubrics import stages as rubric_stages
from rubricflow.methods.rucl.rubrics.config import RubricsConfig
from rubricflow.methods.rucl.study import ADAPTER, STUDIES
from rubricflow.methods.rucl.summary import summary_lines, transition_column, transition_report_lines
from rubricflow.registry import Method, Pipeline, SectionDecl

METHOD = Method(
    name="rucl",
    description="RuCL: stratified rubric curriculum + GRPO.",
    sections=(
        SectionDecl("rubrics", RubricsConfig,
                    "RuCL Phase I: rubric pool, calibration, coverage filter and tiers."),
        SectionDecl("rucl", RuCLConfig, "RuCL Phase II: hybrid reward, curriculum, GRPO."),
    ),
    stages=(rubric_stages.rubrics_stage, rubric_stages.stratify_stage, stages.train_stage, stages.outcome_stage,
            stages.eval_stage),
    pipelines=(
        Pipeline(
            "rucl",
            "RuCL: stratified rubric curriculum + GRPO.",
            # foundation -> rubric pool -> calibrate/stratify -> GRPO with the curriculum (and the outcome-only
            # baseline) -> evaluation
            ("data", "validate", "base_model", "sft", "rubrics", "stratify", "rucl", "rucl_outcome", "rucl_eval"),
            compare="rucl",
            knobs={
                "reward_mode": "rucl.reward.mode",
                "curriculum_shape": "rucl.curriculum.shape",
                "alpha": "rucl.reward.alpha",
                "window": "rucl.curriculum.window",
                "threshold": "rucl.curriculum.threshold",
                "train_steps": "rucl.grpo.steps",
                "sft_steps": "sft.steps",
                "seed": "seed",
            },
            knobs_help="RuCL knobs (the ablations of the paper are reward_mode and curriculum_shape).",
        ),
    ),
    adapters=(ADAPTER,),
    studies=STUDIES,
    summary=summary_lines,
    commands=COMMANDS,
    report_lines=transition_report_lines,
    compare_columns={"transition_step": transition_column},
)
