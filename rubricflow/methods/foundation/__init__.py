"""The foundation every vision-language pipeline starts from: synthetic data, its Great Expectations gate, the tiny
base model built offline and the SFT warm start. It has no config section of its own (it reads the shared
``data``, ``models``, ``sft`` and ``generation`` sections) and no pipeline of its own: the RuCL pipeline (and the
smol one) name its stages."""

from rubricflow.methods.foundation import stages
from rubricflow.methods.foundation.summary import COMMANDS, summary_lines
from rubricflow.registry import Method

METHOD = Method(
    name="foundation",
    description="Data, validation gate, base model and SFT warm start shared by the pipelines.",
    stages=(stages.data_stage, stages.validate_stage, stages.base_model_stage, stages.sft_stage),
    summary=summary_lines,
    commands=COMMANDS,
)
