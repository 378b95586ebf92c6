"""The judge modes: every mode in table order, the control, the compared judges; evaluate uses the same list."""

import rubricflow.config  # noqa: F401
from rubricflow.methods.deltarubric import evaluate
from rubricflow.methods.deltarubric.modes import COMPARED_MODES, CONTROLS, MODES


def test_the_mode_lists():
    assert MODES == ("no_rubric", "static", "deltarubric", "oracle", "agreed")
    assert CONTROLS == ("agreed",) and COMPARED_MODES == ("no_rubric", "static", "deltarubric", "oracle")
    assert evaluate.MODES is MODES
