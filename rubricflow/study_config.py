"""Multi-seed study parameters (the ``study`` section of params.yaml): seeds, variants and the claims to test.

A study runs each variant (dotted config overrides on top of params.yaml) once per seed and reports the mean and a
95% t-interval per variant and, per claim, the paired per-seed difference with its interval and a verdict
(``rubricflow.study``). One sub-section per method; ``study.rucl`` is the first.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rubricflow.section import Section

# Held-out metrics of rubricflow.rucl.evaluate.score_responses a study aggregates (accuracy/<task> are kept too);
# correct_but_flawed is the independent strict verifier, correct_but_flawed_rubric the reward judge's rate.
RUCL_METRICS = ["accuracy", "correct_but_flawed", "correct_but_flawed_rubric", "s_f", "s_a"]


class Claim(Section):
    a: str = Field(description="Variant claimed to differ from `b` (the difference is a - b, paired by seed).")
    b: str = Field(description="The variant it is compared with.")
    metric: str = Field(description="Metric of the comparison, e.g. accuracy or correct_but_flawed.")
    direction: Literal["higher", "lower"] = Field(
        description="'higher': the claim is a > b on the metric; 'lower': a < b (e.g. fewer correct-but-flawed)."
    )


def _rucl_variants() -> dict[str, dict[str, Any]]:
    return {
        "sft": {},  # untrained: the SFT start, evaluated as is (see `untrained`)
        "outcome": {"rucl.reward.mode": "outcome"},
        "uniform": {"rucl.reward.mode": "uniform"},
        "rucl-sigmoid": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "sigmoid"},
        "rucl-linear": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "linear"},
        "shuffled": {"rucl.reward.mode": "rucl", "rucl.reward.shuffle_control": True},
    }


def _rucl_claims() -> list[Claim]:
    return [
        Claim(a="rucl-sigmoid", b="outcome", metric="accuracy", direction="higher"),
        Claim(a="rucl-sigmoid", b="uniform", metric="accuracy", direction="higher"),
        Claim(a="rucl-sigmoid", b="outcome", metric="correct_but_flawed", direction="lower"),
        Claim(a="rucl-sigmoid", b="shuffled", metric="accuracy", direction="higher"),
    ]


class StudySpec(Section):
    seeds: list[int] = Field(
        default_factory=lambda: [101, 202, 303, 404, 505],
        min_length=1,
        description="Training seeds, one unit per (variant, seed). These are parameters fixed in advance, not "
        "picked after looking at results; the development seed (top-level `seed`, 1234) is deliberately not among "
        "them. A 95% interval needs at least 2 seeds; a claim needs 5 or more (CONTRIBUTING.md).",
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=_rucl_variants,
        description="Variant name -> dotted config overrides applied on top of params.yaml (e.g. "
        "{'rucl.reward.mode': 'outcome'}). The unit seed, output, report and checkpoint directories are set by "
        "the study and may not be overridden here.",
    )
    untrained: list[str] = Field(
        default_factory=lambda: ["sft"],
        description="Variants evaluated at their start checkpoint (`rucl.init_from`, the shared SFT model) without "
        "training. Greedy evaluation does not depend on the seed, so their interval has width 0.",
    )
    metrics: list[str] = Field(
        default_factory=lambda: list(RUCL_METRICS),
        min_length=1,
        description="Test-split metrics (rubricflow.rucl.evaluate.score_responses) aggregated per variant.",
    )
    claims: list[Claim] = Field(
        default_factory=_rucl_claims,
        description="Claims tested on paired per-seed differences: 'shown' when the 95% interval excludes 0 in the "
        "claimed direction, 'reversed' when it excludes 0 in the other direction, else 'not shown'.",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the t-intervals.")
    out_dir: str = Field(
        "artifacts/studies/rucl",
        description="Per-unit outputs: <out_dir>/<variant>/seed<k>/ (policy, training reports, result.json).",
    )
    report_dir: str = Field(
        "reports/studies", description="Study reports: <report_dir>/<name>.md, .json and .png (the study name)."
    )

    @model_validator(mode="after")
    def _names_known(self) -> StudySpec:
        for name in self.variants:
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"variant name {name!r}: must be a plain folder name")
        unknown = [u for u in self.untrained if u not in self.variants]
        if unknown:
            raise ValueError(f"untrained {unknown} are not variants ({sorted(self.variants)})")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed")
        for c in self.claims:
            for v in (c.a, c.b):
                if v not in self.variants:
                    raise ValueError(f"claim {c.a} vs {c.b}: {v!r} is not a variant ({sorted(self.variants)})")
            if c.metric not in self.metrics:
                raise ValueError(f"claim {c.a} vs {c.b}: metric {c.metric!r} is not in metrics {self.metrics}")
        return self


class StudyConfig(Section):
    rucl: StudySpec = Field(
        default_factory=StudySpec,
        description="The RuCL study: SFT start, outcome-only, uniform rubrics, sigmoid and linear curriculum, and "
        "the shuffled-reward control, each trained from the shared SFT checkpoint once per seed.",
    )
