"""Data sets as MLflow run inputs: which data, split and version a stage run trained or was evaluated on.

A stage (or a study unit) that reads a data set, preference pairs or RoRo's routes calls
``run.log_input(path, split=..., context=...)`` (``StageRun.log_input``), which logs one ``mlflow.log_input`` entry:

* **name** ``<folder or file stem>:<split>`` (one entry per split: MLflow keys a data set by name and digest, and the
  row count is per split);
* **digest** the DVC content hash of the file or folder when a ``dvc.lock`` records it and the content still
  matches it (``<md5>`` of a file, ``<md5>.dir`` of a folder, exactly what ``dvc.lock`` and the DVC cache hold);
  otherwise the SHA-256 of the content (of a file's bytes; of a folder's sorted ``relative path, md5`` list),
  shortened to the 36 characters MLflow stores. Two runs on different data therefore show different digests;
* **source** the path relative to the project root, **profile** ``{"num_rows": n}`` (the rows of that split);
* **schema** the columns of its table and their types (``samples.parquet``, ``pairs.parquet``, a ``.parquet`` or
  ``.jsonl`` file; MLflow's ``Schema`` inferred from a pandas frame of its first rows), shown in the dataset drawer;
  none for an input without a table (a folder of models, say);
* **tags** ``mlflow.data.context`` (``training``, ``evaluation``, ``calibration``), ``rubricflow.split``,
  ``rubricflow.digest`` (``dvc-md5:<hash>`` or ``sha256:<full hash>``) and, for a DVC digest,
  ``rubricflow.dvc_stage`` (the stage whose output it is).

A path that does not exist raises ``FileNotFoundError`` naming it (a stage never logs an input it did not read).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from rubricflow.util.env import PROJECT_ROOT
from rubricflow.util.hashing import path_hash
from rubricflow.util.io import iter_jsonl, read_jsonl

MLFLOW_DIGEST_CHARS = 36  # MLflow's datasets table stores at most 36 characters of a digest
TABLES = ("samples.parquet", "pairs.parquet")  # the table of a data set folder / a pair folder


@dataclass(frozen=True)
class DataInput:
    """What one ``mlflow.log_input`` entry says about a data set."""

    name: str
    source: str  # the path, relative to the project root when inside it
    split: str | None
    context: str
    num_rows: int | None
    digest: str  # as MLflow stores it (at most 36 characters)
    digest_full: str  # ``dvc-md5:<hash>`` or ``sha256:<hash>``
    dvc_stage: str | None = None  # the dvc.lock stage whose output it is (DVC digests only)

    @property
    def tags(self) -> dict[str, str]:
        out = {"rubricflow.digest": self.digest_full}
        if self.split:
            out["rubricflow.split"] = self.split
        if self.dvc_stage:
            out["rubricflow.dvc_stage"] = self.dvc_stage
        return out


def dvc_md5(path: Path) -> str:
    """DVC's content hash of ``path``: the md5 of a file; for a folder, the md5 of the JSON list of its files'
    ``{"md5", "relpath"}`` sorted by path, plus ``.dir`` (``dvc_data``'s ``Tree.digest``). File md5s are memoised
    (``rubricflow.util.hashing.path_hash``)."""
    if path.is_file():
        return path_hash(path)
    entries = [{"md5": path_hash(f), "relpath": f.relative_to(path).as_posix()}
               for f in sorted(x for x in path.rglob("*") if x.is_file())]
    entries.sort(key=lambda e: e["relpath"])
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def content_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, or of a folder's sorted ``relative path\\0md5`` lines."""
    h = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    for f in sorted(x for x in path.rglob("*") if x.is_file()):
        h.update(f"{f.relative_to(path).as_posix()}\0{path_hash(f)}\n".encode())
    return h.hexdigest()


def dvc_lock_record(path: Path, root: Path | None = None) -> tuple[str, str] | None:
    """``(stage, md5)`` of the ``dvc.lock`` output that is ``path`` (the project's ``dvc.lock`` and those one
    folder down, e.g. ``smol/dvc.lock``), or None."""
    import yaml

    root = (root or PROJECT_ROOT).resolve()
    target = path.resolve()
    for lock in [root / "dvc.lock", *sorted(root.glob("*/dvc.lock"))]:
        if not lock.is_file():
            continue
        try:
            doc = yaml.safe_load(lock.read_text()) or {}
        except (yaml.YAMLError, OSError, UnicodeDecodeError):
            continue
        for stage, st in (doc.get("stages") or {}).items() if isinstance(doc, dict) else ():
            for out in (st or {}).get("outs") or []:
                if (isinstance(out, dict) and out.get("md5")
                        and (lock.parent / str(out.get("path"))).resolve() == target):
                    return str(stage), str(out["md5"])
    return None


def _table(path: Path) -> Path | None:
    if path.is_file():
        return path if path.suffix in (".parquet", ".jsonl") else None
    for name in TABLES:
        if (path / name).is_file():
            return path / name
    return None


def row_count(path: Path, split: str | None = None) -> int | None:
    """Rows of the data set's table (``samples.parquet``, ``pairs.parquet``, a ``.parquet`` or ``.jsonl`` file),
    only those of ``split`` when given and the table has a ``split`` column; None when there is no table."""
    table = _table(path)
    if table is None:
        return None
    if table.suffix == ".jsonl":
        rows = read_jsonl(table)
        return sum(1 for r in rows if split is None or not isinstance(r, dict) or r.get("split", split) == split)
    import pyarrow.parquet as pq

    names = pq.read_schema(table).names
    if split is None or "split" not in names:
        return pq.ParquetFile(table).metadata.num_rows
    col = pq.read_table(table, columns=["split"]).column("split").to_pylist()
    return sum(1 for v in col if v == split)


SCHEMA_ROWS = 100  # rows a schema is inferred from


def table_schema(path: str | Path):
    """MLflow's ``Schema`` of the table of ``path`` (see :func:`row_count` for which table), inferred from a pandas
    frame of its first :data:`SCHEMA_ROWS` rows; None when ``path`` has no table."""
    import pandas as pd
    from mlflow.models import infer_signature

    table = _table(Path(path))
    if table is None:
        return None
    if table.suffix == ".jsonl":
        rows = [row for _, row in islice(iter_jsonl(table), SCHEMA_ROWS)]
        frame = pd.DataFrame([r if isinstance(r, dict) else {"value": r} for r in rows])
    else:
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(table)
        frame = next(pf.iter_batches(batch_size=SCHEMA_ROWS), None)
        frame = frame.to_pandas() if frame is not None else pf.schema_arrow.empty_table().to_pandas()

    with warnings.catch_warnings():  # MLflow's hint about integer columns and missing values: about model inputs
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer", category=UserWarning)
        return infer_signature(frame).inputs


def describe_input(path: str | Path, *, split: str | None = None, context: str = "training",
                   name: str | None = None, root: Path | None = None) -> DataInput:
    """The :class:`DataInput` of ``path`` (see the module docstring)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"data input {p}: no such file or folder")
    root = (root or PROJECT_ROOT).resolve()
    resolved = p.resolve()
    source = resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else str(p)
    base = name or (p.stem if p.is_file() else p.name)
    locked = dvc_lock_record(p, root)
    stage = None
    if locked is not None and dvc_md5(p) == locked[1]:
        stage, digest = locked[0], locked[1]
        full = f"dvc-md5:{digest}"
    else:
        sha = content_sha256(p)
        digest, full = sha[:MLFLOW_DIGEST_CHARS], f"sha256:{sha}"
    return DataInput(name=f"{base}:{split}" if split else base, source=source, split=split, context=context,
                     num_rows=row_count(p, split), digest=digest, digest_full=full, dvc_stage=stage)


def mlflow_dataset(inp: DataInput, schema=None):
    """An ``mlflow.data`` data set (metadata only: the data stays where it is) for ``inp``, with ``schema`` (an
    MLflow ``Schema``, :func:`table_schema`) when given."""
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource

    class _Input(MetaDataset):
        @property
        def profile(self):
            return {"num_rows": inp.num_rows} if inp.num_rows is not None else None

        def to_dict(self) -> dict[str, str]:
            out = super().to_dict()
            if self.profile is not None:
                out["profile"] = json.dumps(self.profile)
            return out

    return _Input(LocalArtifactDatasetSource(inp.source), name=inp.name, digest=inp.digest, schema=schema)


def log_data_input(mlflow, path: str | Path, *, split: str | None = None, context: str = "training",
                   name: str | None = None) -> DataInput:
    """Log ``path`` as an input of the active MLflow run; returns what was logged."""
    inp = describe_input(path, split=split, context=context, name=name)
    mlflow.log_input(mlflow_dataset(inp, table_schema(path)), context=inp.context, tags=inp.tags)
    return inp
