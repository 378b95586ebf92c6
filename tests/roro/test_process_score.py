"""process_score = sum weight * score * satisfied, computed by code; missing criteria count 0 and are reported."""

import pytest

from rubricflow.methods.roro.judge.rubric import (
    parse_criterion_judgments,
    parse_rubric,
    process_score,
    render_judgment_json,
    render_rubric_json,
    score_judgments,
)

RUBRIC = [
    {"criterion": "LRM at step 2", "weight": 0.5},
    {"criterion": "at most 1 LRM steps", "weight": 0.3},
    {"criterion": "every step is right", "weight": 0.2},
]


def test_hand_computed_score():
    judgments = [
        {"criterion": "LRM at step 2", "score": 1.0, "satisfied": True},  # 0.5 * 1.0 * 1 = 0.5
        {"criterion": "at most 1 LRM steps", "score": 0.5, "satisfied": True},  # 0.3 * 0.5 * 1 = 0.15
        {"criterion": "every step is right", "score": 1.0, "satisfied": False},  # 0.2 * 1.0 * 0 = 0
    ]
    assert process_score(RUBRIC, judgments) == pytest.approx(0.65)
    assert score_judgments(RUBRIC, judgments).missing == []


def test_missing_criterion_counts_zero_and_is_reported():
    judgments = [
        {"criterion": "LRM at step 2", "score": 0.5, "satisfied": True},  # 0.25
        {"criterion": "every step is right", "score": 1.0, "satisfied": True},  # 0.2
    ]
    res = score_judgments(RUBRIC, judgments)
    assert res.score == pytest.approx(0.45)
    assert res.missing == ["at most 1 LRM steps"]
    assert process_score(RUBRIC, judgments) == pytest.approx(0.45)


def test_unusable_judgment_is_missing_and_extra_is_ignored():
    judgments = [
        {"criterion": "lrm  AT step 2", "score": 1.0, "satisfied": "yes"},  # not a bool: missing
        {"criterion": "at most 1 LRM steps", "score": float("nan"), "satisfied": True},  # not finite: missing
        {"criterion": "every step is right", "score": 1.0, "satisfied": True},
        {"criterion": "every step is right", "score": 0.0, "satisfied": True},  # duplicate: first counts
        {"criterion": "not in the rubric", "score": 1.0, "satisfied": True},
    ]
    res = score_judgments(RUBRIC, judgments)
    assert res.score == pytest.approx(0.2)
    assert res.missing == ["LRM at step 2", "at most 1 LRM steps"]
    assert res.extra == ["not in the rubric"]


def test_criteria_match_case_and_whitespace_insensitively():
    j = [{"criterion": "  lrm at   STEP 2 ", "score": 1.0, "satisfied": True}]
    assert process_score(RUBRIC, j) == pytest.approx(0.5)


def test_empty_judgments_score_zero_all_missing():
    res = score_judgments(RUBRIC, [])
    assert res.score == 0.0 and len(res.missing) == 3


def test_parse_criterion_judgments_strict_ok_and_score():
    text = render_judgment_json([
        {"criterion": "LRM at step 2", "score": 1.0, "satisfied": True},
        {"criterion": "at most 1 LRM steps", "score": 1.0, "satisfied": False},
        {"criterion": "every step is right", "score": 0.5, "satisfied": True},
    ])
    pj = parse_criterion_judgments(text, RUBRIC)
    assert pj.status == "ok" and pj.reason is None
    assert pj.score == pytest.approx(0.5 + 0.1)


def test_parse_criterion_judgments_repaired_truncated_and_missing():
    text = 'Here: {"criterion_judgments": [{"criterion": "LRM at step 2", "score": 0.5, "satisfied": true}, {"crit'
    pj = parse_criterion_judgments(text, RUBRIC)
    assert pj.status == "repaired"
    assert pj.score == pytest.approx(0.25)
    assert pj.missing == ["at most 1 LRM steps", "every step is right"]
    assert "missing: 2 criteria" in pj.reason


def test_parse_criterion_judgments_failed_is_missing_not_zero():
    pj = parse_criterion_judgments("I think it is fine.", RUBRIC)
    assert pj.status == "failed" and pj.score is None
    text = '{"criterion_judgments": [{"criterion": "LRM at step 2", "score": 3, "satisfied": true}]}'
    pj = parse_criterion_judgments(text, RUBRIC)
    assert pj.status == "failed" and pj.score is None
    assert "not a number in [0, 1]" in pj.reason


def test_parse_rubric_normalises_weights_and_reports_problems():
    text = render_rubric_json([{"criterion": "a", "weight": 0.6, "score_guidance": "g"},
                               {"criterion": "b", "weight": 0.2, "score_guidance": "h"}])
    pr = parse_rubric(text)
    assert pr.status == "ok"
    assert [c["weight"] for c in pr.criteria] == pytest.approx([0.75, 0.25])
    pr = parse_rubric('{"criteria": [{"criterion": "a", "weight": -1}, {"criterion": "b", "weight": "0.5"}]}')
    assert pr.status == "repaired" and [c["criterion"] for c in pr.criteria] == ["b"]
    assert "`weight` -1 is not a number >= 0" in pr.reason and "no `score_guidance`" in pr.reason
    assert parse_rubric('{"criteria": []}').status == "failed"
    assert parse_rubric("").status == "failed"


def test_parse_rubric_reads_the_json_between_prose():
    """The shared tolerant loader tries the span from the first to the last bracket before the text from the first
    bracket on, so a complete rubric followed by a cut-off second object is read (json-repair on the text from the
    first bracket returned both objects as a list, and the rubric failed)."""
    text = ('Rubric: {"criteria": [{"criterion": "c", "weight": 1, "score_guidance": "g"}]} '
            'and {"criterion": "e"')
    pr = parse_rubric(text)
    assert pr.status == "repaired" and pr.reason == "text around JSON"
    assert pr.criteria == [{"criterion": "c", "weight": 1.0, "score_guidance": "g"}]
