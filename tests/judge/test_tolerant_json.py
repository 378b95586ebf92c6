"""The tolerant JSON loader shared by the judge, RoRo's parsers and the rubric teacher: candidates in order, strict
before json-repair, notes saying what was done, nothing usable is ``failed``."""

from rubricflow.judge.tolerant_json import candidates, load_json, loads_candidates


def test_candidates_most_specific_first():
    text = 'Sure:\n```json\n{"a": 1,}\n```\nbye'
    assert candidates(text) == [
        ('{"a": 1,}\n', "code fence"),
        ('{"a": 1,}', "text around JSON"),
        ('{"a": 1,}\n```\nbye', "text before JSON"),
        (text, ""),
    ]
    assert candidates('{"a": 1}') == [('{"a": 1}', "")]  # nothing around it: the whole text only
    assert candidates('{"a": 1} ok') == [('{"a": 1}', "text around JSON"), ('{"a": 1} ok', "")]
    assert candidates("no json") == [("no json", "")]


def test_loads_candidates_strict_then_repair_and_only_non_empty_containers():
    out = list(loads_candidates('Here: {"a": 1} -- end'))
    assert out[0] == ({"a": 1}, ["text around JSON"])  # strict read of the cut-out span: no repair note
    assert out[1] == ({"a": 1}, ["text before JSON", "tolerant JSON repair"])
    assert list(loads_candidates("{'a': True}")) == [({"a": True}, ["tolerant JSON repair"])]
    assert list(loads_candidates("Here: {} and 5")) == []  # empty objects and scalars are not candidates


def test_load_json_statuses():
    assert load_json('{"a": 1}') == ({"a": 1}, "ok", [])
    obj, status, notes = load_json('```json\n{"a": 1,}\n```')
    assert obj == {"a": 1} and status == "repaired" and "code fence" in notes
    obj, status, _ = load_json("nothing here")
    assert obj is None and status == "failed"
    assert load_json("") == (None, "failed", ["empty output"])
    assert load_json(None) == (None, "failed", ["empty output"])
    assert load_json("nothing here") == (None, "failed", ["no JSON object found"])
    assert load_json("5") == (5, "ok", [])  # the whole text read strictly is returned as it is
    assert load_json('Verdict: {"a": 1} done') == ({"a": 1}, "repaired", ["text around JSON"])
