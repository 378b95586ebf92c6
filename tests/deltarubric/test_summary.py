"""The run summary's DeltaRubric lines: accuracies in table order, the separating share apart from them."""

import json

import rubricflow.config  # noqa: F401
from rubricflow.methods.deltarubric.summary import summary_lines


def test_summary_lists_modes_in_order_and_the_separating_share_apart(tmp_path):
    report = {"sft/synthetic-test": {"deltarubric": 0.7, "reading": 0.6, "no_rubric": 0.5, "agreed": 0.5,
                                     "deltarubric_separating": 0.8, "deltarubric_format_violation": 0.0}}
    (tmp_path / "deltarubric_eval.json").write_text(json.dumps(report))
    assert summary_lines(tmp_path) == [
        "deltarubric sft/synthetic-test: no_rubric 50.0%, reading 60.0%, deltarubric 70.0%, agreed 50.0% "
        "(pair accuracy); separating checklists 80.0%"]


def test_summary_says_whether_the_planner_has_something_to_choose(tmp_path):
    """With the facts-executed share in the report: how many of the planner's checklists decide the pair, and how far
    the reference checklist is ahead of the planner's (issue 39, item 6)."""
    report = {"sft/synthetic-test": {"deltarubric": 0.6, "oracle": 0.85, "exhaustive": 0.7,
                                     "deltarubric_separating": 0.9, "deltarubric_deciding": 0.55}}
    (tmp_path / "deltarubric_eval.json").write_text(json.dumps(report))
    line, = summary_lines(tmp_path)
    assert "deltarubric_deciding" not in line and "oracle 85.0%" in line
    assert line.endswith("separating checklists 90.0%, deciding against the facts 55.0%; oracle gap +25.0%")
