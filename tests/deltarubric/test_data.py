"""DeltaRubric pair schema, data gate and synthetic pair generator."""

import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from rubricflow.data.traces import extract_boxed, parse_claims
from rubricflow.methods.deltarubric.data import (
    PAIRS_PARQUET,
    PairDataError,
    PreferencePair,
    check_pairs,
    load_pair_images,
    read_pairs,
    validate_pairs,
    write_pairs,
)
from rubricflow.methods.deltarubric.synthetic import build_pairs, corrupt, derive, response_text, severity


def _img(d, name="x.png"):
    (d / "images").mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (255, 0, 0)).save(d / "images" / name)
    return f"images/{name}"


def _pairs(d, n=20):
    rel = _img(d)
    return [
        PreferencePair(f"p{i}", [rel], "q?", f"a{i}", f"b{i}", "A" if i % 2 else "B", "test", "cat", "src", {"k": i}, {})
        for i in range(n)
    ]


def test_roundtrip_preserves_every_field(tmp_path):
    pairs = _pairs(tmp_path, 4)
    pairs[0].meta = {"errors": ["count"]}
    write_pairs(tmp_path, pairs)
    back = read_pairs(tmp_path)
    assert back == pairs
    assert read_pairs(tmp_path, split="train") == []
    assert load_pair_images(tmp_path, back[0])[0].size == (8, 8)
    assert validate_pairs(tmp_path) == {"n_pairs": 4, "frac_a": {"test": 0.5}}


def test_swapped_flips_order_and_preference():
    p = PreferencePair("x", ["i.png"], "q", "good", "bad", "A")
    s = p.swapped()
    assert (s.response_a, s.response_b, s.preferred, s.meta["swapped"]) == ("bad", "good", "B", True)
    assert s.swapped().preferred == "A" and s.swapped().meta["swapped"] is False


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda ps: setattr(ps[3], "preferred", "C"), "preferred: expected 'A' or 'B', got 'C' in rows 'p3'"),
        (lambda ps: setattr(ps[2], "response_b", " a2 "), "response_a == response_b in 1 rows: 'p2'"),
        (lambda ps: setattr(ps[5], "id", "p4"), "ids: 1 duplicate ids: 'p4'"),
        (lambda ps: setattr(ps[1], "question", ""), "nulls: column `question` is null or empty in 1 rows: 'p1'"),
        (lambda ps: setattr(ps[6], "images", ["images/missing.png"]), "images: 1 image files do not exist: 'p6:images/missing.png'"),
        (lambda ps: [setattr(p, "preferred", "A") for p in ps[:16]], "balance: split `test` prefers A in 18/20 pairs (0.90)"),
        (lambda ps: setattr(ps[0], "split", "dev"), "split: expected one of"),
    ],
)
def test_gate_names_each_problem(tmp_path, mutate, message):
    pairs = _pairs(tmp_path)
    mutate(pairs)
    write_pairs(tmp_path, pairs)
    with pytest.raises(PairDataError) as e:
        validate_pairs(tmp_path, balance_tol=0.1)
    assert message in str(e.value)
    assert str(tmp_path / PAIRS_PARQUET) in str(e.value)


def test_gate_catches_undecodable_image_schema_and_skips_balance(tmp_path):
    pairs = _pairs(tmp_path)
    (tmp_path / "images" / "bad.png").write_bytes(b"not a png")
    pairs[0].images = ["images/bad.png"]
    write_pairs(tmp_path, pairs)
    problems, _ = check_pairs(tmp_path)
    assert problems == ["images: 1 image files do not decode: 'p0:images/bad.png'"]
    # a benchmark may be unbalanced: balance_tol=None skips that check only
    for p in pairs[1:16]:
        p.preferred = "A"
    pairs[0].images = pairs[1].images
    write_pairs(tmp_path, pairs)
    assert validate_pairs(tmp_path, balance_tol=None)["frac_a"]["test"] == pytest.approx(0.85)
    # a wrong schema (missing column) is reported by name
    t = pq.read_table(tmp_path / PAIRS_PARQUET).drop(["preferred"])
    pq.write_table(t, tmp_path / PAIRS_PARQUET)
    with pytest.raises(PairDataError, match=r"column `preferred` is missing"):
        validate_pairs(tmp_path)
    pq.write_table(t.append_column("preferred", pa.array([1] * t.num_rows)), tmp_path / PAIRS_PARQUET)
    with pytest.raises(PairDataError, match=r"column `preferred` has type int64, expected string"):
        validate_pairs(tmp_path)


def test_derive_reproduces_generator_answers(tmp_path):
    pairs = build_pairs(tmp_path, ["counting", "barchart", "geometry"], {"train": 12}, seed=3)
    for p in pairs:
        facts, ans = derive(p.facts, p.facts["perception"])
        assert ans == p.meta["answer"], p.id
        assert facts["intermediate"] == p.facts["intermediate"]


def test_synthetic_pairs_are_balanced_consistent_and_pass_the_gate(tmp_path):
    pairs = build_pairs(tmp_path, ["counting", "barchart", "geometry"], {"train": 30, "test": 10}, seed=7, partial_frac=0.4)
    stats = validate_pairs(tmp_path, balance_tol=0.0)  # exactly balanced
    assert stats == {"n_pairs": 120, "frac_a": {"test": 0.5, "train": 0.5}}
    kinds = {p.meta["kind"] for p in pairs}
    assert kinds == {"decisive", "partial"}
    cats = {p.category for p in pairs}
    assert {"counting/count", "counting/colour", "barchart/value", "barchart/relation", "geometry/value",
            "geometry/relation"} <= cats
    for p in pairs:
        good = p.response(p.preferred)
        bad = p.response("B" if p.preferred == "A" else "A")
        assert severity(good, p.facts) < severity(bad, p.facts), p.id
        assert p.meta["severity"] == {"A": severity(good, p.facts), "B": severity(bad, p.facts)}
        if p.meta["kind"] == "decisive":
            assert severity(good, p.facts) == 0
            assert extract_boxed(good) == p.meta["answer"]
        else:
            assert severity(good, p.facts) > 0
        # a wrong response stays internally consistent: its answer is what its own perception implies
        claims = dict(parse_claims(bad))
        perc = [[k, v] for k, v in p.facts["perception"]]
        if p.facts["task"] == "counting":
            perc = [[k, int(claims[k])] for k, _ in perc]
            assert response_text(p.facts, perc) == bad
    # deterministic by seed
    again = build_pairs(tmp_path / "again", ["counting", "barchart", "geometry"], {"train": 30, "test": 10}, seed=7, partial_frac=0.4)
    assert [(p.response_a, p.preferred) for p in again] == [(p.response_a, p.preferred) for p in pairs]


def test_corruptions_change_the_perception_they_name():
    rng = random.Random(0)
    facts = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0]], "intermediate": [],
             "target": "red", "question_type": "count"}
    for _ in range(20):
        perc, kind = corrupt(rng, facts, facts["perception"])
        before, after = dict(facts["perception"]), dict(perc)
        changed = {k for k in before if before[k] != after[k]}
        if kind == "count":
            assert len(changed) == 1 and 1 <= sum(after.values()) <= 4
        else:
            assert len(changed) == 2 and sum(after.values()) == 3
    geo = {"task": "geometry", "perception": [["P", [1, 2]], ["Q", [4, 0]]], "intermediate": [], "target": None,
           "question_type": "area"}
    perc, kind = corrupt(rng, geo, geo["perception"], "relation")
    assert perc == [["P", [4, 0]], ["Q", [1, 2]]] and kind == "relation"
    assert severity(response_text(geo, perc), geo) == 2  # P and Q wrong, dx/dy/area and the answer right
