"""Adapters from public dataset formats into rubricflow's schema.

``rubricflow ingest --format F --src PATH --out DIR``:

* ``virl39k``       parquet with ``question``, ``answer``, ``image`` (list of relative paths), ``category``, ``qid``
* ``mathverse``     json/jsonl/parquet with ``question``, ``image`` (one path), ``answer``, ``question_type``
* ``vlrewardbench`` jsonl with ``query``, ``image`` or ``image_path``, ``response`` (two), ``human_ranking``
* ``mmrewardbench`` json (list) with ``Text``, ``Image``, ``Output1``, ``Output2``, ``Better``

The first two become ``Sample`` rows (RL prompts); the reward benchmarks become preference pairs
(``rubricflow.deltarubric.data``). Images are copied into ``DIR/images`` so the dataset is self-contained.
Every problem is reported with the file, the row and the field, and nothing is written unless all rows convert.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rubricflow.data.schema import Sample, write_dataset

FORMATS = ("virl39k", "mathverse", "vlrewardbench", "mmrewardbench")


class IngestError(ValueError):
    pass


# ------------------------------------------------------------------------------------------------------------
# Reading


def _read_records(src: Path) -> list[dict]:
    if not src.exists():
        raise IngestError(f"{src}: source file not found")
    suffix = src.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(src).to_pylist()
    text = src.read_text(encoding="utf-8")
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


def _copy_image(src_root: Path, rel: str, out: Path, new_name: str, where: str) -> str:
    path = Path(rel)
    full = path if path.is_absolute() else src_root / path
    if not full.exists():
        raise IngestError(f"{where}: image file not found: {full}")
    dest = Path("images") / f"{new_name}{full.suffix.lower() or '.png'}"
    (out / dest).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(full, out / dest)
    return dest.as_posix()


def _safe_id(x: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(x))


# ------------------------------------------------------------------------------------------------------------
# RL prompt datasets -> Sample


def _virl39k(src: Path, out: Path, split: str, image_root: Path) -> Iterator[Sample]:
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "question", "answer", "image", "qid")
        images = row["image"]
        if isinstance(images, str):
            images = [images]
        sid = f"virl-{_safe_id(row['qid'])}"
        rels = [
            _copy_image(image_root, im, out, f"{sid}-{k}", f"{src}: record {i} (qid {row['qid']}) field `image`")
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
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "question", "image", "answer")
        raw_id = row.get("sample_index") or row.get("problem_index") or row.get("id") or i
        sid = f"mathverse-{_safe_id(raw_id)}"
        rel = _copy_image(image_root, str(row["image"]), out, sid, f"{src}: record {i} field `image`")
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
        img = row.get("image_path") or row.get("image")
        if img is None:
            raise IngestError(f"{src}: record {i}: missing required field `image` or `image_path`")
        resp, rank = row["response"], row["human_ranking"]
        if not (isinstance(resp, list) and len(resp) == 2):
            raise IngestError(f"{src}: record {i}: field `response` must be a list of two responses")
        if not (isinstance(rank, list) and len(rank) == 2) or rank[0] == rank[1]:
            raise IngestError(f"{src}: record {i}: field `human_ranking` must rank the two responses, got {rank!r}")
        # lower rank = better (VL-RewardBench: [0, 1] means the first response is preferred)
        yield {
            "id": f"vlrb-{_safe_id(row.get('id', i))}",
            "image": img,
            "question": str(row["query"]),
            "response_a": str(resp[0]),
            "response_b": str(resp[1]),
            "preferred": "A" if rank[0] < rank[1] else "B",
            "category": str(row.get("id", "")).split("_")[0] if row.get("id") else "",
            "source": "VL-RewardBench",
        }


def _mmrewardbench(src: Path, image_root: Path) -> Iterator[dict]:
    for i, row in enumerate(_read_records(src)):
        _require(src, row, i, "Text", "Image", "Output1", "Output2", "Better")
        better = str(row["Better"]).strip()
        if better not in ("Output1", "Output2"):
            raise IngestError(f"{src}: record {i}: field `Better` must be 'Output1' or 'Output2', got {better!r}")
        yield {
            "id": f"mmrb-{_safe_id(row.get('ID', i))}",
            "image": row["Image"],
            "question": str(row["Text"]),
            "response_a": str(row["Output1"]),
            "response_b": str(row["Output2"]),
            "preferred": "A" if better == "Output1" else "B",
            "category": str(row.get("Category", "")),
            "source": "MultimodalRewardBench",
        }


# ------------------------------------------------------------------------------------------------------------


def ingest(fmt: str, src: str | Path, out_dir: str | Path, split: str = "test", image_root: str | Path | None = None):
    """Convert ``src`` into a dataset at ``out_dir``; returns the number of records written."""
    src, out = Path(src), Path(out_dir)
    root = Path(image_root) if image_root else src.parent
    if fmt not in FORMATS:
        raise IngestError(f"--format: unknown format {fmt!r}; expected one of {FORMATS}")
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        if fmt in ("virl39k", "mathverse"):
            fn = _virl39k if fmt == "virl39k" else _mathverse
            samples = list(fn(src, staging, split, root))
            ids = [s.id for s in samples]
            if len(set(ids)) != len(ids):
                dup = sorted({x for x in ids if ids.count(x) > 1})[:5]
                raise IngestError(f"{src}: duplicate ids after conversion: {dup}")
            write_dataset(staging, samples, manifest={"adapter": fmt, "src": str(src)})
            n = len(samples)
        else:
            from rubricflow.deltarubric.data import PreferencePair, write_pairs

            fn = _vlrewardbench if fmt == "vlrewardbench" else _mmrewardbench
            pairs = []
            for k, rec in enumerate(fn(src, root)):
                rel = _copy_image(root, str(rec.pop("image")), staging, rec["id"], f"{src}: record {k} image")
                pairs.append(PreferencePair(images=[rel], split=split, **rec))
            write_pairs(staging, pairs, manifest={"adapter": fmt, "src": str(src)})
            n = len(pairs)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return n
