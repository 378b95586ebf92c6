"""RuCL's studies: the study adapter and the default studies the harness (``rubricflow study``) runs.

``adapter`` (the adapter and its unit: train from the start with the variant's reward and curriculum, then the final
evaluation), ``seed_start`` (a seed's own start: base model, SFT warm start and tiers, for ``per_seed_start``) and
``specs`` (the default studies ``rucl``, ``rucl_tune``, ``grpo_canary``, ``rucl_switch_tune``, ``rucl_grpo_tune`` and
``rucl_intended``, with the tune grids and the values their rules chose).
"""

from rubricflow.methods.rucl.study.adapter import (
    ADAPTER,
    EVAL_NAME,
    input_parts,
    judge_identity,
    margin_switches,
    run_unit,
    shared_outputs,
    start_calibration,
    unit_overrides,
)
from rubricflow.methods.rucl.study.seed_start import SEED_START, build_start, start_inputs, start_overrides
from rubricflow.methods.rucl.study.specs import (
    GRPO_SETTINGS,
    INTENDED,
    INTENDED_BASE,
    INTENDED_BETA,
    INTENDED_LR,
    INTENDED_MARGIN,
    INTENDED_METRICS,
    INTENDED_SCALE,
    INTENDED_STEPS,
    MARGIN_GRID,
    METRICS,
    STUDIES,
    SWITCH_BY,
    TUNE_SETTINGS,
    grpo_canary_spec,
    margin_metric,
    rucl_grpo_tune_spec,
    rucl_intended_spec,
    rucl_spec,
    rucl_switch_tune_spec,
    rucl_tune_spec,
    tune_variants,
)

__all__ = [
    "ADAPTER", "EVAL_NAME", "GRPO_SETTINGS", "INTENDED", "INTENDED_BASE", "INTENDED_BETA", "INTENDED_LR",
    "INTENDED_MARGIN", "INTENDED_METRICS", "INTENDED_SCALE", "INTENDED_STEPS", "MARGIN_GRID", "METRICS", "SEED_START",
    "STUDIES", "SWITCH_BY", "TUNE_SETTINGS", "build_start", "grpo_canary_spec", "input_parts", "judge_identity",
    "margin_metric", "margin_switches", "rucl_grpo_tune_spec", "rucl_intended_spec", "rucl_spec",
    "rucl_switch_tune_spec", "rucl_tune_spec", "run_unit", "shared_outputs", "start_calibration", "start_inputs",
    "start_overrides", "tune_variants", "unit_overrides",
]
