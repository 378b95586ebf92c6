"""Trajectories of different policies that made the same decisions are one trajectory."""

from rubricflow.methods.roro.env.trajectories import dedupe
from tests.roro.test_pairs import L, S, traj


def test_dedupe_merges_identical_routes():
    a = traj("a", [S, L], [True, False], True, policy="random-0.5")
    b = traj("a", [S, L], [True, False], True, policy="threshold-0.3")
    c = traj("a", [L, L], [True, False], True)
    assert [t.policy for t in dedupe([a, b, c])] == ["random-0.5", "p"]
