"""One dataset schema for every method: parquet rows + image files.

A dataset directory holds ``samples.parquet`` (one row per sample), ``images/`` and ``manifest.json``
(provenance: generator/adapter, parameters, counts). Image paths in rows are relative to the directory so a
dataset can be moved or versioned by DVC as one unit.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from rubricflow.pipeline.splits import check_split
from rubricflow.util.io import write_json, write_parquet

SPLITS = ("train", "val", "test", "calib")
ANSWER_TYPES = ("int", "float", "choice", "text")
PARQUET = "samples.parquet"
MANIFEST = "manifest.json"

# Arrow schema of samples.parquet; `facts` is JSON text so heterogeneous facts fit one column.
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("images", pa.list_(pa.string())),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("answer_type", pa.string()),
        ("task", pa.string()),
        ("facts", pa.string()),
        ("split", pa.string()),
        ("source", pa.string()),
    ]
)
COLUMNS = tuple(ARROW_SCHEMA.names)


@dataclass
class Sample:
    id: str
    images: list[str]
    question: str
    answer: str
    answer_type: Literal["int", "float", "choice", "text"]
    task: str
    facts: dict[str, Any] = field(default_factory=dict)
    split: Literal["train", "val", "test", "calib"] = "train"
    source: str = "synthetic"

    def to_row(self) -> dict:
        row = asdict(self)
        row["facts"] = json.dumps(self.facts, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict) -> "Sample":
        facts = row.get("facts")
        return cls(
            id=str(row["id"]),
            images=list(row.get("images") or []),
            question=row["question"],
            answer=row["answer"],
            answer_type=row["answer_type"],
            task=row["task"],
            facts=json.loads(facts) if isinstance(facts, str) and facts else (facts or {}),
            split=row.get("split") or "train",
            source=row.get("source") or "",
        )


def write_dataset(out_dir: str | Path, samples: list[Sample], manifest: dict | None = None) -> Path:
    """Write ``samples.parquet`` and ``manifest.json`` atomically (images must already be under out_dir)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([s.to_row() for s in samples], schema=ARROW_SCHEMA)
    write_parquet(out / PARQUET, table)
    counts: dict[str, dict[str, int]] = {}
    for s in samples:
        counts.setdefault(s.task, {}).setdefault(s.split, 0)
        counts[s.task][s.split] += 1
    man = {"n_samples": len(samples), "counts": counts, **(manifest or {})}
    write_json(out / MANIFEST, man, default=None)
    return out


def read_table(data_dir: str | Path):
    """The raw pandas frame of a dataset (no validation; see rubricflow.data.validate)."""
    return pq.read_table(Path(data_dir) / PARQUET).to_pandas()


def read_dataset(data_dir: str | Path, split: str | None = None, task: str | None = None) -> list[Sample]:
    """The samples of ``data_dir`` (of one split / task). Raises ``TestSplitAccess`` when a stage that may not read
    the test split asks for it (rubricflow.pipeline.splits)."""
    check_split(split, str(data_dir))
    path = Path(data_dir) / PARQUET
    if not path.exists():
        raise FileNotFoundError(f"{path}: no dataset here (expected {PARQUET}); run `rubricflow data` first")
    rows = pq.read_table(path).to_pylist()
    out = [Sample.from_row(r) for r in rows]
    if split is not None:
        out = [s for s in out if s.split == split]
    if task is not None:
        out = [s for s in out if s.task == task]
    return out


def load_images(data_dir: str | Path, sample: Sample) -> list:
    from PIL import Image

    ims = []
    for rel in sample.images:
        with Image.open(Path(data_dir) / rel) as im:
            ims.append(im.convert("RGB"))
    return ims
