"""process_score = sum weight * score * satisfied, computed by code; missing criteria count 0 and are reported.
RoRo's rubrics and judgments are the kernel's rubric contract (``Rubric``, ``Verdict``, ``Judgment``, ``Parsed``)."""

import json

import pytest

from rubricflow.judge.protocol import Judgment, Parsed, Rubric, Verdict
from rubricflow.methods.roro.judge.rubric import (
    criterion,
    criterion_rows,
    from_criterion_rows,
    parse_criterion_judgments,
    parse_rubric,
    process_score,
    render_judgment_json,
    render_rubric_json,
)

RUBRIC = [criterion("LRM at step 2", 0.5), criterion("at most 1 LRM steps", 0.3), criterion("every step is right", 0.2)]


def test_hand_computed_score():
    verdicts = {
        "LRM at step 2": Verdict(True, True, score=1.0),  # 0.5 * 1.0 * 1 = 0.5
        "at most 1 LRM steps": Verdict(True, True, score=0.5),  # 0.3 * 0.5 * 1 = 0.15
        "every step is right": Verdict(True, False, score=1.0),  # 0.2 * 1.0 * 0 = 0
    }
    assert process_score(RUBRIC, verdicts) == pytest.approx(0.65)


def test_missing_criterion_counts_zero_and_is_reported():
    text = json.dumps({"criterion_judgments": [
        {"criterion": "LRM at step 2", "score": 0.5, "satisfied": True},  # 0.25
        {"criterion": "every step is right", "score": 1.0, "satisfied": True},  # 0.2
    ]})
    j = parse_criterion_judgments(text, RUBRIC)
    assert isinstance(j, Judgment) and j.status == "repaired" and j.incomplete
    assert j.score == pytest.approx(0.45)
    assert j.missing == ("at most 1 LRM steps",)


def test_unusable_judgment_is_missing_and_extra_is_dropped():
    text = json.dumps({"criterion_judgments": [
        {"criterion": "lrm  AT step 2", "score": 1.0, "satisfied": "maybe"},  # not a boolean: missing
        {"criterion": "at most 1 LRM steps", "score": "nan", "satisfied": True},  # not finite: missing
        {"criterion": "every step is right", "score": 1.0, "satisfied": True},
        {"criterion": "every step is right", "score": 0.0, "satisfied": True},  # duplicate: first counts
        {"criterion": "not in the rubric", "score": 1.0, "satisfied": True},
    ]})
    j = parse_criterion_judgments(text, RUBRIC)
    assert j.score == pytest.approx(0.2)
    assert j.missing == ("LRM at step 2", "at most 1 LRM steps")
    assert list(j.verdicts) == ["every step is right"]
    assert "criterion not in the rubric" in j.reason and "duplicate criterion" in j.reason


def test_criteria_match_case_and_whitespace_insensitively():
    text = json.dumps({"criterion_judgments": [{"criterion": "  lrm at   STEP 2 ", "score": 1.0, "satisfied": True}]})
    j = parse_criterion_judgments(text, RUBRIC)
    assert j.score == pytest.approx(0.5) and list(j.verdicts) == ["LRM at step 2"]


def test_empty_verdicts_score_zero():
    assert process_score(RUBRIC, {}) == 0.0


def test_rubric_rows_round_trip_the_rubricor_shape():
    rows = [{"criterion": "a", "weight": 0.75, "score_guidance": "g"}]
    assert criterion_rows(from_criterion_rows(rows)) == rows
    assert from_criterion_rows(rows) == [Rubric(id="a", text="a", weight=0.75, guidance="g")]


def test_parse_criterion_judgments_strict_ok_and_score():
    text = render_judgment_json({
        "LRM at step 2": Verdict(True, True, score=1.0),
        "at most 1 LRM steps": Verdict(True, False, score=1.0),
        "every step is right": Verdict(True, True, score=0.5),
    })
    pj = parse_criterion_judgments(text, RUBRIC)
    assert pj.status == "ok" and pj.reason is None
    assert pj.score == pytest.approx(0.5 + 0.1)


def test_parse_criterion_judgments_repaired_truncated_and_missing():
    text = 'Here: {"criterion_judgments": [{"criterion": "LRM at step 2", "score": 0.5, "satisfied": true}, {"crit'
    pj = parse_criterion_judgments(text, RUBRIC)
    assert pj.status == "repaired"
    assert pj.score == pytest.approx(0.25)
    assert pj.missing == ("at most 1 LRM steps", "every step is right")
    assert "missing: 2 criteria" in pj.reason


def test_parse_criterion_judgments_failed_is_missing_not_zero():
    pj = parse_criterion_judgments("I think it is fine.", RUBRIC)
    assert pj.status == "failed" and pj.score is None
    text = '{"criterion_judgments": [{"criterion": "LRM at step 2", "score": 3, "satisfied": true}]}'
    pj = parse_criterion_judgments(text, RUBRIC)
    assert pj.status == "failed" and pj.score is None
    assert "not a number in [0, 1]" in pj.reason


def test_parse_rubric_normalises_weights_and_reports_problems():
    text = render_rubric_json([criterion("a", 0.6, "g"), criterion("b", 0.2, "h")])
    pr = parse_rubric(text)
    assert isinstance(pr, Parsed) and pr.status == "ok"
    assert [c.weight for c in pr.value] == pytest.approx([0.75, 0.25])
    pr = parse_rubric('{"criteria": [{"criterion": "a", "weight": -1}, {"criterion": "b", "weight": "0.5"}]}')
    assert pr.status == "repaired" and [c.id for c in pr.value] == ["b"]
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
    assert criterion_rows(pr.value) == [{"criterion": "c", "weight": 1.0, "score_guidance": "g"}]
