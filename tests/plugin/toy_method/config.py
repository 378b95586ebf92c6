from pydantic import Field

from rubricflow.sections import Section


class ToyConfig(Section):
    n: int = Field(3, ge=1, description="How far to count.")
    scale: float = Field(1.0, gt=0, description="Score per counted step.")
    out_dir: str = Field("artifacts/toy", description="Where the count is written.")
