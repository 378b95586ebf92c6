"""Adapters from public dataset formats into rubricflow's schema.

``rubricflow ingest --format F --src PATH --out DIR``:

* ``virl39k``       parquet with ``question``, ``answer``, ``image`` (list of relative paths), ``category``, ``qid``
* ``mathverse``     json/jsonl/parquet with ``question``, ``image`` (one path), ``answer``, ``question_type``
* ``vlrewardbench`` parquet (as published) or json/jsonl with ``id``, ``query``, ``image`` (or ``image_path``),
                    ``response`` (two), ``human_ranking``
* ``mmrewardbench`` json list (as published) or jsonl/parquet with ``ID``, ``Text``, ``Image``, ``Output1``,
                    ``Output2``, ``Better``, ``Category``

The first two become ``Sample`` rows (RL prompts); the reward benchmarks become preference pairs
(``rubricflow.data.pairs``). Images are copied (or decoded) into ``DIR/images`` so the dataset is
self-contained.

The reward benchmarks' published layouts (read in their public releases):

* VL-RewardBench (Hugging Face dataset ``MMInstruction/VL-RewardBench``, dataset card ``README.md``: features and
  ``configs``): one parquet file ``data/test-00000-of-00001.parquet`` with columns ``id``, ``query``, ``response``
  (sequence of two strings), ``image`` (the ``datasets`` Image feature, stored in parquet as a struct
  ``{bytes: binary, path: string}`` with the encoded image in ``bytes``), ``human_ranking`` (sequence of two ints:
  ``[0, 1]`` = the first response is preferred, ``[1, 0]`` = the second), ``models``, ``judge``, ``rationale``,
  ``query_source`` (the subset a query comes from; used as the category), ``ground_truth``.
* Multimodal RewardBench (github.com/facebookresearch/multimodal_rewardbench, ``README.md`` and
  ``scripts/0_download_data.py`` / ``2_get_accuracy.py``): ``data/all_data.json``, a JSON list of objects with
  ``ID``, ``Text`` (prompt), ``Image`` (a path relative to ``data/``, e.g. ``images/nocaps/13062.jpg``: the image
  root is the JSON file's folder unless ``--image-root`` says otherwise), ``Output1``, ``Output2``, ``Better``
  (``"Output1"`` or ``"Output2"``) and ``Category`` (e.g. ``open_generation/correctness_task``).

An image field may hold a path (relative to the image root), a ``datasets`` image struct (``bytes`` and/or
``path``), raw bytes, a ``data:image/...;base64,`` URL or a bare base64 string of a PNG, JPEG, GIF or WebP file
(recognised by the encoded file signature). Anything else, bytes that do not decode, a missing file and a tie
(``human_ranking`` ``[0, 0]``, ``Better`` other than ``Output1``/``Output2``) are errors naming file, record and
field.
Every problem is reported with the file, the row and the field, and nothing is written unless all rows convert.

Inputs can neither delete nor leak data:

* the data set is built in a staging folder and published with one rename (``rubricflow.io.staged_dir``); a
  non-empty ``DIR`` is replaced only when it is a previous rubricflow data set (its ``manifest.json`` names an
  adapter or a generator) or with ``force``. Never, not even with ``force``: ``DIR`` holding the current directory,
  the source's folder, ``DIR`` holding the source file or the image root, or ``DIR`` a non-empty folder that is
  not a data set inside the source's folder or the image root (it may hold source images);
* an image path must be relative and resolve (symlinks followed) inside the image root; every image is decoded;
* ids are unique, there is at least one record, and unreadable files (truncated parquet, non-UTF-8 JSON) are
  reported by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rubricflow.data.pairs import PreferencePair, write_pairs
from rubricflow.data.schema import MANIFEST, Sample, write_dataset
from rubricflow.io import staged_dir

FORMATS = ("virl39k", "mathverse", "vlrewardbench", "mmrewardbench")


class IngestError(ValueError):
    pass


# ------------------------------------------------------------------------------------------------------------
# Reading


def _read_records(src: Path) -> list[dict]:
    if not src.exists():
        raise IngestError(f"{src}: source file not found")
    if not src.is_file():
        raise IngestError(f"{src}: not a file (expected a parquet, json or jsonl file)")
    rows = _parse_records(src)
    if not isinstance(rows, list):
        raise IngestError(f"{src}: expected a list of records, got {type(rows).__name__}")
    if not rows:
        raise IngestError(f"{src}: no records (expected at least one)")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise IngestError(f"{src}: record {i}: expected an object with fields, got {type(row).__name__}")
    return rows


def _parse_records(src: Path):
    suffix = src.suffix.lower()
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_table(src).to_pylist()
        except (pa.ArrowException, OSError) as e:
            raise IngestError(f"{src}: not a readable parquet file ({e})") from None
    try:
        text = src.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise IngestError(
            f"{src}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); expected UTF-8 JSON"
        ) from None
    if suffix == ".jsonl":
        rows = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise IngestError(f"{src}:{i}: not valid JSON ({e.msg})") from None
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise IngestError(f"{src}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(data, dict):
        for key in ("data", "samples", "rows"):
            if isinstance(data.get(key), list):
                return data[key]
        raise IngestError(f"{src}: expected a JSON list of records (or an object with a 'data' list)")
    return data


def _require(src: Path, row: dict, i: int, *fields: str) -> None:
    missing = [f for f in fields if f not in row or row[f] is None]
    if missing:
        raise IngestError(f"{src}: record {i}: missing required field(s) {missing}; record has {sorted(row)}")


def infer_answer_type(answer: str) -> str:
    a = answer.strip()
    if re.fullmatch(r"-?\d+", a):
        return "int"
    if re.fullmatch(r"-?\d*\.\d+|-?\d+/\d+", a):
        return "float"
    if re.fullmatch(r"\(?[A-Ea-e]\)?", a):
        return "choice"
    return "text"


def _strip_boxed(answer: str) -> str:
    m = re.search(r"\\boxed\{(.*)\}", answer)
    return m.group(1).strip() if m else answer.strip()


def _resolve_image(root: Path, rel: Any, where: str) -> Path:
    """The file an image path names, refused unless it is relative and stays inside ``root`` (symlinks followed)."""
    if not isinstance(rel, str) or not rel.strip():
        raise IngestError(f"{where}: image path {rel!r} is not a path; expected a path relative to the image root {root}")
    path = Path(rel)
    if path.is_absolute():
        raise IngestError(f"{where}: image path {rel!r} is absolute; expected a path inside the image root {root}")
    if ".." in path.parts:
        raise IngestError(f"{where}: image path {rel!r} contains `..`; expected a path inside the image root {root}")
    full = (root / path).resolve()
    if not full.is_relative_to(root.resolve()):
        raise IngestError(f"{where}: image path {rel!r} resolves to {full}, outside the image root {root}")
    if not full.is_file():
        raise IngestError(f"{where}: image file not found: {root / path}")
    return full


def _check_decodes(full: Path, where: str) -> None:
    from PIL import Image

    try:
        with Image.open(full) as im:
            im.verify()
        with Image.open(full) as im:  # verify() leaves the image unusable; load() decodes the pixel data
            im.load()
    except Exception as e:  # noqa: BLE001 - any decoder error means the file is unusable
        raise IngestError(f"{where}: {full} is not a readable image ({type(e).__name__}: {e})") from None


def _copy_image(src_root: Path, rel: Any, out: Path, new_name: str, where: str) -> str:
    full = _resolve_image(src_root, rel, where)
    _check_decodes(full, where)
    dest = Path("images") / f"{new_name}{full.suffix.lower() or '.png'}"
    if (out / dest).exists():
        raise IngestError(f"{where}: two images would be stored as {dest}; ids must be unique")
    (out / dest).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(full, out / dest)
    return dest.as_posix()


# base64 of the first bytes of PNG, JPEG, GIF and WebP (RIFF) files: a bare base64 image string starts with one
_B64_SIGNATURES = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR")


def _decode_b64(text: str, where: str) -> bytes:
    import base64
    import binascii

    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise IngestError(f"{where}: the image's base64 text does not decode ({e})") from None


def _image_bytes(value: Any, where: str) -> bytes | None:
    """The encoded image an image field carries inline, or None when the field names a file (a path)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data:
            return bytes(data)
        if path:
            return None
        raise IngestError(f"{where}: the image struct has neither `bytes` nor `path`; expected an embedded or a "
                          "referenced image")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("data:"):
            head, _, data = text.partition(",")
            if not head.startswith("data:image/") or not head.endswith(";base64"):
                raise IngestError(f"{where}: data URL {head[:40]!r}...: expected data:image/<type>;base64,<data>")
            return _decode_b64(data, where)
        if text.startswith(_B64_SIGNATURES) and len(text) > 64:
            return _decode_b64(text, where)
        return None
    raise IngestError(f"{where}: image of type {type(value).__name__}; expected a path, an image struct "
                      "({bytes, path}), bytes or base64 text")


def _store_image(root: Path, value: Any, out: Path, new_name: str, where: str) -> str:
    """Write the image a field embeds or names into ``out/images`` (decoded first) and return its relative path."""
    data = _image_bytes(value, where)
    if data is None:  # a path: a plain string or a struct's `path`
        rel = value.get("path") if isinstance(value, dict) else value
        return _copy_image(root, rel, out, new_name, where)
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt_name = (im.format or "png").lower()
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as e:  # noqa: BLE001 - any decoder error means the bytes are unusable
        raise IngestError(f"{where}: the embedded image ({len(data)} bytes) does not decode "
                          f"({type(e).__name__}: {e})") from None
    ext = {"jpeg": ".jpg", "mpo": ".jpg"}.get(fmt_name, f".{fmt_name}")
    dest = Path("images") / f"{new_name}{ext}"
    if (out / dest).exists():
        raise IngestError(f"{where}: two images would be stored as {dest}; ids must be unique")
    (out / dest).parent.mkdir(parents=True, exist_ok=True)
    (out / dest).write_bytes(data)
    return dest.as_posix()


class _Ids:
    """Refuses a converted id seen before, naming both records."""

    def __init__(self, src: Path):
        self.src, self.seen = src, {}

    def add(self, sid: str, i: int) -> None:
        if sid in self.seen:
            raise IngestError(f"{self.src}: record {i}: duplicate id {sid!r} (also record {self.seen[sid]}); ids must be unique")
        self.seen[sid] = i


def _safe_id(x: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(x))


# ------------------------------------------------------------------------------------------------------------
# RL prompt datasets -> Sample


def _virl39k(src: Path, out: Path, split: str, image_root: Path) -> Iterator[Sample]:
    ids = _Ids(src)
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "question", "answer", "image", "qid")
        images = row["image"]
        if isinstance(images, str):
            images = [images]
        sid = f"virl-{_safe_id(row['qid'])}"
        ids.add(sid, i)
        rels = [
            _copy_image(image_root, im, out, f"{sid}-{k}", f"{src}: record {i} (id {sid}) field `image`")
            for k, im in enumerate(images)
        ]
        answer = _strip_boxed(str(row["answer"]))
        question = re.sub(r"<image>\s*", "", str(row["question"])).strip()
        yield Sample(
            id=sid,
            images=rels,
            question=question,
            answer=answer,
            answer_type=infer_answer_type(answer),
            task=f"virl39k/{row.get('category') or 'unknown'}",
            facts={},
            split=split,
            source="ViRL-39K",
        )


def _mathverse(src: Path, out: Path, split: str, image_root: Path) -> Iterator[Sample]:
    ids = _Ids(src)
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "question", "image", "answer")
        raw_id = row.get("sample_index") or row.get("problem_index") or row.get("id") or i
        sid = f"mathverse-{_safe_id(raw_id)}"
        ids.add(sid, i)
        rel = _copy_image(image_root, row["image"], out, sid, f"{src}: record {i} (id {sid}) field `image`")
        answer = _strip_boxed(str(row["answer"]))
        qtype = str(row.get("question_type") or "free-form")
        atype = "choice" if qtype.startswith("multi") else infer_answer_type(answer)
        yield Sample(
            id=sid,
            images=[rel],
            question=str(row["question"]).strip(),
            answer=answer,
            answer_type=atype,
            task=f"mathverse/{qtype}",
            facts={},
            split=split,
            source="MathVerse",
        )


# ------------------------------------------------------------------------------------------------------------
# Reward benchmarks -> preference pairs


def _vlrewardbench(src: Path, image_root: Path) -> Iterator[dict]:
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "query", "response", "human_ranking")
        field_name = "image_path" if row.get("image_path") else "image"
        img = row.get(field_name)
        if img is None:
            raise IngestError(f"{src}: record {i}: missing required field `image` (or `image_path`)")
        resp, rank = row["response"], row["human_ranking"]
        if not (isinstance(resp, list) and len(resp) == 2):
            raise IngestError(f"{src}: record {i}: field `response` must be a list of two responses")
        if not (isinstance(rank, list) and len(rank) == 2):
            raise IngestError(f"{src}: record {i}: field `human_ranking` must rank the two responses, got {rank!r}")
        if rank[0] == rank[1]:
            raise IngestError(f"{src}: record {i}: field `human_ranking` is a tie ({rank!r}); a preference pair needs "
                              "one preferred response ([0, 1] or [1, 0])")
        # lower rank = better (VL-RewardBench: [0, 1] means the first response is preferred)
        category = row.get("query_source") or (str(row["id"]).split("_")[0] if row.get("id") else "")
        yield {
            "id": f"vlrb-{_safe_id(row.get('id', i))}",
            "image": img,
            "image_field": field_name,
            "question": str(row["query"]),
            "response_a": str(resp[0]),
            "response_b": str(resp[1]),
            "preferred": "A" if rank[0] < rank[1] else "B",
            "category": str(category),
            "source": "VL-RewardBench",
        }


def _mmrewardbench(src: Path, image_root: Path) -> Iterator[dict]:
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "Text", "Image", "Output1", "Output2", "Better")
        better = str(row["Better"]).strip()
        if better not in ("Output1", "Output2"):
            raise IngestError(f"{src}: record {i}: field `Better` must be 'Output1' or 'Output2' (a tie or another "
                              f"label is not a preference), got {better!r}")
        yield {
            "id": f"mmrb-{_safe_id(row.get('ID', i))}",
            "image": row["Image"],
            "image_field": "Image",
            "question": str(row["Text"]),
            "response_a": str(row["Output1"]),
            "response_b": str(row["Output2"]),
            "preferred": "A" if better == "Output1" else "B",
            "category": str(row.get("Category", "")),
            "source": "MultimodalRewardBench",
        }


# ------------------------------------------------------------------------------------------------------------


def _is_dataset_output(d: Path) -> bool:
    """Whether ``d`` holds a data set written by rubricflow (its manifest names the adapter or generator)."""
    try:
        man = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and ("n_samples" in man or "n_pairs" in man) and (
        man.get("adapter") in FORMATS or "generator" in man
    )


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or child.is_relative_to(parent)


def check_destination(src: Path, out: Path, root: Path, force: bool = False) -> Path:
    """The resolved output folder, or an IngestError saying why writing there could lose data."""
    if str(out) in (".", "") or _inside(Path.cwd().resolve(), out.resolve()):
        raise IngestError(
            f"--out {out}: refusing to write into the current directory or a folder holding it (ingest replaces "
            "the whole folder); name a new folder, e.g. --out data/<name>"
        )
    out_r, src_r, root_r = out.resolve(), src.resolve(), root.resolve()
    if out_r.parent == out_r:
        raise IngestError(f"--out {out}: refusing to replace the file-system root; name a new folder")
    if _inside(src_r, out_r) or out_r == src_r.parent:
        raise IngestError(
            f"--out {out}: the source {src} is inside the output folder, which ingest replaces; "
            "choose an output folder outside the source's folder"
        )
    if _inside(root_r, out_r):
        raise IngestError(
            f"--out {out}: the image root {root} is inside the output folder, which ingest replaces; "
            "choose an output folder outside it"
        )
    if out_r.exists() and not out_r.is_dir():
        raise IngestError(f"--out {out}: exists and is not a folder")
    if out_r.is_dir() and any(out_r.iterdir()) and not _is_dataset_output(out_r):
        near = [f"{name} {p}" for name, p in (("source's folder", src_r.parent), ("image root", root_r)) if _inside(out_r, p)]
        if near:
            raise IngestError(
                f"--out {out}: folder is not empty, is not a rubricflow data set and lies inside the {near[0]} "
                f"(it may hold source data of {src}); refusing to replace it even with --force. Use a new folder"
            )
        if not force:
            raise IngestError(
                f"--out {out}: folder is not empty and is not a rubricflow data set (no {MANIFEST} written by "
                "ingest or a generator); refusing to replace it. Use an empty or new folder, or pass --force"
            )
    return out_r


def ingest(
    fmt: str,
    src: str | Path,
    out_dir: str | Path,
    split: str = "test",
    image_root: str | Path | None = None,
    force: bool = False,
):
    """Convert ``src`` into a dataset at ``out_dir``; returns the number of records written.

    ``out_dir`` is replaced atomically, and only when it is empty, a previous rubricflow data set, or ``force``
    (see the module docstring for what is refused even then)."""
    src, out = Path(src), Path(out_dir)
    root = Path(image_root) if image_root else src.parent
    if fmt not in FORMATS:
        raise IngestError(f"--format: unknown format {fmt!r}; expected one of {FORMATS}")
    if not root.is_dir():
        raise IngestError(f"--image-root {root}: not a folder")
    out = check_destination(src, out, root, force)
    with staged_dir(out) as staging:
        if fmt in ("virl39k", "mathverse"):
            fn = _virl39k if fmt == "virl39k" else _mathverse
            samples = list(fn(src, staging, split, root))
            write_dataset(staging, samples, manifest={"adapter": fmt, "src": str(src)})
            n = len(samples)
        else:
            fn = _vlrewardbench if fmt == "vlrewardbench" else _mmrewardbench
            pairs, ids = [], _Ids(src)
            for k, rec in enumerate(fn(src, root)):
                field_name = rec.pop("image_field")
                ids.add(rec["id"], k)
                where = f"{src}: record {k} (id {rec['id']}) field `{field_name}`"
                rel = _store_image(root, rec.pop("image"), staging, rec["id"], where)
                pairs.append(PreferencePair(images=[rel], split=split, **rec))
            write_pairs(staging, pairs, manifest={"adapter": fmt, "src": str(src)})
            n = len(pairs)
    return n
