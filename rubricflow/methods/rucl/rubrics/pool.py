"""Rubric pools: the candidate file format, validation, dedupe and the default pool shipped in the repo.

A pool file (JSON)::

    {"version": "...", "provenance": {"source": "default pool v1" | "teacher", "teacher_model": ...,
     "prompt_version": ..., ...}, "rubrics": [{"id", "text", "category", "check", "provenance"}, ...]}

The same format, with ``tier`` set and calibration numbers added, is the tiers file of the stratify stage.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from rubricflow.judge.protocol import Rubric
from rubricflow.util.io import write_json

DEFAULT_POOL_PATH = Path(__file__).resolve().parents[1] / "resources" / "rubric_pool_default.json"


@dataclass
class RubricPool:
    rubrics: list[Rubric]
    provenance: dict = field(default_factory=dict)
    version: str = ""
    extra: dict = field(default_factory=dict)  # per-rubric extra fields by id (coverage, pass rate, ...)

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.rubrics]

    def to_json(self) -> dict:
        rows = []
        for r in self.rubrics:
            row = r.to_dict()
            row.update(self.extra.get(r.id, {}))
            rows.append(row)
        return {"version": self.version, "provenance": self.provenance, "rubrics": rows}


def normalise_text(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def dedupe(rubrics: list[Rubric]) -> tuple[list[Rubric], list[str]]:
    """Drop rubrics whose normalised text repeats an earlier one; returns (kept, dropped descriptions)."""
    seen: set[str] = set()
    kept, dropped = [], []
    for r in rubrics:
        key = normalise_text(r.text)
        if key in seen:
            dropped.append(f"{r.id}: duplicate text")
            continue
        seen.add(key)
        kept.append(r)
    return kept, dropped


def validate_rubrics(rubrics: list[Rubric], where: str) -> None:
    """Ids unique, texts unique; raises ValueError naming ``where`` and the offending ids."""
    if not rubrics:
        raise ValueError(f"{where}: no rubrics")
    ids = [r.id for r in rubrics]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{where}: duplicate rubric id(s) {dup}")
    _, dropped = dedupe(rubrics)
    if dropped:
        raise ValueError(f"{where}: duplicate rubric text: {dropped}")


_EXTRA_FIELDS = ("coverage", "pass_rate", "n_judged", "n_applicable", "rank", "score")


def load_pool(path: str | Path) -> RubricPool:
    """Read and validate a pool or tiers file; errors name the file and the field."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: rubric pool not found (run the `rubrics-pool` stage first)")
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rubrics"), list):
        raise ValueError(f"{p}: expected an object with a `rubrics` list")
    rubrics, extra = [], {}
    for i, row in enumerate(doc["rubrics"]):
        if not isinstance(row, dict):
            raise ValueError(f"{p}: rubrics[{i}]: expected an object, got {type(row).__name__}")
        core = {k: v for k, v in row.items() if k not in _EXTRA_FIELDS}
        r = Rubric.from_dict(core, where=f"{p}: rubrics[{i}]")
        rubrics.append(r)
        ex = {k: row[k] for k in _EXTRA_FIELDS if k in row}
        if ex:
            extra[r.id] = ex
    validate_rubrics(rubrics, str(p))
    prov = doc.get("provenance", {})
    if not isinstance(prov, dict):
        raise ValueError(f"{p}: `provenance` must be an object")
    return RubricPool(rubrics, prov, str(doc.get("version", "")), extra)


def save_pool(pool: RubricPool, path: str | Path) -> Path:
    """Write atomically (a failed write leaves the previous file intact)."""
    return write_json(path, pool.to_json(), sort_keys=False, default=None, ensure_ascii=False, trailing_newline=True)


def load_default_pool(path: str | Path | None = None) -> RubricPool:
    return load_pool(path or DEFAULT_POOL_PATH)


def load_tiers(path: str | Path) -> list[Rubric]:
    """The kept rubrics with their tiers (the stratify stage's output), checked to be tiered."""
    pool = load_pool(path)
    bad = [r.id for r in pool.rubrics if r.tier not in ("foundational", "advanced")]
    if bad:
        raise ValueError(f"{path}: rubric(s) {bad} have no foundational/advanced tier (not a stratify output)")
    return pool.rubrics
