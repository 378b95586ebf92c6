"""RoRo: rubric-guided process reward for stepwise model routing.

Four parts, one subpackage each: ``env/`` the routing environment (problems, step models, routing trajectories,
process oracles), ``judge/`` the rubrics, the Rubricor and the Judge (preference pairs, pairwise accuracy, the
alternating Rubricor-Judge optimization), ``router/`` the router (its state, the MLP, GRPO training, the
accuracy-vs-cost evaluation) and ``study/`` the studies (``study/unit.py`` the adapter of routing units,
``study/specs.py`` their studies, ``study/judge_tune.py`` the selection studies of the Judge's warm start and of the
criterion families, ``study/judge_dose.py`` the Judge-quality dose-response, ``study/family_ceiling.py`` the families'
exact-reader ceiling). At the root: ``config.py`` the section, ``paths.py``
every output, ``stages.py`` the stage bindings, ``summary.py`` the summary lines and CLI printers.
"""

from rubricflow.methods.roro import stages
from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.study import judge_dose, judge_tune
from rubricflow.methods.roro.study.specs import STUDIES, pin_reading
from rubricflow.methods.roro.study.unit import ADAPTER
from rubricflow.methods.roro.summary import COMMANDS, summary_lines
from rubricflow.registry import Method, Pipeline, SectionDecl

METHOD = Method(
    name="roro",
    description="RoRo: rubric-guided process reward for a stepwise router.",
    sections=(SectionDecl("roro", RoRoConfig,
                          "RoRo: step models, trajectories, pairs, Rubricor-Judge, router GRPO."),),
    stages=(stages.models_stage, stages.trajectories_stage, stages.pairs_stage, stages.rubricor_judge_stage,
            stages.router_stage, stages.eval_stage),
    pipelines=(
        Pipeline(
            "roro",
            "RoRo: rubric-guided process reward for a stepwise router.",
            # step models -> routing trajectories -> preference pairs -> Rubricor + Judge -> router GRPO ->
            # accuracy vs cost
            ("roro_models", "roro_trajectories", "roro_pairs", "roro_rubricor_judge", "roro_router", "roro_eval"),
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
    ),
    adapters=(ADAPTER, judge_tune.ADAPTER, judge_dose.ADAPTER),
    studies=tuple(pin_reading(d) for d in (*STUDIES, judge_tune.STUDY, judge_tune.FAMILIES_STUDY,
                                            judge_tune.READS_STUDY, judge_tune.CHECKED_STUDY,
                                            judge_tune.ONE_TOKENIZER_STUDY, judge_dose.STUDY,
                                            judge_dose.LONG_STUDY)),
    summary=summary_lines,
    commands=COMMANDS,
)
