"""RuCL Phase I: generalized rubric pool (default or teacher-written), calibration, coverage filtering and
competence-based stratification into foundational and advanced tiers."""

from rubricflow.rubrics.config import RubricsConfig
from rubricflow.rubrics.pool import (
    DEFAULT_POOL_PATH,
    RubricPool,
    dedupe,
    load_default_pool,
    load_pool,
    load_tiers,
    save_pool,
    validate_rubrics,
)
from rubricflow.rubrics.stratify import coverage_and_pass_rates, informativeness, select_and_stratify, summarize
from rubricflow.rubrics.teacher import TEACHER_PROMPT_VERSION, generate_pool, parse_teacher_rubrics

_STAGE_NAMES = ("calibration_requests", "pool_stage", "sample_policy_responses", "stratify_stage")


def __getattr__(name: str):
    # the stage module registers tracked stages and imports models lazily; keep `import rubricflow.rubrics` light
    if name in _STAGE_NAMES:
        from rubricflow.rubrics import stage

        return getattr(stage, name)
    raise AttributeError(f"module 'rubricflow.rubrics' has no attribute {name!r}")


__all__ = [
    "DEFAULT_POOL_PATH",
    "TEACHER_PROMPT_VERSION",
    "RubricPool",
    "RubricsConfig",
    "calibration_requests",
    "coverage_and_pass_rates",
    "dedupe",
    "generate_pool",
    "informativeness",
    "load_default_pool",
    "load_pool",
    "load_tiers",
    "parse_teacher_rubrics",
    "pool_stage",
    "sample_policy_responses",
    "save_pool",
    "select_and_stratify",
    "stratify_stage",
    "summarize",
    "validate_rubrics",
]
