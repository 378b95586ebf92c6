"""DeltaRubric: a Disagreement Planner and a Checklist Verifier in one policy, trained by multi-role GRPO.

The pairs it judges use the kernel's schema (``rubricflow.data.pairs``). The modules: synthetic (pair generator),
modes (the judge modes), prompts and parsing (the roles' templates and parsers), roles (role = template + parser +
reward), rewards (pure math), targets (SFT targets from facts), planning (checklists executed against the facts:
does the planner have something to choose), examples (the warm start's examples), warmstart (the warm start), bars
(the warm start to a bar), rollout (multi-role episodes), train, evaluate (judge accuracy tables), stages (thin
bindings), study (the study adapter), study_specs (its studies), summary (summary lines, ``rubricflow eval-judge``
and ``rubricflow checklist-room``).
"""

from rubricflow.methods.deltarubric import stages
from rubricflow.methods.deltarubric.config import DeltaRubricConfig
from rubricflow.methods.deltarubric.study import ADAPTER
from rubricflow.methods.deltarubric.study_specs import STUDIES
from rubricflow.methods.deltarubric.summary import COMMANDS, summary_lines
from rubricflow.registry import Method, Pipeline, SectionDecl

METHOD = Method(
    name="deltarubric",
    description="DeltaRubric: planner + checklist verifier, multi-role GRPO.",
    sections=(SectionDecl("deltarubric", DeltaRubricConfig,
                          "DeltaRubric: pairs, roles, multi-role GRPO, evaluation."),),
    stages=(stages.pairs_stage, stages.sft_stage, stages.train_stage, stages.eval_stage),
    pipelines=(
        Pipeline(
            "deltarubric",
            "DeltaRubric: planner + checklist verifier, multi-role GRPO.",
            # preference pairs -> warm-start SFT (builds its own tiny base) -> multi-role GRPO -> judge tables
            ("deltarubric_pairs", "deltarubric_sft", "deltarubric_train", "deltarubric_eval"),
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
    ),
    adapters=(ADAPTER,),
    studies=STUDIES,
    summary=summary_lines,
    commands=COMMANDS,
)
