"""DeltaRubric's judge modes (how a verdict is reached; ``evaluate`` describes each), torch-free so that any module
can name them.

``MODES`` is every mode the evaluation knows, in table order; ``SINGLE_STEP`` the modes that write a verdict without
a checklist (each trainable alone, ``train.judge``); ``CONTROLS`` the modes that test the verifier rather than
compete as a judge (reported by the eval stage, not compared in studies); ``COMPARED_MODES`` the rest;
``TrainedJudge`` what GRPO can train (``train.judge``: the planner + verifier, or one single-step mode alone).
"""

from typing import Literal

SINGLE_STEP = ("no_rubric", "static", "reading", "generative")
MODES = (*SINGLE_STEP, "deltarubric", "exhaustive", "oracle", "agreed")
CONTROLS = ("agreed",)
COMPARED_MODES = tuple(m for m in MODES if m not in CONTROLS)
TrainedJudge = Literal[("deltarubric", *SINGLE_STEP)]  # type: ignore[valid-type]
