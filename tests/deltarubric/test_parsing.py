"""The roles' parsers: the planner's checklist contract (strict) and verdicts (tolerant)."""

import pytest

from rubricflow.methods.deltarubric.parsing import parse_checklist, parse_verdict


@pytest.mark.parametrize(
    "text, checks",
    [
        ("1. count the red shapes.\n2. check the final answer.", ["count the red shapes.", "check the final answer."]),
        ("1) read bar A\n2) read bar B\n3) find the tallest bar", ["read bar A", "read bar B", "find the tallest bar"]),
        ("- locate P\n* locate Q\n\u2022 measure dx\n- measure dy",
         ["locate P", "locate Q", "measure dx", "measure dy"]),
        ("1. count red 2. read the height of bar B", ["count red", "read the height of bar B"]),
        ("Checks:\n1. x\n2. y", ["x", "y"]),
        ("1. count the red\n   shapes in the left cells\n2. y", ["count the red shapes in the left cells", "y"]),
    ],
)
def test_checklist_accepts_numbered_or_bulleted(text, checks):
    assert parse_checklist(text) == checks


@pytest.mark.parametrize(
    "text, reason",
    [
        ("1. count the red shapes.", "1 check(s); expected 2-4"),
        ("1. a\n2. b\n3. c\n4. d\n5. e", "5 checks; expected 2-4"),
        ("", "empty output"),
        ("count the red shapes and the blue ones", "no numbered or bulleted checks found"),
        ("Here is my plan:\n1. a\n2. b", "preamble before the first check: 'Here is my plan:'"),
        ("1. a\n2. a.", "check 2 duplicates an earlier check"),
        ("1. a\n2. .", "check 2 is empty"),
        # naming a response
        ("1. does Response A count 2 red shapes?\n2. check the answer.", "check 1 names a response ('Response A')"),
        ("1. check response b's count\n2. x", "check 1 names a response ('response b')"),
        ("1. x\n2. verify the second response's total", "check 2 names a response ('second response')"),
        ("1. x\n2. is answer B right", "check 2 names a response ('answer B')"),
        ("1. x\n2. [[A]]", "check 2 names a response ('[[A]]')"),
        ("1. assistant 2 miscounts\n2. x", "check 1 names a response ('assistant 2')"),
        # naming a winner
        ("1. count red\n2. B is better", "check 2 names a winner ('better')"),
        ("1. the winner reads bar C right\n2. x", "check 1 names a winner ('winner')"),
        ("1. x\n2. A should be preferred", "check 2 names a winner ('preferred')"),
        ("1. x\n2. verdict depends on red", "check 2 names a winner ('verdict')"),
    ],
)
def test_checklist_rejects_with_reason(text, reason):
    with pytest.raises(ValueError) as e:
        parse_checklist(text)
    assert reason in str(e.value)


def test_bar_labels_are_not_response_names():
    # "bar A" / "bar B" are chart labels, not responses: allowed
    assert parse_checklist("1. read the height of bar A.\n2. read the height of bar B.") == [
        "read the height of bar A.",
        "read the height of bar B.",
    ]


@pytest.mark.parametrize(
    "text, verdict, checks",
    [
        ("1. red = 2 -> A\n2. answer = 2 -> both\nverdict: A", "A", [("red = 2", "A"), ("answer = 2", "both")]),
        ("1. C = 4 -> neither\n2. max = 5 favours B\nFinal Verdict - [[B]]", "B",
         [("C = 4", "neither"), ("max = 5", "B")]),
        ("[[A]]", "A", []),
        ("Response B is better.", "B", []),
        ("verdict: A ... on reflection verdict: B", "B", []),
        ("1. relevance -> tie\nverdict:B", "B", [("relevance", "both")]),
    ],
)
def test_verdict_tolerant(text, verdict, checks):
    v = parse_verdict(text)
    assert v.ok and v.verdict == verdict and v.checks == checks and v.reason is None


@pytest.mark.parametrize(
    "text, reason",
    [("", "empty output"), ("1. red = 2 -> A", "no verdict"), ("verdict: a tie", "no verdict"),
     ("verdict: C", "no verdict")],
)
def test_verdict_missing_is_a_format_failure(text, reason):
    v = parse_verdict(text)
    assert not v.ok and v.verdict is None and reason in v.reason
