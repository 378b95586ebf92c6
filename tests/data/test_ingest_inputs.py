"""Hostile values in ingested records end in an IngestError naming the file, the record and the field, never in a
traceback or a silently wrong value; ingest never removes a folder it did not create (issue 37, item 9)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from flows.cli import app
from rubricflow.data.adapters import IngestError, ingest
from rubricflow.data.pairs import read_pairs


def _vlrb(tmp_path, ranking, **over):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    row = {"id": "povid_0", "query": "q?", "response": ["a", "b"], "image_path": "a.png", "human_ranking": ranking,
           **over}
    p = tmp_path / "vl.jsonl"
    p.write_text(json.dumps(row) + "\n")  # json.dumps writes NaN for float("nan"), as Python's json reads it
    return p


@pytest.mark.parametrize("ranking", [[float("nan"), 1], [1, float("nan")], [0, None], [True, 0], ["0", "1"],
                                     [0, float("inf")]])
def test_a_ranking_that_is_not_two_numbers_is_refused(tmp_path, ranking):
    p = _vlrb(tmp_path, ranking)
    with pytest.raises(IngestError, match=r"vl\.jsonl: record 0: field `human_ranking` must hold finite numbers"):
        ingest("vlrewardbench", p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_valid_ranking_still_picks_the_lower_rank(tmp_path):
    ingest("vlrewardbench", _vlrb(tmp_path, [1, 0]), tmp_path / "out")
    assert [p.preferred for p in read_pairs(tmp_path / "out")] == ["B"]
    ingest("vlrewardbench", _vlrb(tmp_path, [0.0, 2]), tmp_path / "out")
    assert [p.preferred for p in read_pairs(tmp_path / "out")] == ["A"]


@pytest.mark.parametrize("field, value", [("query", float("nan")), ("response", [float("nan"), "b"]),
                                          ("response", [{"x": 1}, "b"])])
def test_a_text_field_that_is_not_text_is_refused(tmp_path, field, value):
    p = _vlrb(tmp_path, [0, 1], **{field: value})
    with pytest.raises(IngestError, match=rf"record 0: field `{field}(\[0\])?` must be text"):
        ingest("vlrewardbench", p, tmp_path / "out")


def _virl(tmp_path, **over):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    row = {"qid": "q1", "question": "x?", "answer": "1", "image": ["a.png"], "category": "c", **over}
    p = tmp_path / "virl.jsonl"
    p.write_text(json.dumps(row) + "\n")
    return p


def test_a_nan_answer_is_refused_not_the_text_nan(tmp_path):
    with pytest.raises(IngestError, match=r"virl\.jsonl: record 0: field `answer` must be text .*got nan"):
        ingest("virl39k", _virl(tmp_path, answer=float("nan")), tmp_path / "out")
    # the published parquet: a float column with a NaN
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    pq.write_table(pa.Table.from_pylist([{"qid": "q1", "question": "x?", "answer": float("nan"),
                                          "image": ["a.png"], "category": "c"}]), tmp_path / "v.parquet")
    with pytest.raises(IngestError, match=r"v\.parquet: record 0: field `answer` must be text"):
        ingest("virl39k", tmp_path / "v.parquet", tmp_path / "out")
    ok = ingest("virl39k", _virl(tmp_path, answer=3), tmp_path / "out")  # an integer answer is written out
    assert ok == 1


@pytest.mark.parametrize("image", [5, {"path": "a.png"}, []])
def test_an_image_field_that_is_not_paths_is_refused(tmp_path, image):
    with pytest.raises(IngestError, match=r"record 0: field `image` must be a path or a non-empty list of paths"):
        ingest("virl39k", _virl(tmp_path, image=image), tmp_path / "out")


@pytest.mark.parametrize("suffix", ["json", "jsonl"])
def test_deeply_nested_json_is_one_error_not_a_recursion_traceback(tmp_path, suffix):
    p = tmp_path / f"deep.{suffix}"
    p.write_text("[" * 1_000_000 + "]" * 1_000_000 + "\n")
    with pytest.raises(IngestError, match=r"deep\.jsonl?(:1)?: JSON nested too deeply"):
        ingest("virl39k", p, tmp_path / "out")
    res = CliRunner().invoke(app, ["ingest", "--format", "virl39k", "--src", str(p), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "nested too deeply" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("kind", ["staging", "old"])
def test_ingest_leaves_sibling_folders_it_did_not_create(tmp_path, kind):
    src = _virl(tmp_path)
    out = tmp_path / "data" / "out"
    ingest("virl39k", src, out)  # out is now a previous data set: the next ingest replaces it
    theirs = out.with_name(f".out.{kind}")
    (theirs / "sub").mkdir(parents=True)
    (theirs / "sub" / "work.txt").write_text("someone else's")
    assert ingest("virl39k", src, out) == 1
    assert (theirs / "sub" / "work.txt").read_text() == "someone else's"
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["out", f".out.{kind}"])
