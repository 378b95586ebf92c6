"""``rubrics:`` section of params.yaml: RuCL Phase I (candidate pool, calibration, stratification).

Composed into rubricflow.config.Config. Paths are relative to the project root (the CLI's and DVC's
working directory).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rubricflow.sections import Section


class RubricsConfig(Section):
    # the policy calibrated on is hashed by content where it matters (a study start builds it)
    outputs = frozenset({"policy_path", "tiers_path", "table_dir"})

    # -- candidate pool ----------------------------------------------------------------------------------------
    pool_path: str = Field(
        "artifacts/rubrics/candidates.json",
        description="Candidate pool written by the pool stage (DVC-tracked JSON: ids, text, category, provenance).",
    )
    n_candidates: int = Field(20, ge=2, le=100, description="Number of generalized candidates K (paper: 20).")
    teacher: Literal["openai", "local"] | None = Field(
        None,
        description="Backend that writes the candidates (uses the judge section's settings for that backend); "
        "None = the default pool shipped in rubricflow/methods/rucl/resources.",
    )
    teacher_model: str | None = Field(
        None, description="Teacher model (openai: model name; local: model dir); None = the judge's model."
    )
    teacher_max_calls: int = Field(
        3, ge=1, le=10, description="At most this many teacher calls for the whole pool (O(1), never per sample)."
    )
    default_pool_path: str | None = Field(
        None,
        description="A custom default pool JSON; None = rubricflow/methods/rucl/resources/rubric_pool_default.json.",
    )
    # -- calibration ---------------------------------------------------------------------------------------------
    policy_path: str = Field(
        "artifacts/models/sft", description="Policy whose responses calibrate the candidates (the SFT checkpoint)."
    )
    calib_max_prompts: int | None = Field(
        None, ge=1, description="Use at most this many calibration prompts (None = the whole calib split)."
    )
    samples_per_prompt: int = Field(4, ge=1, le=64, description="Policy responses sampled per calibration prompt.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of the calibration responses.")
    max_new_tokens: int = Field(48, ge=1, description="Length cap of the calibration responses.")
    gen_batch_size: int = Field(64, ge=1, description="Prompts per generate() call while sampling.")
    # -- filtering and stratification ----------------------------------------------------------------------------
    coverage_min: float = Field(
        0.3, ge=0, le=1, description="Drop candidates applicable to fewer than this fraction of judged responses."
    )
    saturation_max: float | None = Field(
        0.95, ge=0, le=1,
        description="Drop candidates whose calibration pass rate is above this ceiling: passed by nearly every sampled "
        "response, they vary within no GRPO group (their reward term vanishes) and would make the foundational score "
        "start at the curriculum's threshold. None: keep them (the earlier reading).",
    )
    keep_k: int = Field(6, ge=1, description="Rubrics kept after filtering (paper: 6), ranked by `rank_by`.")
    rank_by: Literal["coverage", "informativeness"] = Field(
        "coverage",
        description="coverage (the paper's selection: applicable rubrics first, then higher pass rate); "
        "informativeness (the earlier reading: coverage x 4p(1-p), the variance of a pass/fail verdict; it drops every "
        "rubric the policy mostly passes, the paper's foundational kind).",
    )
    tier_rule: Literal["threshold", "half", "count", "kind"] = Field(
        "threshold",
        description="How the kept rubrics are divided into tiers. kind (perception-first, the paper's intent): only "
        "grounded rubrics are kept, perception (values read off the image) foundational, deduction (values derived "
        "from the facts) advanced. The pass-rate rules: threshold (default): foundational iff the "
        "calibration pass rate >= foundational_min_pass (already mostly mastered), else advanced, clamped so both "
        "tiers are non-empty when keep_k >= 2; count: the n_foundational highest-pass rubrics are foundational (the "
        "paper's 4 / 2 split of its six rubrics taken as a count: on a weaker policy it makes rarely passed rubrics "
        "foundational); half: the higher-pass half (rounded up).",
    )
    n_foundational: int = Field(
        4, ge=1, description="count rule: foundational rubrics (at most keep_k - 1; paper: 4 of 6)."
    )
    foundational_min_pass: float = Field(
        0.6, ge=0, le=1,
        description="threshold rule: lowest calibration pass rate of a foundational rubric (passed by most sampled "
        "responses already; the curriculum's threshold on their batch score is `rucl.curriculum.threshold`).",
    )
    # -- outputs -------------------------------------------------------------------------------------------------
    tiers_path: str = Field(
        "artifacts/rubrics/tiers.json",
        description="Kept rubrics with their tier (read by RuCL Phase II as rucl.tiers_path).",
    )
    table_dir: str = Field(
        "reports/rubrics",
        description="stratification.json / .csv (per-candidate table, DVC plot) and stratification_summary.json "
        "(DVC metric).",
    )

    @model_validator(mode="after")
    def _check(self) -> "RubricsConfig":
        if self.keep_k > self.n_candidates:
            raise ValueError(f"keep_k ({self.keep_k}) must not exceed n_candidates ({self.n_candidates})")
        return self
