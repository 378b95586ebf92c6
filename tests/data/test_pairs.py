"""The preference-pair schema (rubricflow.data.pairs): round trip, A/B swap and the data gate."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from rubricflow.data.pairs import (
    PAIRS_PARQUET,
    PairDataError,
    PreferencePair,
    check_pairs,
    load_pair_images,
    read_pairs,
    validate_pairs,
    write_pairs,
)


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
