"""A fourth method defined only here, in the one shape every method has (config, logic, stages, study, summary),
registered through the ``rubricflow.methods`` entry-point group by ``tests/plugin/test_plugin.py``: nothing in
``rubricflow/`` names it."""

from rubricflow.registry import Method, Pipeline, SectionDecl
from tests.plugin.toy_method import stages
from tests.plugin.toy_method.config import ToyConfig
from tests.plugin.toy_method.study import ADAPTER, STUDIES
from tests.plugin.toy_method.summary import summary_lines

METHOD = Method(
    name="toy",
    description="A toy method: counts to `toy.n` and scores the count.",
    sections=(SectionDecl("toy", ToyConfig, "The toy method's settings."),),
    stages=(stages.count_stage,),
    pipelines=(Pipeline("toy", "Toy: count, then score.", ("toy_count",), compare="toy_count",
                        knobs={"n": "toy.n"}, dvc_file="tests/plugin/toy_method/dvc.yaml"),),
    adapters=(ADAPTER,),
    studies=STUDIES,
    summary=summary_lines,
)
