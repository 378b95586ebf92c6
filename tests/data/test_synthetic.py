"""Synthetic generators: determinism, recorded facts that agree with answers, and the trace format."""

import hashlib

import pytest

from rubricflow.data.schema import load_images, read_dataset
from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.traces import extract_boxed, parse_claims, parse_value, render_trace, values_equal

SIZES = {"train": 12, "val": 2, "test": 6, "calib": 3}
TASKS = ["counting", "barchart", "geometry"]


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("syn")
    build_synthetic_dataset(d, TASKS, SIZES, seed=7, image_size=56)
    return d


def _digest(d):
    h = hashlib.sha256()
    for p in sorted((d / "images").iterdir()):
        h.update(p.name.encode() + p.read_bytes())
    h.update((d / "samples.parquet").read_bytes())
    return h.hexdigest()


def test_deterministic_by_seed(tmp_path, ds):
    a, b = tmp_path / "a", tmp_path / "b"
    build_synthetic_dataset(a, TASKS, SIZES, seed=7, image_size=56)
    build_synthetic_dataset(b, TASKS, SIZES, seed=8, image_size=56)
    assert _digest(a) == _digest(ds)
    assert _digest(b) != _digest(ds)


def test_splits_tasks_and_small_images(ds):
    samples = read_dataset(ds)
    assert len(samples) == sum(SIZES.values()) * len(TASKS)
    assert {s.split for s in samples} == set(SIZES)
    assert len({s.id for s in samples}) == len(samples)
    im = load_images(ds, samples[0])[0]
    assert im.size == (56, 56)


def test_facts_determine_the_answer(ds):
    for s in read_dataset(ds):
        per = dict((k, tuple(v) if isinstance(v, list) else v) for k, v in s.facts["perception"])
        inter = dict(s.facts["intermediate"])
        if s.task == "counting":
            assert str(per[s.facts["target"]]) == s.answer
        elif s.task == "barchart":
            hi, lo = max(per.values()), min(per.values())
            if s.facts["question_type"] == "tallest":
                assert s.answer == max(per, key=per.get) and inter["max"] == hi
            elif s.facts["question_type"] == "sum":  # two additions over every read value, with their steps
                assert int(s.answer) == sum(per.values()) == inter["total"] and inter["s"] == per["A"] + per["B"]
                assert s.facts["steps"] == [["s", "+", "A", "B"], ["total", "+", "s", "C"]]
            else:
                assert int(s.answer) == hi - lo == inter["diff"]
        else:
            (x1, y1), (x2, y2) = per["P"], per["Q"]
            assert inter["dx"] == abs(x2 - x1) and inter["dy"] == abs(y2 - y1)
            assert values_equal(s.answer, abs(x2 - x1) * abs(y2 - y1) / 2)


def test_gold_trace_round_trips_through_the_claim_parser(ds):
    for s in read_dataset(ds):
        trace = render_trace(s.facts, s.answer)
        assert extract_boxed(trace) == s.answer
        claims = dict(parse_claims(trace))
        for k, v in s.facts["perception"]:
            assert values_equal(claims[k], v), (s.id, k)
        for k, v in s.facts["intermediate"]:
            assert values_equal(claims[k], v), (s.id, k)


def test_claim_parser_edge_cases():
    assert parse_claims("P = (1, 2), dx=3. \\boxed{4}") == [("P", "(1, 2)"), ("dx", "3")]
    assert parse_claims("area = 4 \\boxed{x = 5}") == [("area", "4")]  # claims inside the box don't count
    assert extract_boxed("a \\boxed{1} then \\boxed{ 2 }") == "2"
    assert extract_boxed("no box") is None
    assert parse_value("(1, -2)") == (1, -2) and parse_value("4.50") == 4.5 and parse_value("B") == "B"
    assert values_equal("3", 3.0) and not values_equal("3", "4") and values_equal("b", "B")


@pytest.mark.parametrize("size", [28, 56, 112])
def test_wide_generators_have_the_keys_asked_and_facts_that_determine_the_answer(tmp_path, size):
    from PIL import Image

    from rubricflow.data.synthetic import WIDE_COLORS, WIDE_GRID, WIDE_SPREAD, generate_samples

    samples = generate_samples(["counting", "barchart"], {"train": 12}, 7, size, tmp_path, keys=10)
    narrow = generate_samples(["counting"], {"train": 12}, 7, size, tmp_path / "narrow")
    assert [s.facts for s in samples[:12]] != [s.facts for s in narrow]  # seeded apart from the narrow images
    for s in samples:
        assert Image.open(tmp_path / s.images[0]).size == (size, size)
        per = dict(s.facts["perception"])
        assert len(per) == 10
        trace = render_trace(s.facts, s.answer)
        assert dict(parse_claims(trace))[next(iter(per))] == str(next(iter(per.values())))
        if s.task == "counting":
            assert list(per) == list(WIDE_COLORS)[:10] and 1 <= sum(per.values()) <= WIDE_GRID**2
            assert str(per[s.facts["target"]]) == s.answer
        else:
            # labelled apart from the responses' names A, B and geometry's points P, Q (keys the checks fix)
            assert list(per) == list("CDEFGHIJKL") and max(per.values()) - min(per.values()) >= WIDE_SPREAD
            assert s.question.startswith("Bars C to L from left to right.")
            assert int(s.answer) == max(per.values()) - min(per.values()) == dict(s.facts["intermediate"])["diff"]
    with pytest.raises(ValueError, match="keys must be in 5..12"):
        generate_samples(["barchart"], {"train": 1}, 7, size, tmp_path / "x", keys=13)
