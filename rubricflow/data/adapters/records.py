"""Reading the records of a source file (parquet, json, jsonl) and the checks every adapter shares: required
fields, unique ids. Unreadable files (truncated parquet, non-UTF-8 JSON) and records that are not objects are
reported by file and record."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from rubricflow.util.io import JSON_TOO_DEEP, read_jsonl


class IngestError(ValueError):
    """A source that cannot be converted; the message names the file, the record and the field."""


def read_records(src: Path) -> list[dict]:
    """The records of ``src`` (parquet, jsonl, or a JSON list / an object with a ``data`` list): at least one, each
    an object."""
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
        return read_jsonl(src, error=IngestError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise IngestError(f"{src}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise IngestError(f"{src}: {JSON_TOO_DEEP}") from None
    if isinstance(data, dict):
        for key in ("data", "samples", "rows"):
            if isinstance(data.get(key), list):
                return data[key]
        raise IngestError(f"{src}: expected a JSON list of records (or an object with a 'data' list)")
    return data


def require_fields(src: Path, row: dict, i: int, *fields: str) -> None:
    missing = [f for f in fields if f not in row or row[f] is None]
    if missing:
        raise IngestError(f"{src}: record {i}: missing required field(s) {missing}; record has {sorted(row)}")


def text_field(src: Path, value: Any, i: int, name: str) -> str:
    """A text field of a record: a string, or an integer or finite float written out; anything else (a missing
    value, NaN, a boolean, a list or an object) is an IngestError naming the file, record and field, not the text
    ``"nan"`` / ``"None"`` / ``"[...]"``."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise IngestError(f"{src}: record {i}: field `{name}` must be text (or a finite number), got {value!r}")


def rank_value(src: Path, value: Any, i: int, name: str) -> float:
    """One rank of a ranking field: an integer or a finite number (never NaN, None or a boolean)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise IngestError(f"{src}: record {i}: field `{name}` must hold finite numbers (ranks), got {value!r}")
    return float(value)


class UniqueIds:
    """Refuses a converted id seen before, naming both records."""

    def __init__(self, src: Path):
        self.src, self.seen = src, {}

    def add(self, sid: str, i: int) -> None:
        if sid in self.seen:
            raise IngestError(f"{self.src}: record {i}: duplicate id {sid!r} (also record {self.seen[sid]}); ids must be unique")
        self.seen[sid] = i


def safe_id(x: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(x))
