"""The Rubricor's view of a problem."""

import pytest

from rubricflow.methods.roro.judge.rubricor import problem_views
from tests.roro.test_judge import _traj


def test_problem_views_need_the_all_slm_route():
    # the view is the route with no LRM call, whatever policy produced it; a policy named all-slm is not enough
    with pytest.raises(ValueError, match="no all-slm trajectory for problems \\['p1'\\]"):
        problem_views([_traj(policy="random-0.5"), _traj(policy="all-slm")])
