"""The judge modes: every mode in table order, the control, the compared judges; evaluate uses the same list."""

import rubricflow.config  # noqa: F401
from rubricflow.methods.deltarubric import evaluate
from rubricflow.methods.deltarubric.config import DRTrainConfig
from rubricflow.methods.deltarubric.modes import COMPARED_MODES, CONTROLS, MODES, SINGLE_STEP
from rubricflow.methods.deltarubric.roles import ROLES


def test_the_mode_lists():
    assert MODES == ("no_rubric", "static", "reading", "generative", "deltarubric", "exhaustive", "oracle", "agreed")
    assert CONTROLS == ("agreed",) and COMPARED_MODES == ("no_rubric", "static", "reading", "generative",
                                                          "deltarubric", "exhaustive", "oracle")
    assert evaluate.MODES is MODES


def test_every_single_step_mode_is_a_role_and_trainable_alone():
    assert all(ROLES[m].name == m and not ROLES[m].needs_checklist for m in SINGLE_STEP)
    assert set(DRTrainConfig.model_fields["judge"].annotation.__args__) == {"deltarubric", *SINGLE_STEP}
