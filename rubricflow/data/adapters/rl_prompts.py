"""RL prompt datasets -> ``Sample`` rows: ViRL-39K and MathVerse.

* ``virl39k``    parquet with ``question``, ``answer``, ``image`` (list of relative paths), ``category``, ``qid``
* ``mathverse``  json/jsonl/parquet with ``question``, ``image`` (one path), ``answer``, ``question_type``
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rubricflow.data.adapters.images import copy_image
from rubricflow.data.adapters.records import IngestError, UniqueIds, read_records, require_fields, safe_id, text_field
from rubricflow.data.schema import Sample


def infer_answer_type(answer: str) -> str:
    a = answer.strip()
    if re.fullmatch(r"-?\d+", a):
        return "int"
    if re.fullmatch(r"-?\d*\.\d+|-?\d+/\d+", a):
        return "float"
    if re.fullmatch(r"\(?[A-Ea-e]\)?", a):
        return "choice"
    return "text"


def strip_boxed(answer: str) -> str:
    m = re.search(r"\\boxed\{(.*)\}", answer)
    return m.group(1).strip() if m else answer.strip()


def virl39k(src: Path, out: Path, split: str, image_root: Path) -> Iterator[Sample]:
    ids = UniqueIds(src)
    for i, row in enumerate(read_records(src)):
        require_fields(src, row, i, "question", "answer", "image", "qid")
        images = row["image"]
        if isinstance(images, str):
            images = [images]
        if not isinstance(images, (list, tuple)) or not images:
            raise IngestError(f"{src}: record {i}: field `image` must be a path or a non-empty list of paths, "
                              f"got {images!r}")
        sid = f"virl-{safe_id(row['qid'])}"
        ids.add(sid, i)
        rels = [
            copy_image(image_root, im, out, f"{sid}-{k}", f"{src}: record {i} (id {sid}) field `image`")
            for k, im in enumerate(images)
        ]
        answer = strip_boxed(text_field(src, row["answer"], i, "answer"))
        question = re.sub(r"<image>\s*", "", text_field(src, row["question"], i, "question")).strip()
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


def mathverse(src: Path, out: Path, split: str, image_root: Path) -> Iterator[Sample]:
    ids = UniqueIds(src)
    for i, row in enumerate(read_records(src)):
        require_fields(src, row, i, "question", "image", "answer")
        raw_id = row.get("sample_index") or row.get("problem_index") or row.get("id") or i
        sid = f"mathverse-{safe_id(raw_id)}"
        ids.add(sid, i)
        rel = copy_image(image_root, row["image"], out, sid, f"{src}: record {i} (id {sid}) field `image`")
        answer = strip_boxed(text_field(src, row["answer"], i, "answer"))
        qtype = str(row.get("question_type") or "free-form")
        atype = "choice" if qtype.startswith("multi") else infer_answer_type(answer)
        yield Sample(
            id=sid,
            images=[rel],
            question=text_field(src, row["question"], i, "question").strip(),
            answer=answer,
            answer_type=atype,
            task=f"mathverse/{qtype}",
            facts={},
            split=split,
            source="MathVerse",
        )
