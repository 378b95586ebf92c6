"""Multi-seed study parameters (the ``study`` section of params.yaml): seeds, variants and the claims to test.

A study runs each variant (dotted config overrides on top of params.yaml) once per seed and reports the mean and a
95% t-interval per variant and, per claim, the paired per-seed difference with its interval and a verdict
(``rubricflow.study.harness``). The ``study`` section has one sub-section per registered study: each method
declares its default studies (``Method.studies``, in ``rubricflow/methods/<name>/study.py``) and
:func:`compose_study_config` turns them into the section's model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import Field, create_model, model_serializer, model_validator

from rubricflow.sections import Section

MAX_SEED = 2**32 - 1  # the largest seed numpy's generators take


class Claim(Section):
    a: str = Field(description="Variant claimed to differ from `b` (the difference is a - b, paired by seed).")
    b: str = Field(description="The variant it is compared with.")
    metric: str = Field(description="Metric of the comparison, e.g. accuracy or correct_but_flawed.")
    b_metric: str | None = Field(
        None,
        description="`b`'s metric when it is not `metric` (None: `metric`): two readouts compared per seed, e.g. a "
        "variant's accuracy with its own checklists against the same variant's accuracy with a fixed one (`b` = `a`).",
    )
    direction: Literal["higher", "lower"] = Field(
        description="'higher': the claim is a > b on the metric; 'lower': a < b (e.g. fewer correct-but-flawed)."
    )
    margin: float = Field(
        0.0, ge=0,
        description="Non-inferiority margin: 'higher' claims a - b > -margin, 'lower' claims a - b < margin (e.g. "
        "'RuCL is at most 0.01 below outcome-only'); 0 is the plain claim.",
    )
    exploratory: bool = Field(
        False,
        description="An exploratory comparison: reported with its interval and raw verdict like a claim, marked "
        "exploratory in the report's note, and left out of the Holm family (not one of the study's pre-registered "
        "claims).",
    )
    name: str | None = Field(
        None,
        description="The claim's name, which preconditions' `gates` and the seed ledger use; None: "
        "'<a> vs <b> (<metric>)'.",
    )

    @model_serializer(mode="wrap")
    def _without_unset_b_metric(self, handler):
        # a claim on one metric dumps as it did before `b_metric` existed (reports, params, the seed ledger)
        out = handler(self)
        if isinstance(out, dict) and out.get("b_metric") is None:
            out.pop("b_metric", None)
        return out

    @property
    def key(self) -> str:
        if self.name:
            return self.name
        if self.b_metric:
            return f"{self.a} {self.metric} vs {self.b} {self.b_metric}"
        return f"{self.a} vs {self.b} ({self.metric})"


class Precondition(Section):
    """A manipulation check evaluated before the claims: did the mechanism a claim tests act at all? Per seed the
    value is ``variant``'s ``metric`` (minus ``minus``'s on the same seed, or ``variant``'s own ``minus_metric``,
    when given); the seed meets it when the
    value is at least (``higher``) or at most (``lower``) ``threshold``, and a seed without a value does not. The
    precondition holds when at least ``min_share`` of the seeds meet it; when it fails, every claim it ``gates`` is
    reported as untestable and leaves the Holm family."""

    name: str = Field(description="Short name, e.g. 'curriculum engages'.")
    description: str = Field("", description="What it checks, in words (printed in the report).")
    variant: str = Field(description="Variant whose per-seed metric is checked.")
    minus: str | None = Field(None, description="Variant subtracted on the same seed (None: the value alone, or "
                              "`variant`'s `minus_metric`).")
    metric: str = Field(description="A unit metric of the study (`metrics`).")
    minus_metric: str | None = Field(
        None, description="The metric subtracted (of `minus`, or of `variant` itself when `minus` is None), e.g. "
        "the oracle checklist's accuracy minus the planner's on the start; None: `metric`.",
    )
    direction: Literal["higher", "lower"] = Field(
        "higher", description="'higher': a seed meets it when value >= threshold; 'lower': value <= threshold."
    )
    threshold: float = Field(description="The bound a seed's value is compared with.")
    min_share: float = Field(
        1.0, gt=0, le=1, description="Share of seeds that must meet it (0.8: 4 of 5, 8 of 10; 1: every seed)."
    )
    gates: list[str] = Field(
        default_factory=list,
        description="Names of the claims it gates (`Claim.key`: the name, or '<a> vs <b> (<metric>)', or '<a> <metric> "
        "vs <b> <b_metric>' for a claim on two metrics). Empty only in a "
        "selection study whose rule requires the preconditions (`selection.require_preconditions`): there it gates "
        "its variants' setting, which is then not eligible.",
    )
    added_after_results: bool = Field(
        False,
        description="Declared after the study's units had run (e.g. when an old report is re-rendered): the report "
        "says so beside it.",
    )


class Selection(Section):
    """How a selection study (one evaluated on ``val``) picks a setting: each *setting* is a group of variants (e.g.
    one learning rate under two reward modes); its score is the mean over its variants of their mean ``metric`` over
    seeds, and the best score wins (ties: the first setting listed). With ``tolerance`` and ``cost``, every setting
    within ``tolerance`` of the best score competes on cost instead: the lowest mean ``cost`` metrics (compared in
    order) win, so a setting that is better by noise does not win over a cheaper one."""

    metric: str = Field("accuracy", description="Metric the choice is made on (a study metric, on `val`).")
    direction: Literal["higher", "lower"] = Field("higher", description="'higher': the largest score wins.")
    settings: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Setting name -> the variants whose scores it averages (empty: every variant is its own "
        "setting). Grouping one hyperparameter value across methods tunes it for all of them at once, favouring "
        "none.",
    )
    tolerance: float = Field(
        0.0, ge=0, description="Settings whose score is within this distance of the best compete on `cost`."
    )
    cost: list[str] = Field(
        default_factory=list,
        description="Metrics (lower = cheaper, compared in order) that decide among the settings within `tolerance` "
        "of the best; required when `tolerance` > 0.",
    )

    guard_metric: str | None = Field(
        None,
        description="A setting is eligible only if the mean of this metric over its variants is at least the "
        "`guard_baseline` variant's minus `guard_margin` (e.g. greedy val accuracy within 0.02 of the SFT start while "
        "the choice is made on sampled accuracy). None: no guard.",
    )
    guard_baseline: str | None = Field(None, description="The variant the guard compares with (e.g. the start).")
    guard_margin: float = Field(0.0, ge=0, description="How far below the baseline the guard metric may fall.")
    require_preconditions: bool = Field(
        False,
        description="A setting is eligible only if every precondition on one of its variants holds (e.g. a router "
        "setting only where the oracle router reaches the threshold), so the rule cannot choose a setting under which "
        "the claims it prepares would be untestable. False: preconditions are reported beside the choice only.",
    )
    fallback: Literal["none", "most_defined"] = Field(
        "none",
        description="When no setting is eligible because a variant lacks the metric on some seed: 'none' selects "
        "nothing; 'most_defined' lets the settings with the most variants that have it on every seed compete on "
        "the mean over those variants, provided they have it at the same places of their variant lists (the same "
        "methods in every setting's list order), else nothing is selected. The report says when it decided.",
    )

    grid: bool = Field(
        False,
        description="The settings are one hyperparameter's values in order (a grid). The report then says when the "
        "winner is an end of the grid, where a declared rule extends the grid one step past it before the choice is "
        "used (the report does not extend it).",
    )

    @model_validator(mode="after")
    def _cost_with_tolerance(self) -> Selection:
        if (self.guard_metric is None) != (self.guard_baseline is None):
            raise ValueError("selection.guard_metric and guard_baseline go together")
        if self.tolerance > 0 and not self.cost:
            raise ValueError("selection.tolerance > 0 needs `cost` metrics to decide among the settings it admits")
        return self


class StudySpec(Section):
    method: str = Field(
        description="The registered method whose study adapter trains and evaluates the units "
        "(rubricflow.registry: a method with a `study`).",
    )
    seeds: list[int] = Field(
        default_factory=lambda: [101, 202, 303, 404, 505],
        min_length=1,
        description="Training seeds, one unit per (variant, seed). These are parameters fixed in advance, not "
        "picked after looking at results; the development seed (top-level `seed`, 1234) is deliberately not among "
        "them. A 95% interval needs at least 2 seeds; a claim needs 5 or more (CONTRIBUTING.md).",
    )
    variants: dict[str, dict[str, Any]] = Field(
        min_length=1,
        description="Variant name -> dotted config overrides applied on top of params.yaml (e.g. "
        "{'rucl.reward.mode': 'outcome'}). The unit seed, output, report and checkpoint directories are set by "
        "the study and may not be overridden here.",
    )
    untrained: list[str] = Field(
        default_factory=list,
        description="Variants evaluated at their start checkpoint without training (e.g. the SFT start). Greedy "
        "evaluation does not depend on the seed, so their interval has width 0.",
    )
    metrics: list[str] = Field(
        min_length=1,
        description="Metrics of a unit's result aggregated per variant (the method's evaluation names them).",
    )
    pair_metrics: list[str] = Field(
        default_factory=list,
        description="Metrics defined only for two units of one seed, computed by the method's `pair_metric` (e.g. "
        "each method's hull mean over the cost range where both methods' own points lie); claims may name them, "
        "the per-variant table does not.",
    )
    claims: list[Claim] = Field(
        default_factory=list,
        description="Claims tested on paired per-seed differences (two-sided paired t, Holm-adjusted over the "
        "study's pre-registered testable claims): 'shown' when the adjusted p is below 1 - confidence with the "
        "difference on the claimed side, 'reversed' on the other side, else 'not shown'; 'untestable' when a "
        "precondition gating it failed.",
    )
    preconditions: list[Precondition] = Field(
        default_factory=list,
        description="Manipulation checks evaluated before the claims (`Precondition`); each gates named claims.",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the t-intervals.")
    eval_split: Literal["test", "val", "train"] = Field(
        "test",
        description="Split each unit is evaluated on: 'test' for a study that reports (the final evaluation), 'val' "
        "for a study that chooses (hyperparameters), 'train' for a canary that measures learning on its own prompts; "
        "a val or train study runs under the test-split guard and never reads test rows.",
    )
    selection: Selection | None = Field(
        None,
        description="A selection study names the winning setting in its report (`selected`); allowed only with "
        "eval_split 'val' (choose on val, report on test).",
    )
    out_dir: str = Field(
        description="Per-unit outputs: <out_dir>/<variant>/seed<k>/ (policy, training reports, result.json).",
    )
    per_seed_start: bool = Field(
        False,
        description="Each seed builds its own start (the method's `seed_start`: e.g. the warm start and the rubric "
        "tiers), shared by that seed's variants, so the interval covers the start too. False: every unit starts "
        "from the main pipeline's shared outputs.",
    )
    shared_hint: str | None = Field(
        None,
        description="How to build the shared outputs this study reads when they are not the main pipeline's (e.g. "
        "pairs of another form, in their own folder); printed when they are missing. None: the method's hint.",
    )
    start_groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="With per_seed_start: group name -> the variants that build and share a start of their own "
        "(<out_dir>/_start/<group>/seed<k>/), e.g. one per warm-start recipe a selection study compares; a variant in "
        "no group shares the default start (<out_dir>/_start/seed<k>/). A variant is in at most one group.",
    )
    profile: str | None = Field(
        None,
        description="The profile the study belongs to (its data, policy and tiers are that profile's): run under "
        "another one, it is refused. None: any profile.",
    )
    report_dir: str = Field(
        "reports/studies", description="Study reports: <report_dir>/<name>.md, .json and .png (the study name)."
    )

    def start_group(self, variant: str) -> str | None:
        """The start group ``variant`` belongs to (None: the default start)."""
        return next((g for g, members in self.start_groups.items() if variant in members), None)

    @model_validator(mode="after")
    def _names_known(self) -> StudySpec:
        for name in self.variants:
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"variant name {name!r}: must be a plain folder name")
        unknown = [u for u in self.untrained if u not in self.variants]
        if unknown:
            raise ValueError(f"untrained {unknown} are not variants ({sorted(self.variants)})")
        if self.start_groups and not self.per_seed_start:
            raise ValueError("start_groups: only a study that builds a start per seed (per_seed_start) has groups")
        grouped: list[str] = []
        for g, members in self.start_groups.items():
            if not g or "/" in g or g.startswith((".", "seed")):
                raise ValueError(f"start group {g!r}: must be a plain folder name not starting with 'seed' or '.'")
            if stray := [v for v in members if v not in self.variants]:
                raise ValueError(f"start group {g!r}: {stray} are not variants ({sorted(self.variants)})")
            grouped += members
        if twice := sorted({v for v in grouped if grouped.count(v) > 1}):
            raise ValueError(f"start_groups: {twice} are in more than one group")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds {self.seeds} repeat a seed")
        bad = [s for s in self.seeds if not 0 <= s <= MAX_SEED]
        if bad:
            raise ValueError(f"seeds {bad}: every seed must lie in [0, {MAX_SEED}] (numpy's range)")
        both = sorted(set(self.pair_metrics) & set(self.metrics))
        if both:
            raise ValueError(f"pair_metrics {both} are also in metrics: a metric is either a unit's or a pair's")
        for c in self.claims:
            for v in (c.a, c.b):
                if v not in self.variants:
                    raise ValueError(f"claim {c.a} vs {c.b}: {v!r} is not a variant ({sorted(self.variants)})")
            if c.metric not in self.metrics and c.metric not in self.pair_metrics:
                raise ValueError(f"claim {c.a} vs {c.b}: metric {c.metric!r} is not in metrics {self.metrics} "
                                 f"or pair_metrics {self.pair_metrics}")
            if c.b_metric is not None:
                if c.metric in self.pair_metrics:
                    raise ValueError(f"claim {c.key}: b_metric with the pair metric {c.metric!r} (a pair metric "
                                     "compares one metric of two units)")
                if c.b_metric not in self.metrics:
                    raise ValueError(f"claim {c.key}: b_metric {c.b_metric!r} is not in metrics {self.metrics}")
                if c.a == c.b and c.b_metric == c.metric:
                    raise ValueError(f"claim {c.key}: compares {c.a}'s {c.metric} with itself")
            elif c.a == c.b:
                raise ValueError(f"claim {c.key}: compares {c.a} with itself (give b_metric to compare two of its "
                                 "metrics)")
        keys = [c.key for c in self.claims]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise ValueError(f"claims {repeated} appear twice: give each a distinct `name`")
        names = [p.name for p in self.preconditions]
        if len(set(names)) != len(names):
            raise ValueError(f"preconditions {names} repeat a name")
        for p in self.preconditions:
            for v in filter(None, (p.variant, p.minus)):
                if v not in self.variants:
                    raise ValueError(f"precondition {p.name!r}: {v!r} is not a variant ({sorted(self.variants)})")
            for m in filter(None, (p.metric, p.minus_metric)):
                if m not in self.metrics:
                    raise ValueError(f"precondition {p.name!r}: metric {m!r} is not in metrics {self.metrics}")
            if not p.gates and not (self.selection is not None and self.selection.require_preconditions):
                raise ValueError(f"precondition {p.name!r} gates nothing: name the claims it gates, or make it a "
                                 "selection study's eligibility rule (selection.require_preconditions)")
            unknown = [g for g in p.gates if g not in keys]
            if unknown:
                raise ValueError(f"precondition {p.name!r} gates {unknown}, which are not claims ({keys})")
        if self.selection is not None:
            if self.eval_split != "val":
                raise ValueError("selection: a study that chooses must be evaluated on val (eval_split: val)")
            if self.selection.guard_baseline is not None and self.selection.guard_baseline not in self.variants:
                raise ValueError(f"selection.guard_baseline {self.selection.guard_baseline!r} is not a variant")
            for m in (self.selection.metric, *self.selection.cost, *filter(None, [self.selection.guard_metric])):
                if m not in self.metrics:
                    raise ValueError(f"selection metric {m!r} is not in metrics {self.metrics}")
            for setting, members in self.selection.settings.items():
                bad = [v for v in members if v not in self.variants] or ([] if members else ["(none)"])
                if bad:
                    raise ValueError(f"selection.settings.{setting}: {bad} are not variants ({sorted(self.variants)})")
        return self


class StudyConfigBase(Section):
    """Base of the composed ``study`` section: one ``StudySpec`` field per registered study."""

    merge_partial_defaults: ClassVar[bool] = False  # its own rule below: a study key given replaces the default's

    @model_validator(mode="before")
    @classmethod
    def _own_defaults(cls, data):
        """A partial study (``study.roro: {seeds: [...]}``) is merged onto that study's own defaults (its
        declaration's spec), not validated alone: a key given replaces the default's value whole; a study that
        gives its own claims, variants or metrics and no preconditions has none (the default's name its claims)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for key, field in cls.model_fields.items():
            if isinstance(out.get(key), dict) and field.default_factory is not None:
                given = out[key]
                base = field.default_factory().model_dump()
                if "preconditions" not in given and any(k in given for k in ("claims", "variants", "metrics")):
                    base["preconditions"] = []  # the default's checks name the default's claims and variants
                out[key] = {**base, **given}
        return out


def compose_study_config(studies: Iterable[Any], known_methods: Iterable[str]) -> type[StudyConfigBase]:
    """The ``study`` section's model: one field per study declaration (``rubricflow.registry.StudyDecl``: name,
    default-spec factory, description); a study whose ``method`` has no registered adapter is refused by name."""
    known = sorted(known_methods)
    fields: dict[str, Any] = {}
    for decl in studies:
        fields[decl.name] = (StudySpec, Field(default_factory=decl.spec, description=decl.description))

    def _methods_known(self):
        for name in type(self).model_fields:
            spec = getattr(self, name)
            if spec.method not in known:
                raise ValueError(f"study.{name}.method: {spec.method!r} has no study adapter; registered: {known}")
        return self

    validators = {"_methods_known": model_validator(mode="after")(_methods_known)}
    return create_model("StudyConfig", __base__=StudyConfigBase, __validators__=validators, **fields)
