"""What training starts from: the planner probe's validation pairs and the per-role completion caps."""

import rubricflow.config  # noqa: F401
from rubricflow.data.pairs import PreferencePair
from rubricflow.methods.deltarubric.config import DRTrainConfig, role_max_tokens
from rubricflow.methods.deltarubric.train import probe_subset


def _pairs(n):
    return [PreferencePair(f"p{i}", ["i.png"], "q", "a", "b", "A") for i in range(n)]


def test_probe_subset_spreads_over_the_split():
    assert [p.id for p in probe_subset(_pairs(12), 4)] == ["p0", "p3", "p6", "p9"]
    assert [p.id for p in probe_subset(_pairs(10), 4)] == ["p0", "p2", "p4", "p6"]
    assert [p.id for p in probe_subset(_pairs(3), 16)] == ["p0", "p1", "p2"]  # fewer pairs than asked: all


def test_role_max_tokens_reads_the_train_section():
    assert role_max_tokens(DRTrainConfig(planner_max_tokens=12, verifier_max_tokens=30)) == {
        "planner": 12, "verifier": 30}
