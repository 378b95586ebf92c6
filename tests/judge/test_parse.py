"""parse_judgment: strict schema first, then tolerant repair; nothing is ever guessed or defaulted."""

import json

import pytest

from rubricflow.judge import parse_judgment

IDS = ["R01", "R02"]


def verdicts(j):
    return {k: (v.applicable, v.satisfied) for k, v in j.verdicts.items()}


def test_strict_schema_is_ok():
    text = json.dumps(
        {
            "verdicts": {
                "R01": {"rationale": "counts right", "applicable": True, "satisfied": False},
                "R02": {"rationale": "no computation", "applicable": False, "satisfied": None},
            }
        }
    )
    j = parse_judgment(text, IDS)
    assert j.status == "ok" and j.reason is None
    assert verdicts(j) == {"R01": (True, False), "R02": (False, None)}
    assert j.verdicts["R01"].rationale == "counts right"
    assert j.raw == text


@pytest.mark.parametrize(
    "text, expected, reason_part",
    [
        # RuCL case-study format: bare scores per id
        ('{"R01": 1, "R02": 0}', {"R01": (True, True), "R02": (True, False)}, "not the strict schema"),
        # code fence + prose + trailing comma + yes / N/A spellings
        (
            'Sure, here it is:\n```json\n{"R01": "yes", "R02": "N/A",}\n```\nLet me know.',
            {"R01": (True, True), "R02": (False, None)},
            "code fence",
        ),
        # prose around a strict-looking object
        (
            'My verdict: {"verdicts": {"R01": {"applicable": true, "satisfied": true}, "R02": '
            '{"applicable": true, "satisfied": false}}} -- end',
            {"R01": (True, True), "R02": (True, False)},
            "text around JSON",
        ),
        # per-rubric list with rubric_id, lower-case ids, string booleans
        (
            '[{"rubric_id": "r01", "applicable": "yes", "satisfied": "no"}, {"id": "R02", "applicable": false}]',
            {"R01": (True, False), "R02": (False, None)},
            "not the strict schema",
        ),
        # container key other than "verdicts", score spelling, null = not applicable
        (
            '{"results": {"R01": {"score": 1}, "R02": {"score": null}}}',
            {"R01": (True, True), "R02": (False, None)},
            "not the strict schema",
        ),
        # single quotes / Python literals
        ("{'R01': True, 'R02': None}", {"R01": (True, True), "R02": (False, None)}, "tolerant JSON repair"),
        # pass/fail words
        ('{"R01": "pass", "R02": "FAIL"}', {"R01": (True, True), "R02": (True, False)}, "not the strict schema"),
    ],
)
def test_tolerant_forms_are_repaired(text, expected, reason_part):
    j = parse_judgment(text, IDS)
    assert j.status == "repaired"
    assert verdicts(j) == expected
    assert reason_part in j.reason


def test_missing_rubric_is_absent_not_unsatisfied():
    j = parse_judgment('{"verdicts": {"R01": {"applicable": true, "satisfied": true}}}', IDS)
    assert j.status == "repaired"
    assert "R02" not in j.verdicts
    assert verdicts(j) == {"R01": (True, True)}
    assert "missing: R02" in j.reason


@pytest.mark.parametrize(
    "value",
    ["0.5", '"partly"', '"maybe"', "2", '{"applicable": true}', '{"applicable": "sometimes", "satisfied": true}'],
)
def test_unreadable_values_are_never_guessed(value):
    j = parse_judgment(f'{{"R01": {value}, "R02": true}}', IDS)
    assert j.status == "repaired"
    assert "R01" not in j.verdicts  # never turned into 0, 0.5 or a default
    assert verdicts(j) == {"R02": (True, True)}
    assert "R01: unreadable verdict" in j.reason


def test_truncated_json_keeps_only_complete_verdicts():
    full = json.dumps(
        {"verdicts": {"R01": {"applicable": True, "satisfied": False}, "R02": {"applicable": True, "satisfied": True}}}
    )
    cut = full[: full.index('"R02"') + 30]  # R02's satisfied value is cut off
    j = parse_judgment(cut, IDS)
    assert j.status == "repaired"
    assert verdicts(j) == {"R01": (True, False)}


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty judge output"),
        (None, "empty judge output"),
        ("   \n", "empty judge output"),
        ("I cannot grade this response.", "no JSON object found"),
        ('{"foo": 1, "bar": [1, 2]}', "no verdict for any requested rubric"),
        ('{"R07": true}', "no verdict for any requested rubric"),
        ('{"verdicts": {"R01": {"applicable": true, "satisfied": tr', "R01: unreadable verdict"),
    ],
)
def test_failures_have_reasons_and_no_verdicts(text, reason):
    j = parse_judgment(text, IDS)
    assert j.status == "failed"
    assert j.verdicts == {}
    assert reason in j.reason


def test_strict_requires_exact_ids_and_consistent_values():
    # applicable=false with satisfied=true is not strict; it is repaired to "not applicable"
    text = json.dumps(
        {"verdicts": {"R01": {"applicable": False, "satisfied": True}, "R02": {"applicable": True, "satisfied": True}}}
    )
    j = parse_judgment(text, IDS)
    assert j.status == "repaired"
    assert verdicts(j) == {"R01": (False, None), "R02": (True, True)}
    # an extra id: not strict, extra ignored
    text = json.dumps({"verdicts": {r: {"applicable": True, "satisfied": True} for r in ["R01", "R02", "R09"]}})
    j = parse_judgment(text, IDS)
    assert j.status == "repaired" and set(j.verdicts) == {"R01", "R02"}
