"""RuCL Phase I: generalized rubric pool (default or teacher-written), calibration, coverage filtering and
competence-based stratification into foundational and advanced tiers."""

from rubricflow.methods.rucl.rubrics.config import RubricsConfig
from rubricflow.methods.rucl.rubrics.pool import (
    DEFAULT_POOL_PATH,
    RubricPool,
    dedupe,
    load_default_pool,
    load_pool,
    load_tiers,
    save_pool,
    validate_rubrics,
)
from rubricflow.methods.rucl.rubrics.stratify import (
    coverage_and_pass_rates,
    informativeness,
    select_and_stratify,
    summarize,
)
from rubricflow.methods.rucl.rubrics.teacher import TEACHER_PROMPT_VERSION, generate_pool, parse_teacher_rubrics

_BUILD_NAMES = ("calibration_requests", "sample_policy_responses", "stratify_pool", "write_pool")


def __getattr__(name: str):
    # the build module imports the judge factory and models; keep `import rubricflow.methods.rucl.rubrics` light
    if name in _BUILD_NAMES:
        from rubricflow.methods.rucl.rubrics import build

        return getattr(build, name)
    raise AttributeError(f"module 'rubricflow.methods.rucl.rubrics' has no attribute {name!r}")


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
    "sample_policy_responses",
    "save_pool",
    "select_and_stratify",
    "stratify_pool",
    "summarize",
    "validate_rubrics",
    "write_pool",
]
