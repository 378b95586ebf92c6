"""`rubricflow ingest` can never delete or leak data: the output folder is published atomically and only replaces a
previous rubricflow data set (or with --force), the source is never touched, image paths stay inside the image
root, every image decodes, ids are unique and unreadable inputs give an IngestError naming the file."""

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from flows.cli import app
from rubricflow.data.adapters import IngestError, ingest
from rubricflow.data.schema import read_dataset
from rubricflow.data.pairs import read_pairs


def _digest(p: Path) -> dict[str, str]:
    return {str(f.relative_to(p)): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(p.rglob("*")) if f.is_file()}


def _png(path: Path, color=(1, 2, 3)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), color).save(path)
    return path


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    _png(d / "imgs" / "a.png")
    _png(d / "imgs" / "b.png", (9, 9, 9))
    rows = [{"qid": "q1", "question": "x?", "answer": "1", "image": ["imgs/a.png"], "category": "c"}]
    pq.write_table(pa.Table.from_pylist(rows), d / "virl.parquet")
    return d


def _cli(*args: str):
    return CliRunner().invoke(app, ["ingest", *args])


# ---------------------------------------------------------------------------------------------- the output folder


def test_unrelated_non_empty_out_is_refused_and_kept(src, tmp_path):
    out = tmp_path / "home"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "thesis.tex").write_text("years of work")
    (out / "photo.png").write_bytes(b"x")
    before = _digest(out)
    res = _cli("--format", "virl39k", "--src", str(src / "virl.parquet"), "--out", str(out))
    assert res.exit_code == 1, res.output
    assert "not empty" in res.output and "--force" in res.output and str(out) in res.output
    assert _digest(out) == before
    assert not any(p.name.startswith(f".{out.name}.") for p in tmp_path.iterdir())  # no staging left behind


def test_force_replaces_an_unrelated_folder(src, tmp_path):
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "old.txt").write_text("x")
    res = _cli("--format", "virl39k", "--src", str(src / "virl.parquet"), "--out", str(out), "--force")
    assert res.exit_code == 0, res.output
    assert not (out / "old.txt").exists() and [s.id for s in read_dataset(out)] == ["virl-q1"]


def test_previous_dataset_output_is_replaced_atomically(src, tmp_path):
    out = tmp_path / "out"
    assert ingest("virl39k", src / "virl.parquet", out) == 1
    rows = [{"qid": "q2", "question": "y?", "answer": "2", "image": ["imgs/b.png"], "category": "c"}]
    pq.write_table(pa.Table.from_pylist(rows), src / "v2.parquet")
    assert ingest("virl39k", src / "v2.parquet", out) == 1  # a previous rubricflow output: replaced without --force
    assert [s.id for s in read_dataset(out)] == ["virl-q2"] and not (out / "images" / "virl-q1-0.png").exists()
    # a failed ingest leaves the previous output as it was
    before = _digest(out)
    bad = [{"qid": "q3", "question": "z?", "answer": "3", "image": ["imgs/missing.png"], "category": "c"}]
    pq.write_table(pa.Table.from_pylist(bad), src / "v3.parquet")
    with pytest.raises(IngestError, match="image file not found"):
        ingest("virl39k", src / "v3.parquet", out)
    assert _digest(out) == before


def test_a_foreign_manifest_does_not_count_as_a_dataset(src, tmp_path):
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"name": "someone else's"}))
    (out / "data.bin").write_bytes(b"keep")
    with pytest.raises(IngestError, match="not empty"):
        ingest("virl39k", src / "virl.parquet", out)
    assert (out / "data.bin").read_bytes() == b"keep"


@pytest.mark.parametrize("where", ["src_folder", "parent_of_src", "image_folder_inside_src_folder"])
def test_the_source_is_never_deleted(where, src, tmp_path):
    out = {"src_folder": src, "parent_of_src": tmp_path, "image_folder_inside_src_folder": src / "imgs"}[where]
    before = _digest(src)
    for extra in ([], ["--force"]):
        res = _cli("--format", "virl39k", "--src", str(src / "virl.parquet"), "--out", str(out), *extra)
        assert res.exit_code == 1, res.output
        assert "source" in res.output and "virl.parquet" in res.output, res.output
        assert _digest(src) == before


def test_a_new_folder_next_to_the_source_is_fine(src):
    assert ingest("virl39k", src / "virl.parquet", src / "converted") == 1
    assert ingest("virl39k", src / "virl.parquet", src / "converted") == 1  # its own previous output: replaced
    assert [s.id for s in read_dataset(src / "converted")] == ["virl-q1"]


def test_out_containing_the_image_root_is_refused(src, tmp_path):
    pq.write_table(
        pa.Table.from_pylist([{"qid": "q1", "question": "x?", "answer": "1", "image": ["a.png"], "category": "c"}]),
        tmp_path / "elsewhere.parquet",
    )
    before = _digest(src)
    res = _cli("--format", "virl39k", "--src", str(tmp_path / "elsewhere.parquet"), "--out", str(src),
               "--image-root", str(src / "imgs"), "--force")
    assert res.exit_code == 1 and "image root" in res.output, res.output
    assert _digest(src) == before


def test_out_dot_is_refused(src, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("k")
    monkeypatch.chdir(work)
    for extra in ([], ["--force"]):
        res = _cli("--format", "virl39k", "--src", str(src / "virl.parquet"), "--out", ".", *extra)
        assert res.exit_code == 1, res.output
        assert "--out ." in res.output and "current directory" in res.output, res.output
    assert (work / "keep.txt").read_text() == "k" and sorted(p.name for p in work.iterdir()) == ["keep.txt"]
    res = _cli("--format", "virl39k", "--src", str(src / "virl.parquet"), "--out", "..", "--force")
    assert res.exit_code == 1 and "current directory" in res.output, res.output
    assert (work / "keep.txt").read_text() == "k" and (src / "virl.parquet").exists()


# ---------------------------------------------------------------------------------------------- image paths


def _write(fmt: str, d: Path, image: str, ident: str = "r1") -> Path:
    if fmt == "virl39k":
        p = d / "in.parquet"
        pq.write_table(pa.Table.from_pylist([{"qid": ident, "question": "x?", "answer": "1", "image": [image]}]), p)
    elif fmt == "mathverse":
        p = d / "in.jsonl"
        p.write_text(json.dumps({"sample_index": ident, "question": "x?", "image": image, "answer": "1"}) + "\n")
    elif fmt == "vlrewardbench":
        p = d / "in.jsonl"
        p.write_text(json.dumps({"id": ident, "query": "q", "image": image, "response": ["a", "b"], "human_ranking": [0, 1]}))
    else:
        p = d / "in.json"
        p.write_text(json.dumps([{"ID": ident, "Text": "q", "Image": image, "Output1": "a", "Output2": "b", "Better": "Output1"}]))
    return p


FORMATS = ["virl39k", "mathverse", "vlrewardbench", "mmrewardbench"]
SECRET = b"root:x:0:0:secret\n"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_image_paths_cannot_leave_the_image_root(fmt, kind, src, tmp_path):
    secret = tmp_path / "secret" / "passwd.png"
    secret.parent.mkdir()
    _png(secret)  # a readable image, so only the path check can stop it
    if kind == "dotdot":
        image = "../secret/passwd.png"
    elif kind == "absolute":
        image = str(secret)
    else:
        (src / "imgs" / "link.png").symlink_to(secret)
        image = "imgs/link.png"
    p = _write(fmt, src, image, ident="leak7")
    out = tmp_path / "out"
    with pytest.raises(IngestError) as e:
        ingest(fmt, p, out)
    msg = str(e.value)
    assert "leak7" in msg and image in msg and "image root" in msg, msg
    assert not out.exists()


@pytest.mark.parametrize("kind", ["truncated", "text", "empty"])
def test_undecodable_images_are_refused_naming_the_file(kind, src, tmp_path):
    good = (src / "imgs" / "a.png").read_bytes()
    bad = src / "imgs" / "bad.png"
    bad.write_bytes({"truncated": good[: len(good) // 2], "text": b"hello, I am text", "empty": b""}[kind])
    p = _write("vlrewardbench", src, "imgs/bad.png")
    with pytest.raises(IngestError, match=r"imgs/bad\.png.*not a readable image"):
        ingest("vlrewardbench", p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_duplicate_ids_are_refused(fmt, src, tmp_path):
    if fmt == "virl39k":
        p = src / "d.parquet"
        rows = [{"qid": "same", "question": "x?", "answer": "1", "image": [f"imgs/{n}.png"]} for n in ("a", "b")]
        pq.write_table(pa.Table.from_pylist(rows), p)
    elif fmt == "mathverse":
        p = src / "d.jsonl"
        p.write_text("\n".join(json.dumps({"id": "same", "question": "x?", "image": f"imgs/{n}.png", "answer": "1"}) for n in "ab"))
    elif fmt == "vlrewardbench":
        p = src / "d.jsonl"
        p.write_text("\n".join(
            json.dumps({"id": "same", "query": "q", "image": f"imgs/{n}.png", "response": ["a", "b"], "human_ranking": [0, 1]})
            for n in "ab"
        ))
    else:
        p = src / "d.json"
        p.write_text(json.dumps([
            {"ID": "same", "Text": "q", "Image": f"imgs/{n}.png", "Output1": "a", "Output2": "b", "Better": "Output1"}
            for n in "ab"
        ]))
    with pytest.raises(IngestError, match=r"record 1: duplicate id '[a-z]+-same' \(also record 0\)"):
        ingest(fmt, p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_pairs_keep_every_image(src, tmp_path):
    p = src / "ok.jsonl"
    p.write_text("\n".join(
        json.dumps({"id": f"x_{n}", "query": "q", "image": f"imgs/{n}.png", "response": ["a", "b"], "human_ranking": [0, 1]})
        for n in "ab"
    ))
    assert ingest("vlrewardbench", p, tmp_path / "out") == 2
    pairs = read_pairs(tmp_path / "out")
    assert len({p.images[0] for p in pairs}) == 2


# ---------------------------------------------------------------------------------------------- unreadable inputs


@pytest.mark.parametrize("fmt", FORMATS)
def test_zero_records_are_refused(fmt, src, tmp_path):
    p = src / ("empty.jsonl" if fmt in ("mathverse", "vlrewardbench") else "empty.json")
    p.write_text("" if p.suffix == ".jsonl" else "[]")
    with pytest.raises(IngestError, match=r"empty\.jsonl?: no records"):
        ingest(fmt, p, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["truncated", "zero_bytes"])
def test_broken_parquet_names_the_file(kind, src, tmp_path):
    p = src / "broken.parquet"
    data = (src / "virl.parquet").read_bytes()
    p.write_bytes(data[: len(data) // 2] if kind == "truncated" else b"")
    res = _cli("--format", "virl39k", "--src", str(p), "--out", str(tmp_path / "out"))
    assert res.exit_code == 1, res.output
    assert "broken.parquet" in res.output and "not a readable parquet file" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_latin1_json_names_the_file(suffix, src, tmp_path):
    p = src / f"latin{suffix}"
    rec = {"Text": "café", "Image": "imgs/a.png", "Output1": "a", "Output2": "b", "Better": "Output1"}
    text = json.dumps([rec] if suffix == ".json" else rec, ensure_ascii=False)
    p.write_bytes(text.encode("latin-1"))
    res = _cli("--format", "mmrewardbench", "--src", str(p), "--out", str(tmp_path / "out"))
    assert res.exit_code == 1, res.output
    assert f"latin{suffix}" in res.output and "not UTF-8" in res.output and "Traceback" not in res.output


def test_normal_ingest_is_unchanged(src, tmp_path):
    """The happy path still converts and copies (the regression guard for the checks above)."""
    res = _cli("--format", "virl39k", "--src", str(src / "virl.parquet"), "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    (s,) = read_dataset(tmp_path / "out")
    assert s.images == ["images/virl-q1-0.png"]
    assert (tmp_path / "out" / s.images[0]).read_bytes() == (src / "imgs" / "a.png").read_bytes()
    assert sorted(os.listdir(tmp_path / "out")) == ["images", "manifest.json", "samples.parquet"]
