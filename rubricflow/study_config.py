"""Multi-seed study parameters (the ``study`` section of params.yaml): seeds, variants and the claims to test.

A study runs each variant (dotted config overrides on top of params.yaml) once per seed and reports the mean and a
95% t-interval per variant and, per claim, the paired per-seed difference with its interval and a verdict
(``rubricflow.study``). One sub-section per method; ``study.rucl`` is the first.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rubricflow.sections import Section

# Held-out metrics of rubricflow.methods.rucl.evaluate.score_responses a study aggregates (accuracy/<task> are kept too);
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


class Selection(Section):
    """How a selection study (one evaluated on ``val``) picks a setting: each *setting* is a group of variants (e.g.
    one learning rate under two reward modes); its score is the mean over its variants of their mean ``metric`` over
    seeds, and the best score wins (ties: the first setting listed)."""

    metric: str = Field("accuracy", description="Metric the choice is made on (a study metric, on `val`).")
    direction: Literal["higher", "lower"] = Field("higher", description="'higher': the largest score wins.")
    settings: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Setting name -> the variants whose scores it averages (empty: every variant is its own "
        "setting). Grouping one hyperparameter value across methods tunes it for all of them at once, favouring "
        "none.",
    )


class StudySpec(Section):
    method: Literal["rucl", "deltarubric", "roro"] = Field(
        "rucl",
        description="The method whose units the study trains and evaluates (its adapter in rubricflow.study.METHODS).",
    )
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
        description="Test-split metrics (rubricflow.methods.rucl.evaluate.score_responses) aggregated per variant.",
    )
    claims: list[Claim] = Field(
        default_factory=_rucl_claims,
        description="Claims tested on paired per-seed differences: 'shown' when the 95% interval excludes 0 in the "
        "claimed direction, 'reversed' when it excludes 0 in the other direction, else 'not shown'.",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the t-intervals.")
    eval_split: Literal["test", "val"] = Field(
        "test",
        description="Split each unit is evaluated on: 'test' for a study that reports (the final evaluation), 'val' "
        "for a study that chooses (hyperparameters): such a study runs under the test-split guard and never reads "
        "test rows.",
    )
    selection: Selection | None = Field(
        None,
        description="A selection study names the winning setting in its report (`selected`); allowed only with "
        "eval_split 'val' (choose on val, report on test).",
    )
    out_dir: str = Field(
        "artifacts/studies/rucl",
        description="Per-unit outputs: <out_dir>/<variant>/seed<k>/ (policy, training reports, result.json).",
    )
    profile: str | None = Field(
        None,
        description="The profile the study belongs to (its data, policy and tiers are that profile's): run under "
        "another one, it is refused. None: any profile.",
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
        if self.selection is not None:
            if self.eval_split != "val":
                raise ValueError("selection: a study that chooses must be evaluated on val (eval_split: val)")
            if self.selection.metric not in self.metrics:
                raise ValueError(f"selection.metric {self.selection.metric!r} is not in metrics {self.metrics}")
            for setting, members in self.selection.settings.items():
                bad = [v for v in members if v not in self.variants] or ([] if members else ["(none)"])
                if bad:
                    raise ValueError(f"selection.settings.{setting}: {bad} are not variants ({sorted(self.variants)})")
        return self


# The tiny profile's GRPO learning rate and sampling temperature are chosen by this study, on val. A setting is one
# (lr, temperature) pair trained under both outcome-only and RuCL rewards, so the choice favours neither method.
# The grid first spanned 1e-4..1e-3; its best setting was its lowest lr, so it was extended downwards (3e-5, 1e-5)
# rather than stopping at the grid's edge.
TUNE_LRS = {"lr1e-5": 1e-5, "lr3e-5": 3e-5, "lr1e-4": 1e-4, "lr3e-4": 3e-4, "lr1e-3": 1e-3}


def _rucl_tune_variants() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    grid = [(name, lr, 1.0) for name, lr in TUNE_LRS.items()] + [("lr3e-4-t0.7", 3e-4, 0.7)]
    for setting, lr, temp in grid:
        for mode in ("outcome", "rucl"):
            out[f"{mode}-{setting}"] = {"rucl.reward.mode": mode, "rucl.grpo.lr": lr, "rucl.grpo.temperature": temp}
    return out


def _rucl_tune_spec() -> StudySpec:
    variants = _rucl_tune_variants()
    settings: dict[str, list[str]] = {}
    for v in variants:
        settings.setdefault(v.split("-", 1)[1], []).append(v)
    return StudySpec(
        seeds=[11, 22, 33],
        variants=variants,
        untrained=[],
        claims=[],
        metrics=["accuracy", "correct_but_flawed"],
        eval_split="val",
        selection=Selection(metric="accuracy", direction="higher", settings=settings),
        out_dir="artifacts/studies/rucl_tune",
    )


# DeltaRubric (rubricflow.methods.deltarubric.study): metrics of a unit on the held-out pairs. `accuracy` /
# `format_violation` are those of the judge mode the unit was trained for (DeltaRubric's own checklist for DeltaRubric
# runs and the warm start, the no-rubric / static verdict for the trained baselines); acc_<mode> for every mode.
DELTARUBRIC_METRICS = ["accuracy", "format_violation", "acc_no_rubric", "acc_static", "acc_deltarubric", "acc_oracle",
                       "fmt_deltarubric", "probe_end"]


def _deltarubric_variants() -> dict[str, dict[str, Any]]:
    dr = "deltarubric.train"
    return {
        "sft": {},  # untrained: the shared warm start, evaluated in every mode (the before-RL table)
        "deltarubric": {},  # the paper's setting: relative (improvement) planner reward, paired bonus, lambda 0.4
        "no-rubric": {f"{dr}.judge": "no_rubric"},  # the trained no-rubric judge (same steps, pairs, verdicts)
        "static": {f"{dr}.judge": "static"},  # the trained static-rubric judge
        "absolute": {f"{dr}.planner_reward": "absolute"},  # the planner-reward ablation
        "shift": {f"{dr}.planner_reward": "shift"},  # the reading built first (== absolute after centring)
        "lambda0": {f"{dr}.guidance_lambda": 0.0},
        "lambda0.2": {f"{dr}.guidance_lambda": 0.2},
        "lambda0.6": {f"{dr}.guidance_lambda": 0.6},
    }


def _deltarubric_claims() -> list[Claim]:
    return [
        Claim(a="deltarubric", b="no-rubric", metric="accuracy", direction="higher"),
        Claim(a="deltarubric", b="static", metric="accuracy", direction="higher"),
        Claim(a="deltarubric", b="absolute", metric="accuracy", direction="higher"),
        Claim(a="deltarubric", b="lambda0", metric="accuracy", direction="higher"),
        Claim(a="deltarubric", b="sft", metric="accuracy", direction="higher"),
    ]


def _deltarubric_spec() -> StudySpec:
    return StudySpec(method="deltarubric", variants=_deltarubric_variants(), metrics=list(DELTARUBRIC_METRICS),
                     claims=_deltarubric_claims(), out_dir="artifacts/studies/deltarubric")


# RoRo: each variant names one routing method (rubricflow.methods.roro.study); the curve of each unit is reduced to its AUC and
# the accuracy at matched costs; a `roro` unit also measures its kept Judge on the evaluation split's route pairs.
RORO_METRICS = ["auc", "acc_at_cost_25", "acc_at_cost_50", "acc_at_cost_75", "judge_test_acc",
                "judge_test_process_acc"]


def _roro_spec() -> StudySpec:
    variants = {
        "roro": {"roro.router.methods": ["roro"], "roro.eval.baselines": []},
        "outcome-only": {"roro.router.methods": ["outcome-only"], "roro.eval.baselines": []},
        "threshold": {"roro.router.methods": [], "roro.eval.baselines": ["threshold"]},
        "random": {"roro.router.methods": [], "roro.eval.baselines": ["random"]},
    }
    claims = [
        Claim(a="roro", b="outcome-only", metric="auc", direction="higher"),
        Claim(a="roro", b="outcome-only", metric="acc_at_cost_50", direction="higher"),
        Claim(a="roro", b="threshold", metric="auc", direction="higher"),
        Claim(a="roro", b="random", metric="auc", direction="higher"),
        Claim(a="outcome-only", b="threshold", metric="auc", direction="higher"),
    ]
    return StudySpec(method="roro", variants=variants, untrained=["threshold", "random"], metrics=list(RORO_METRICS),
                     claims=claims, out_dir="artifacts/studies/roro")


def _rucl_smol_spec() -> StudySpec:
    return StudySpec(
        seeds=[101, 202, 303],
        variants={"sft": {}, "outcome": {"rucl.reward.mode": "outcome"}, "rucl": {"rucl.reward.mode": "rucl"}},
        untrained=["sft"],
        claims=[Claim(a="rucl", b="sft", metric="accuracy", direction="higher"),
                Claim(a="rucl", b="outcome", metric="accuracy", direction="higher"),
                Claim(a="rucl", b="outcome", metric="correct_but_flawed", direction="lower")],
        metrics=["accuracy", "correct_but_flawed", "s_f", "s_a"],
        out_dir="artifacts/studies/rucl_smol",
        profile="smol",
    )


class StudyConfig(Section):
    @model_validator(mode="before")
    @classmethod
    def _own_defaults(cls, data):
        """A partial study (``study.roro: {seeds: [...]}``) is merged onto that study's own defaults, not the class
        defaults of StudySpec (which are RuCL's): a key given replaces the default's value whole."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for key, field in cls.model_fields.items():
            if isinstance(out.get(key), dict) and field.default_factory is not None:
                out[key] = {**field.default_factory().model_dump(), **out[key]}
        return out

    rucl: StudySpec = Field(
        default_factory=StudySpec,
        description="The RuCL study: SFT start, outcome-only, uniform rubrics, sigmoid and linear curriculum, and "
        "the shuffled-reward control, each trained from the shared SFT checkpoint once per seed.",
    )
    rucl_smol: StudySpec = Field(
        default_factory=_rucl_smol_spec,
        description="RuCL on real weights (`rubricflow --profile smol study rucl_smol`): the SmolLM2-135M-Instruct SFT "
        "warm start, outcome-only GRPO and RuCL with LoRA on the text task, over seeds 101, 202, 303 (6 trained units "
        "of about 15 min each on 2 cores: fewer seeds than the 5 a claim needs, so its verdicts are reported, not "
        "claimed).",
    )
    rucl_tune: StudySpec = Field(
        default_factory=_rucl_tune_spec,
        description="Chooses the tiny profile's GRPO lr (1e-5 .. 1e-3) and temperature (1.0; 0.7 at lr 3e-4) on val: "
        "each setting trained with outcome-only and RuCL rewards on seeds 11, 22, 33 (not the study's seeds), "
        "scored by mean val accuracy "
        "(`rubricflow study rucl_tune`; the winner is `selected` in reports/studies/rucl_tune.md).",
    )
    deltarubric: StudySpec = Field(
        default_factory=_deltarubric_spec,
        description="The DeltaRubric study: the warm start (before RL), DeltaRubric, the trained no-rubric and static "
        "judges, the absolute (and shift) planner reward and lambda 0 / 0.2 / 0.6, each trained from the shared "
        "warm start once per seed and evaluated on the held-out pairs in every judge mode.",
    )
    roro: StudySpec = Field(
        default_factory=_roro_spec,
        description="The RoRo study: RoRo (process + outcome - cost) vs outcome-only routers over the cost-weight "
        "sweep, the uncertainty threshold and the random router; per unit the area under the accuracy-vs-cost hull "
        "and the accuracy at matched costs on test; per `roro` unit the Judge's per-phase val accuracy and its "
        "kept phase on test pairs (`rubricflow study roro`).",
    )
