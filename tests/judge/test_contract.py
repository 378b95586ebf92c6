"""The kernel's one rubric contract: a rubric criterion with weight and guidance, graded verdicts, the weighted
score, and the ``Parsed`` statuses; the three methods' rubrics are instances of it."""

import pytest

from rubricflow.judge.protocol import Judgment, Parsed, Rubric, Verdict, weighted_score


def test_a_rubric_without_weight_or_guidance_is_written_as_before():
    r = Rubric("C01", "The counts match the image.", tier="foundational", category="visual_faithfulness")
    assert r.to_dict() == {"id": "C01", "text": "The counts match the image.", "tier": "foundational",
                           "category": "visual_faithfulness", "check": None, "provenance": ""}
    assert Rubric.from_dict(r.to_dict()) == r
    w = Rubric("few LRM steps", "few LRM steps", weight=0.25, guidance="1.0 if at most 1 LRM steps")
    assert w.to_dict()["weight"] == 0.25 and w.to_dict()["guidance"] == "1.0 if at most 1 LRM steps"
    assert Rubric.from_dict(w.to_dict()) == w


@pytest.mark.parametrize("weight", [-0.1, "0.5", True, float("nan")])
def test_a_bad_weight_is_refused_naming_the_field(weight):
    with pytest.raises(ValueError, match=r"pool.json C01: field `weight` must be a number >= 0"):
        Rubric.from_dict({"id": "C01", "text": "t", "weight": weight}, where="pool.json")


def test_credit_counts_a_graded_score_only_when_satisfied_and_applicable():
    assert Verdict(True, True).credit == 1.0  # ungraded: full credit
    assert Verdict(True, True, score=0.5).credit == 0.5
    assert Verdict(True, False, score=1.0).credit == 0.0
    assert Verdict(False, None).credit == 0.0  # not applicable
    assert Verdict(True, True).to_dict() == {"applicable": True, "satisfied": True, "rationale": ""}
    assert Verdict(True, True, score=0.5).to_dict()["score"] == 0.5


def test_weighted_score_counts_missing_rubrics_zero_and_lists_them():
    rubrics = [Rubric("a", "a", weight=0.5), Rubric("b", "b", weight=0.3), Rubric("c", "c", weight=0.2)]
    score, missing = weighted_score(rubrics, {"a": Verdict(True, True, score=0.5), "c": Verdict(True, True)})
    assert score == pytest.approx(0.25 + 0.2) and missing == ["b"]
    j = Judgment("ok", {"a": Verdict(True, True)}, score=0.5)
    assert "score" not in j.to_dict()  # the aggregate is the method's, not part of the stored judgment


def test_parsed_statuses():
    assert Parsed("ok", [1]).ok and not Parsed("ok", [1]).failed
    assert Parsed("repaired", [1], reason="text around JSON").ok
    failed = Parsed("failed", reason="no `criteria` list")
    assert failed.failed and not failed.ok and failed.value is None


def test_each_method_speaks_the_contract():
    from rubricflow.methods.deltarubric.roles import ROLES
    from rubricflow.methods.roro.judge.rubric import parse_criterion_judgments, parse_rubric

    plan = ROLES["planner"].parse("1. the red count\n2. the final answer")
    assert isinstance(plan, Parsed) and plan.status == "ok" and plan.value == ["the red count", "the final answer"]
    bad = ROLES["planner"].parse("Response A is better")
    assert isinstance(bad, Parsed) and bad.failed and "checklist" in bad.reason
    rubric = parse_rubric('{"criteria": [{"criterion": "x", "weight": 2, "score_guidance": "g"}]}')
    assert isinstance(rubric, Parsed) and all(isinstance(c, Rubric) for c in rubric.value)
    j = parse_criterion_judgments('{"criterion_judgments": [{"criterion": "x", "score": 0.5, "satisfied": true}]}',
                                  rubric.value)
    assert isinstance(j, Judgment) and j.verdicts["x"] == Verdict(True, True, score=0.5) and j.score == 0.5
