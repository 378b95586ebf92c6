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
