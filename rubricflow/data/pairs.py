"""Preference pairs: two responses to one question and the preferred one, stored like every rubricflow dataset.

A pair directory holds ``pairs.parquet`` (one row per pair), ``images/`` and ``manifest.json``. Image paths in
rows are relative to the directory, so a pair set moves (and is versioned by DVC) as one unit. The same schema
holds synthetic pairs (a method's pair generator writes them with ``write_pairs``) and benchmark pairs (the
VL-RewardBench / Multimodal RewardBench adapters in rubricflow.data.adapters).

Fields of a ``PreferencePair``:

* ``id``           unique within the directory.
* ``images``       image paths relative to the directory (one or more).
* ``question``     the prompt both responses answer.
* ``response_a`` / ``response_b``  the two candidate responses (must differ).
* ``preferred``    ``"A"`` or ``"B"``: the human / ground-truth winner.
* ``split``        ``train | val | test | calib``.
* ``category``     optional subset label (benchmark subcategory, or ``<task>/<error type>`` for synthetic pairs).
* ``source``       provenance (``synthetic/counting``, ``vl_rewardbench``, ``mm_rewardbench`` ...).
* ``facts``        optional ground-truth facts of the image (the synthetic tasks' ``perception`` / ``intermediate``
                   / ``target``, see rubricflow.data.traces); ``{}`` for benchmarks. Stored as JSON text.
* ``meta``         optional free-form provenance (error annotations, original ids); JSON text.

``validate_pairs`` is the data gate: it fails with ``PairDataError`` naming every problem it found (schema,
nulls, preferred not in {A, B}, A == B, missing / undecodable images, duplicate ids, A/B imbalance).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from rubricflow.data.schema import MANIFEST, SPLITS
from rubricflow.pipeline.splits import check_split
from rubricflow.util.io import write_json, write_parquet

PAIRS_PARQUET = "pairs.parquet"
VERDICTS = ("A", "B")

PAIR_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("images", pa.list_(pa.string())),
        ("question", pa.string()),
        ("response_a", pa.string()),
        ("response_b", pa.string()),
        ("preferred", pa.string()),
        ("split", pa.string()),
        ("category", pa.string()),
        ("source", pa.string()),
        ("facts", pa.string()),
        ("meta", pa.string()),
    ]
)
PAIR_COLUMNS = tuple(PAIR_SCHEMA.names)
REQUIRED = ("id", "images", "question", "response_a", "response_b", "preferred", "split")


class PairDataError(ValueError):
    """A pair dataset failed the gate; the message names the directory, the check and example ids."""


@dataclass
class PreferencePair:
    id: str
    images: list[str]
    question: str
    response_a: str
    response_b: str
    preferred: Literal["A", "B"]
    split: Literal["train", "val", "test", "calib"] = "test"
    category: str = ""
    source: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def response(self, which: str) -> str:
        return self.response_a if which == "A" else self.response_b

    def swapped(self) -> "PreferencePair":
        """The same pair with A and B exchanged (used to balance A/B order)."""
        return PreferencePair(
            self.id,
            list(self.images),
            self.question,
            self.response_b,
            self.response_a,
            "B" if self.preferred == "A" else "A",
            self.split,
            self.category,
            self.source,
            dict(self.facts),
            {**self.meta, "swapped": not self.meta.get("swapped", False)},
        )

    def to_row(self) -> dict:
        row = asdict(self)
        row["facts"] = json.dumps(self.facts, sort_keys=True)
        row["meta"] = json.dumps(self.meta, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: dict) -> "PreferencePair":
        def _json(v):
            return json.loads(v) if isinstance(v, str) and v else (v or {})

        return cls(
            id=str(row["id"]),
            images=list(row.get("images") or []),
            question=row["question"],
            response_a=row["response_a"],
            response_b=row["response_b"],
            preferred=row["preferred"],
            split=row.get("split") or "test",
            category=row.get("category") or "",
            source=row.get("source") or "",
            facts=_json(row.get("facts")),
            meta=_json(row.get("meta")),
        )


def write_pairs(out_dir: str | Path, pairs: list[PreferencePair], manifest: dict | None = None) -> Path:
    """Write ``pairs.parquet`` and ``manifest.json`` atomically; images must already be under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([p.to_row() for p in pairs], schema=PAIR_SCHEMA)
    write_parquet(out / PAIRS_PARQUET, table)
    counts: dict[str, dict[str, int]] = {}
    for p in pairs:
        counts.setdefault(p.split, {}).setdefault(p.preferred, 0)
        counts[p.split][p.preferred] += 1
    man = {"n_pairs": len(pairs), "preferred_counts": counts, **(manifest or {})}
    write_json(out / MANIFEST, man, default=None)
    return out


def read_pairs(data_dir: str | Path, split: str | None = None, limit: int | None = None) -> list[PreferencePair]:
    check_split(split, str(data_dir))
    path = Path(data_dir) / PAIRS_PARQUET
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no preference pairs here (expected {PAIRS_PARQUET}); run the stage that generates them "
            "or ingest a benchmark first (`rubricflow ingest --format vlrewardbench|mmrewardbench`)"
        )
    out = [PreferencePair.from_row(r) for r in pq.read_table(path).to_pylist()]
    if split is not None:
        out = [p for p in out if p.split == split]
    return out[:limit] if limit else out


def load_pair_images(data_dir: str | Path, pair: PreferencePair) -> list:
    from PIL import Image

    ims = []
    for rel in pair.images:
        with Image.open(Path(data_dir) / rel) as im:
            ims.append(im.convert("RGB"))
    return ims


# ----------------------------------------------------------------------------------------------------------------
# The data gate


def _examples(ids: list[str], k: int = 3) -> str:
    shown = ", ".join(repr(i) for i in ids[:k])
    return shown + (f" (+{len(ids) - k} more)" if len(ids) > k else "")


def _norm(text: str) -> str:
    return " ".join(str(text).split())


def check_pairs(
    data_dir: str | Path,
    balance_tol: float | None = 0.1,
    min_balance_n: int = 10,
    check_images: bool = True,
) -> tuple[list[str], dict]:
    """Run every check and return ``(problems, stats)`` without raising (``validate_pairs`` raises)."""
    d = Path(data_dir)
    path = d / PAIRS_PARQUET
    if not path.exists():
        return [f"{path}: file not found"], {}
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - any read failure is reported by name
        return [f"{path}: not a readable parquet file ({e})"], {}
    problems: list[str] = []
    # -- schema: every column present with the expected type
    for f in PAIR_SCHEMA:
        if f.name not in table.schema.names:
            problems.append(f"schema: column `{f.name}` is missing (expected {f.type})")
        elif not table.schema.field(f.name).type.equals(f.type) and table.schema.field(f.name).type != pa.null():
            problems.append(f"schema: column `{f.name}` has type {table.schema.field(f.name).type}, expected {f.type}")
    if problems:
        return problems, {}
    rows = table.to_pylist()
    stats: dict[str, Any] = {"n_pairs": len(rows)}
    if not rows:
        return ["empty: the file holds no pairs"], stats
    # -- nulls / empty values in required columns
    for col in REQUIRED:
        bad = [str(r["id"]) for r in rows if r[col] is None or (isinstance(r[col], (str, list)) and not r[col])]
        if bad:
            problems.append(f"nulls: column `{col}` is null or empty in {len(bad)} rows: {_examples(bad)}")
    # -- values
    bad = [str(r["id"]) for r in rows if r["preferred"] not in VERDICTS]
    if bad:
        got = sorted({repr(r["preferred"]) for r in rows if r["preferred"] not in VERDICTS})
        problems.append(f"preferred: expected 'A' or 'B', got {', '.join(got)} in rows {_examples(bad)}")
    bad = [str(r["id"]) for r in rows if r["split"] not in SPLITS]
    if bad:
        problems.append(f"split: expected one of {SPLITS} in rows {_examples(bad)}")
    bad = [
        str(r["id"]) for r in rows if r["response_a"] and r["response_b"] and _norm(r["response_a"]) == _norm(r["response_b"])
    ]
    if bad:
        problems.append(f"responses: response_a == response_b in {len(bad)} rows: {_examples(bad)}")
    for col in ("facts", "meta"):
        bad = []
        for r in rows:
            v = r[col]
            if v:
                try:
                    if not isinstance(json.loads(v), dict):
                        bad.append(str(r["id"]))
                except json.JSONDecodeError:
                    bad.append(str(r["id"]))
        if bad:
            problems.append(f"{col}: not a JSON object in rows {_examples(bad)}")
    # -- ids
    dup = [i for i, c in Counter(str(r["id"]) for r in rows).items() if c > 1]
    if dup:
        problems.append(f"ids: {len(dup)} duplicate ids: {_examples(dup)}")
    # -- images exist and decode
    if check_images:
        from PIL import Image

        missing, broken = [], []
        for r in rows:
            for rel in r["images"] or []:
                p = d / rel
                if not p.is_file():
                    missing.append(f"{r['id']}:{rel}")
                    continue
                try:
                    with Image.open(p) as im:
                        im.load()
                except Exception:  # noqa: BLE001 - PIL raises many types for corrupt files
                    broken.append(f"{r['id']}:{rel}")
        if missing:
            problems.append(f"images: {len(missing)} image files do not exist: {_examples(missing)}")
        if broken:
            problems.append(f"images: {len(broken)} image files do not decode: {_examples(broken)}")
    # -- A/B balance per split
    by_split: dict[str, Counter] = {}
    for r in rows:
        by_split.setdefault(r["split"], Counter())[r["preferred"]] += 1
    stats["frac_a"] = {}
    for split, c in sorted(by_split.items(), key=lambda kv: str(kv[0])):
        n = c["A"] + c["B"]
        if not n:
            continue
        frac = c["A"] / n
        stats["frac_a"][split] = frac
        if balance_tol is not None and n >= min_balance_n and abs(frac - 0.5) > balance_tol:
            problems.append(
                f"balance: split `{split}` prefers A in {c['A']}/{n} pairs ({frac:.2f}); "
                f"expected 0.5 +- {balance_tol} (swap A/B in some pairs, e.g. PreferencePair.swapped)"
            )
    return problems, stats


def validate_pairs(
    data_dir: str | Path, balance_tol: float | None = 0.1, min_balance_n: int = 10, check_images: bool = True
) -> dict:
    """The data gate: raise ``PairDataError`` naming each problem; return stats when the directory passes.

    ``balance_tol``: allowed deviation of the fraction of A-preferred pairs from 0.5, per split with at least
    ``min_balance_n`` pairs (``None`` skips the balance check).
    """
    problems, stats = check_pairs(data_dir, balance_tol, min_balance_n, check_images)
    if problems:
        raise PairDataError(f"{Path(data_dir) / PAIRS_PARQUET}: failed the pair data gate:\n  - " + "\n  - ".join(problems))
    return stats
