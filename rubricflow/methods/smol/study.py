"""The smol profile's study: RuCL on real weights (``study.rucl_smol``; its units are RuCL's)."""

from __future__ import annotations

from rubricflow.registry import StudyDecl
from rubricflow.study.spec import Claim, StudySpec


def rucl_smol_spec() -> StudySpec:
    return StudySpec(
        method="rucl",
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


STUDIES = (
    StudyDecl("rucl_smol", rucl_smol_spec,
              "RuCL on real weights (`rubricflow --profile smol study rucl_smol`): the SmolLM2-135M-Instruct SFT warm "
              "start, outcome-only GRPO and RuCL with LoRA on the text task, over seeds 101, 202, 303 (fewer seeds "
              "than the 5 a claim needs, so its verdicts are reported, not claimed)."),
)
