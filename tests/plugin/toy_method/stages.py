from rubricflow.pipeline.stage import StageContext, stage
from tests.plugin.toy_method.config import ToyConfig
from tests.plugin.toy_method.logic import count


@stage("toy_count")
def count_stage(toy: ToyConfig, ctx: StageContext) -> dict:
    """Count to toy.n and score it."""
    return count(toy.n, toy.scale, ctx.seed, toy.out_dir)
