"""Adapters from public formats: field mapping, image copying, and errors that name file, record and field."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from rubricflow.data.adapters import IngestError, infer_answer_type, ingest
from rubricflow.data.schema import read_dataset


@pytest.fixture
def src(tmp_path):
    (tmp_path / "imgs").mkdir()
    for n in ("a.png", "b.png"):
        Image.new("RGB", (20, 20), (1, 2, 3)).save(tmp_path / "imgs" / n)
    return tmp_path


def test_virl39k(src, tmp_path):
    rows = [
        {"qid": "q1", "question": "<image>What is x?", "answer": "\\boxed{12}", "image": ["imgs/a.png"], "category": "math"},
        {"qid": "q2", "question": "Pick", "answer": "B", "image": ["imgs/a.png", "imgs/b.png"], "category": "chart"},
    ]
    pq.write_table(pa.Table.from_pylist(rows), src / "virl.parquet")
    n = ingest("virl39k", src / "virl.parquet", tmp_path / "out", split="train")
    got = {s.id: s for s in read_dataset(tmp_path / "out")}
    assert n == 2 and set(got) == {"virl-q1", "virl-q2"}
    q1, q2 = got["virl-q1"], got["virl-q2"]
    assert q1.answer == "12" and q1.answer_type == "int" and q1.question == "What is x?"
    assert q1.task == "virl39k/math" and q1.split == "train" and q1.source == "ViRL-39K"
    assert len(q2.images) == 2 and all((tmp_path / "out" / p).exists() for p in q2.images)
    assert q2.answer_type == "choice"


def test_mathverse_jsonl(src, tmp_path):
    recs = [{"sample_index": 7, "question": "Find y", "image": "imgs/a.png", "answer": "3.5", "question_type": "free-form"}]
    (src / "mv.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    ingest("mathverse", src / "mv.jsonl", tmp_path / "mv")
    (s,) = read_dataset(tmp_path / "mv")
    assert s.id == "mathverse-7" and s.answer_type == "float" and s.split == "test"


def test_missing_field_names_file_record_and_field(src, tmp_path):
    pq.write_table(pa.Table.from_pylist([{"qid": "q1", "question": "x", "image": ["imgs/a.png"]}]), src / "bad.parquet")
    with pytest.raises(IngestError, match=r"bad\.parquet: record 0: missing required field\(s\) \['answer'\]"):
        ingest("virl39k", src / "bad.parquet", tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_missing_image_leaves_no_partial_output(src, tmp_path):
    rows = [{"qid": "q1", "question": "x", "answer": "1", "image": ["imgs/nope.png"], "category": "c"}]
    pq.write_table(pa.Table.from_pylist(rows), src / "v.parquet")
    with pytest.raises(IngestError, match="image file not found"):
        ingest("virl39k", src / "v.parquet", tmp_path / "o")
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.partial").exists()


def test_reward_bench_rows_are_checked(src, tmp_path):
    bad = [{"query": "q", "image": "imgs/a.png", "response": ["a", "b"], "human_ranking": [1, 1]}]
    (src / "vl.jsonl").write_text(json.dumps(bad[0]))
    with pytest.raises(IngestError, match="human_ranking"):
        ingest("vlrewardbench", src / "vl.jsonl", tmp_path / "p")
    (src / "mm.json").write_text(json.dumps([{"Text": "q", "Image": "imgs/a.png", "Output1": "a", "Output2": "b", "Better": "Output3"}]))
    with pytest.raises(IngestError, match="Better"):
        ingest("mmrewardbench", src / "mm.json", tmp_path / "p")


def test_unknown_format_and_answer_types():
    with pytest.raises(IngestError, match="unknown format"):
        ingest("coco", "x", "y")
    assert [infer_answer_type(a) for a in ("12", "-3", "2.5", "1/3", "C", "(a)", "a cat")] == [
        "int", "int", "float", "float", "choice", "choice", "text"
    ]


# ------------------------------------------------------------------------------------------------------------
# The reward benchmarks in their published layouts (rubricflow/data/adapters/reward_benchmarks.py says where each
# is described)


def _png_bytes(color=(200, 10, 10), size=(12, 12), fmt="PNG") -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    return buf.getvalue()


def _vlrb_row(i, image, ranking=(0, 1), source="povid"):
    return {"id": f"{source}_{i}", "query": f"What is in image {i}?", "response": [f"a cat {i}", f"a dog {i}"],
            "image": image, "human_ranking": list(ranking), "models": ["m1", "m2"], "judge": "human",
            "rationale": "r", "query_source": source, "ground_truth": ""}


def _write_vlrb_parquet(path, rows):
    """VL-RewardBench as published on the Hub: parquet whose `image` column is the datasets Image struct."""
    schema = pa.schema([
        ("id", pa.string()), ("query", pa.string()), ("response", pa.list_(pa.string())),
        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("human_ranking", pa.list_(pa.int64())), ("models", pa.list_(pa.string())), ("judge", pa.string()),
        ("rationale", pa.string()), ("query_source", pa.string()), ("ground_truth", pa.string()),
    ])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_vlrewardbench_published_parquet_with_embedded_images(tmp_path):
    from rubricflow.data.pairs import load_pair_images, read_pairs, validate_pairs

    src = tmp_path / "vlrb"
    src.mkdir()
    rows = [_vlrb_row(0, {"bytes": _png_bytes((200, 10, 10)), "path": None}, (0, 1), "povid"),
            _vlrb_row(1, {"bytes": _png_bytes((10, 200, 10), fmt="JPEG"), "path": "x.jpg"}, (1, 0), "mathverse")]
    _write_vlrb_parquet(src / "test-00000-of-00001.parquet", rows)
    assert ingest("vlrewardbench", src / "test-00000-of-00001.parquet", tmp_path / "out") == 2
    pairs = {p.id: p for p in read_pairs(tmp_path / "out")}
    a, b = pairs["vlrb-povid_0"], pairs["vlrb-mathverse_1"]
    assert (a.preferred, b.preferred) == ("A", "B")  # [0, 1]: the first response; [1, 0]: the second
    assert (a.category, b.category) == ("povid", "mathverse")  # query_source
    assert a.images == ["images/vlrb-povid_0.png"] and b.images == ["images/vlrb-mathverse_1.jpg"]
    assert load_pair_images(tmp_path / "out", a)[0].getpixel((5, 5)) == (200, 10, 10)
    assert a.response_a == "a cat 0" and a.question == "What is in image 0?" and a.source == "VL-RewardBench"
    assert validate_pairs(tmp_path / "out", balance_tol=None)["n_pairs"] == 2


def test_mmrewardbench_published_json_with_image_paths(tmp_path):
    from rubricflow.data.pairs import read_pairs

    data = tmp_path / "data"
    (data / "images" / "nocaps").mkdir(parents=True)
    Image.new("RGB", (16, 16), (0, 0, 250)).save(data / "images" / "nocaps" / "13062.jpg")
    records = [
        {"ID": "nocaps_13062", "Text": "Describe the image.", "Image": "images/nocaps/13062.jpg",
         "Output1": "a teapot", "Output2": "a tree", "Better": "Output1", "Category": "open_generation/correctness_task"},
        {"ID": "nocaps_13062b", "Text": "Describe it again.", "Image": "images/nocaps/13062.jpg",
         "Output1": "a tree", "Output2": "a teapot", "Better": "Output2", "Category": "vqa"},
    ]
    (data / "all_data.json").write_text(json.dumps(records, indent=2))
    assert ingest("mmrewardbench", data / "all_data.json", tmp_path / "out") == 2
    pairs = {p.id: p for p in read_pairs(tmp_path / "out")}
    p0, p1 = pairs["mmrb-nocaps_13062"], pairs["mmrb-nocaps_13062b"]
    assert (p0.preferred, p1.preferred) == ("A", "B")
    assert (p0.category, p1.category) == ("open_generation/correctness_task", "vqa")
    assert p0.images == ["images/mmrb-nocaps_13062.jpg"] and (tmp_path / "out" / p0.images[0]).is_file()


def test_embedded_images_as_base64_text(tmp_path):
    import base64

    from rubricflow.data.pairs import read_pairs

    png = _png_bytes()
    rows = [_vlrb_row(0, "data:image/png;base64," + base64.b64encode(png).decode()),
            _vlrb_row(1, base64.b64encode(png).decode())]  # a bare base64 PNG (its signature starts iVBORw0KGgo)
    (tmp_path / "vl.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert ingest("vlrewardbench", tmp_path / "vl.jsonl", tmp_path / "out") == 2
    assert all(p.images[0].endswith(".png") for p in read_pairs(tmp_path / "out"))


@pytest.mark.parametrize(
    "image, error",
    [
        ({"bytes": b"not an image at all", "path": None}, r"record 0 \(id vlrb-povid_0\) field `image`: the embedded "
                                                          r"image \(19 bytes\) does not decode"),
        ({"bytes": None, "path": None}, r"field `image`: the image struct has neither `bytes` nor `path`"),
        ({"bytes": None, "path": "missing.png"}, r"field `image`: image file not found: .*missing\.png"),
        ("data:image/png;base64,@@@@", r"field `image`: the image's base64 text does not decode"),
        ("data:text/plain;base64,aGk=", r"data URL 'data:text/plain;base64'.*expected data:image/"),
        (12, r"image of type int; expected a path"),
    ],
)
def test_vlrewardbench_bad_images_name_file_record_and_field(tmp_path, image, error):
    if isinstance(image, dict):  # the published parquet layout
        p = tmp_path / "vl.parquet"
        _write_vlrb_parquet(p, [_vlrb_row(0, image)])
    else:
        p = tmp_path / "vl.jsonl"
        p.write_text(json.dumps(_vlrb_row(0, image)))
    with pytest.raises(IngestError, match=error):
        ingest("vlrewardbench", p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_reward_benchmark_ties_are_refused(tmp_path):
    _write_vlrb_parquet(tmp_path / "vl.parquet", [_vlrb_row(0, {"bytes": _png_bytes(), "path": None}, (0, 0))])
    with pytest.raises(IngestError, match=r"vl\.parquet: record 0: field `human_ranking` is a tie \(\[0, 0\]\)"):
        ingest("vlrewardbench", tmp_path / "vl.parquet", tmp_path / "out")
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    (tmp_path / "mm.json").write_text(json.dumps([{"ID": "x", "Text": "q", "Image": "a.png", "Output1": "a",
                                                  "Output2": "b", "Better": "Tie"}]))
    with pytest.raises(IngestError, match=r"mm\.json: record 0: field `Better` must be 'Output1' or 'Output2' \(a tie"):
        ingest("mmrewardbench", tmp_path / "mm.json", tmp_path / "out")
