"""rubricflow.util.io: atomic writers and staged directories."""

import json
import os

import pytest

from rubricflow.util import io as rio


def _leftovers(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


def test_write_json_default_format_is_the_stage_report_format(tmp_path):
    obj = {"b": 1, "a": [1.5, None, "x"], "when": object.__new__(type("T", (), {"__str__": lambda s: "T!"}))}
    p = rio.write_json(tmp_path / "sub" / "r.json", obj)
    assert p == tmp_path / "sub" / "r.json"
    assert p.read_bytes() == json.dumps(obj, indent=2, sort_keys=True, default=str).encode()
    assert _leftovers(p.parent) == []


def test_write_json_keywords_reproduce_other_formats(tmp_path):
    obj = {"z": "é", "a": 1}
    p = rio.write_json(tmp_path / "x.json", obj, sort_keys=False, default=None, ensure_ascii=False,
                       trailing_newline=True)
    assert p.read_text(encoding="utf-8") == json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    p = rio.write_json(tmp_path / "y.json", obj, indent=1)
    assert p.read_text() == json.dumps(obj, indent=1, sort_keys=True, default=str)


def test_unserialisable_object_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("old")
    with pytest.raises(TypeError):
        rio.write_json(p, {"x": object()}, default=None)
    assert p.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_failure_after_partial_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    p = tmp_path / "data.bin"
    p.write_bytes(b"old")

    def boom(fd):
        raise OSError("disk went away")

    monkeypatch.setattr(rio.os, "fsync", boom)
    with pytest.raises(OSError, match="disk went away"):
        rio.atomic_write_bytes(p, b"new content that never lands")
    assert p.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_atomic_path_exception_midway_removes_temp(tmp_path):
    p = tmp_path / "t.parquet"
    p.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with rio.atomic_path(p) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("writer crashed")
    assert p.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_atomic_path_suffix_and_success(tmp_path):
    p = tmp_path / "plot.png"
    with rio.atomic_path(p, suffix=".png") as tmp:
        assert tmp.name == f".plot.png.tmp{os.getpid()}.png" and tmp.parent == tmp_path  # per process
        tmp.write_bytes(b"png")
    assert p.read_bytes() == b"png" and _leftovers(tmp_path) == []


def test_atomic_write_text_replaces_and_creates_parents(tmp_path):
    p = tmp_path / "a" / "b" / "t.txt"
    rio.atomic_write_text(p, "one\r\ntwo\n")
    rio.atomic_write_text(p, "três\r\n")
    assert p.read_bytes() == "três\r\n".encode()


def test_write_jsonl(tmp_path):
    rows = [{"b": 1, "a": 2}, {"c": [1]}]
    p = rio.write_jsonl(tmp_path / "c.jsonl", iter(rows))
    assert p.read_text() == "".join(json.dumps(r) + "\n" for r in rows)
    p.write_text("old\n")

    def bad_rows():
        yield {"ok": 1}
        raise ValueError("row source failed")

    with pytest.raises(ValueError):
        rio.write_jsonl(p, bad_rows())
    assert p.read_text() == "old\n" and _leftovers(tmp_path) == []


def test_write_parquet_roundtrip_and_same_bytes_as_write_table(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    t = pa.Table.from_pylist([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    p = rio.write_parquet(tmp_path / "t.parquet", t)
    assert pq.read_table(p).to_pylist() == t.to_pylist()
    pq.write_table(t, tmp_path / "direct.parquet")
    assert p.read_bytes() == (tmp_path / "direct.parquet").read_bytes()


def test_staged_dir_success_replaces_final(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with rio.staged_dir(final) as st:
        assert st == tmp_path / ".out.staging"
        (st / "new.txt").write_text("new")
    assert sorted(x.name for x in final.iterdir()) == ["new.txt"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]


def test_staged_dir_exception_leaves_final_and_removes_staging(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "keep.txt").write_text("keep")
    with pytest.raises(KeyboardInterrupt):
        with rio.staged_dir(final) as st:
            (st / "partial.txt").write_text("half")
            raise KeyboardInterrupt
    assert sorted(x.name for x in final.iterdir()) == ["keep.txt"]
    assert (final / "keep.txt").read_text() == "keep"
    assert not (tmp_path / ".out.staging").exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("kind", ["staging", "old"])
def test_staged_dir_never_removes_a_sibling_it_did_not_create(tmp_path, kind):
    """A ``.out.staging`` / ``.out.old`` already there (another tool's, or left by a killed run) is not this run's:
    it is left as it was and a fresh folder is used (issue 37: ingest deleted such folders)."""
    theirs = tmp_path / f".out.{kind}"
    theirs.mkdir()
    (theirs / "keep").write_text("theirs")
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with rio.staged_dir(final) as st:
        assert list(st.iterdir()) == [] and st != theirs
        (st / "new.txt").write_text("new")
    assert sorted(x.name for x in final.iterdir()) == ["new.txt"]
    assert (theirs / "keep").read_text() == "theirs"
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([".out." + kind, "out"])
    with pytest.raises(RuntimeError):  # the failure path removes only its own staging folder too
        with rio.staged_dir(final):
            raise RuntimeError
    assert (theirs / "keep").read_text() == "theirs" and (final / "new.txt").read_text() == "new"
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([".out." + kind, "out"])


def test_fsync_is_called(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(rio.os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    rio.write_json(tmp_path / "f.json", {})
    assert calls


def test_read_jsonl_round_trips_skips_blank_lines_and_names_a_bad_line(tmp_path):
    path = rio.write_jsonl(tmp_path / "rows.jsonl", [{"a": 1}, [2], "three"])
    path.write_text(path.read_text() + "\n  \n")
    assert rio.read_jsonl(path) == [{"a": 1}, [2], "three"]
    assert [n for n, _ in rio.iter_jsonl(path)] == [1, 2, 3]
    path.write_text('{"a": 1}\n\n{"a": \n')

    class Refused(ValueError):
        pass

    with pytest.raises(Refused, match=r"rows\.jsonl:3: not valid JSON \(Expecting value\)"):
        rio.read_jsonl(path, error=Refused)
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(ValueError, match=r"rows\.jsonl:1: JSON nested too deeply"):
        rio.read_jsonl(path)


def test_save_figure_writes_atomically_and_closes_the_figure_even_when_writing_fails(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    out = rio.save_figure(fig, tmp_path / "f.png", dpi=50)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not plt.fignum_exists(fig.number)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]
    fig, _ = plt.subplots()
    with pytest.raises(ValueError):
        rio.save_figure(fig, tmp_path / "f.unknownformat")
    assert not plt.fignum_exists(fig.number) and sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]
    fig, _ = plt.subplots()
    assert rio.figure_bytes(fig, "svg").lstrip().startswith(b"<?xml") and not plt.fignum_exists(fig.number)
