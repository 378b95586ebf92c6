"""Great Expectations gates: every dataset is validated before anything uses it.

``validate_dataset(dir)`` runs an expectation suite over ``samples.parquet`` plus derived columns that GE cannot
compute itself (image paths are relative and resolve inside the data set folder, the files exist and decode,
facts are JSON); a data set with 0 rows is refused. A failed gate raises ``ValidationFailed`` whose
message lists, per failed expectation, the expectation, the column and a few offending ids. On success a stamp
(`<report>.json`) records the parquet's sha256; stages that read the dataset call ``require_validated`` so a
dataset changed after its gate is refused instead of silently used.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from rubricflow.data.schema import ANSWER_TYPES, COLUMNS, PARQUET, SPLITS
from rubricflow.sections import DataConfig
from rubricflow.util.io import write_json


class ValidationFailed(ValueError):
    def __init__(self, message: str, failures: list[dict]):
        super().__init__(message)
        self.failures = failures


@dataclass
class GateReport:
    dataset: str
    sha256: str
    n_rows: int
    split_counts: dict[str, int]
    expectations: int
    failures: list[dict] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return not self.failures


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _image_status(data_dir: Path, images, task: str | None = None) -> str:
    """'ok', or why not: 'no images', 'null image path', 'absolute path: <p>', 'outside the data set: <p>',
    'missing: <p>', 'corrupt: <p>', 'images in a text-only task'. A path must be relative and resolve (symlinks
    followed) inside ``data_dir``. A text-only task (``synthetic.TEXT_TASKS``) must have no image."""
    from PIL import Image

    from rubricflow.data.synthetic import TEXT_TASKS

    if task in TEXT_TASKS:
        return "ok" if images is None or len(images) == 0 else "images in a text-only task"
    if images is None or len(images) == 0:
        return "no images"
    root = data_dir.resolve()
    for rel in images:
        if rel is None or not isinstance(rel, str) or not rel.strip():
            return "null image path"
        if Path(rel).is_absolute():
            return f"absolute path, outside the data set: {rel}"
        p = data_dir / rel
        if ".." in Path(rel).parts or not p.resolve().is_relative_to(root):
            return f"outside the data set: {rel}"
        if not p.exists():
            return f"missing: {rel}"
        try:
            with Image.open(p) as im:
                im.load()
        except Exception:  # noqa: BLE001 - any decoder error means the file is unusable
            return f"corrupt: {rel}"
    return "ok"


def _facts_status(facts) -> str:
    if facts is None:
        return "ok"
    try:
        v = json.loads(facts) if isinstance(facts, str) else facts
    except (TypeError, json.JSONDecodeError):
        return "not JSON"
    return "ok" if isinstance(v, dict) else "not an object"


def _gx_validate(df, min_split_size: int, required_splits: list[str]) -> tuple[int, list[dict]]:
    import great_expectations as gx

    ctx = gx.get_context(mode="ephemeral")
    asset = ctx.data_sources.add_pandas("rubricflow").add_dataframe_asset("samples")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
    E = gx.expectations
    suite = gx.ExpectationSuite("rubricflow_samples")
    for col in ("id", "question", "answer", "answer_type", "task", "split"):
        suite.add_expectation(E.ExpectColumnValuesToNotBeNull(column=col))
    suite.add_expectation(E.ExpectColumnValuesToBeUnique(column="id"))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="answer_type", value_set=list(ANSWER_TYPES)))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="image_status", value_set=["ok"]))
    suite.add_expectation(E.ExpectColumnValuesToBeInSet(column="facts_status", value_set=["ok"]))
    # Answer types: the answer text must parse as its declared type.
    for atype, regex in (("int", r"^-?\d+$"), ("float", r"^-?(?:\d+(?:\.\d*)?|\.\d+|\d+/\d+)$"), ("choice", r"^\(?[A-Za-z]\)?$")):
        suite.add_expectation(
            E.ExpectColumnValuesToMatchRegex(
                column="answer", regex=regex, row_condition=f'answer_type=="{atype}"', condition_parser="pandas"
            )
        )
    suite.add_expectation(E.ExpectColumnValueLengthsToBeBetween(column="question", min_value=1))
    if required_splits:
        suite.add_expectation(E.ExpectColumnDistinctValuesToContainSet(column="split", value_set=required_splits))
    # GE's fluent batches draw a tqdm bar per validation regardless of the context setting; keep stderr clean.
    with contextlib.redirect_stderr(io.StringIO()):
        res = batch.validate(suite, result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["id"]})
    failures = []
    for r in res.results:
        if r.success:
            continue
        cfg = r.expectation_config
        idx = r.result.get("unexpected_index_list") or []
        ids = [str(x.get("id")) for x in idx[:5] if isinstance(x, dict)]
        vals = [str(v) for v in (r.result.get("partial_unexpected_list") or [])[:3]]
        failures.append(
            {
                "expectation": cfg.type,
                "column": cfg.kwargs.get("column"),
                "unexpected_count": r.result.get("unexpected_count"),
                "ids": ids,
                "values": vals,
                "observed": r.result.get("observed_value"),
            }
        )
    # Split sizes: every present split must have at least min_split_size rows.
    counts = df["split"].value_counts().to_dict()
    small = {k: int(v) for k, v in counts.items() if 0 < v < min_split_size}
    if small:
        failures.append(
            {
                "expectation": "split_size_at_least",
                "column": "split",
                "unexpected_count": len(small),
                "ids": [],
                "values": [f"{k}={v} (< {min_split_size})" for k, v in small.items()],
                "observed": counts,
            }
        )
    return len(suite.expectations) + 1, failures


def validate_dataset(
    data_dir: str | Path, min_split_size: int = 1, required_splits: list[str] | None = None
) -> GateReport:
    """Run the gate; raise ValidationFailed (message names expectation, column, offending ids) on failure."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data_dir = Path(data_dir)
    path = data_dir / PARQUET
    if not path.exists():
        raise ValidationFailed(f"{path}: dataset file not found", [{"expectation": "file_exists", "column": None}])
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValidationFailed(f"{path}: not a readable parquet file ({e})", [{"expectation": "parquet_readable"}])
    if table.num_rows == 0:
        raise ValidationFailed(
            f"{path}: the data set has 0 rows; expected at least one sample", [{"expectation": "table_row_count_at_least_1"}]
        )
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValidationFailed(
            f"{path}: expect_table_columns_to_match_set failed: missing column(s) {missing} "
            f"(has {table.column_names})",
            [{"expectation": "expect_table_columns_to_match_set", "column": c} for c in missing],
        )
    def is_str(t) -> bool:
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    schema = {f.name: f.type for f in table.schema}
    wrong = {c: str(schema[c]) for c in ("id", "question", "answer", "answer_type", "task", "split") if not is_str(schema[c])}
    t_img = schema["images"]
    if not ((pa.types.is_list(t_img) or pa.types.is_large_list(t_img)) and is_str(t_img.value_type)):
        wrong["images"] = str(t_img)
    if wrong:
        raise ValidationFailed(
            f"{path}: expect_column_values_to_be_of_type failed: "
            + ", ".join(f"column `{c}` has type {t}, expected {'list<string>' if c == 'images' else 'string'}" for c, t in wrong.items()),
            [{"expectation": "expect_column_values_to_be_of_type", "column": c} for c in wrong],
        )
    df = table.to_pandas()
    df["image_status"] = [_image_status(data_dir, ims, t) for ims, t in zip(df["images"], df["task"])]
    df["facts_status"] = [_facts_status(f) for f in df["facts"]]
    df = df.drop(columns=["images", "facts"])
    n_exp, failures = _gx_validate(df, min_split_size, required_splits or [])
    report = GateReport(
        dataset=str(data_dir),
        sha256=file_sha256(path),
        n_rows=len(df),
        split_counts={k: int(v) for k, v in df["split"].value_counts().to_dict().items()},
        expectations=n_exp,
        failures=failures,
    )
    if failures:
        lines = [f"{data_dir}: validation gate failed ({len(failures)} of {n_exp} expectations):"]
        for f in failures:
            ids = f", ids {f['ids']}" if f.get("ids") else ""
            vals = f", values {f['values']}" if f.get("values") else ""
            lines.append(
                f"  - {f['expectation']} on column `{f['column']}`: {f.get('unexpected_count')} unexpected{ids}{vals}"
            )
        raise ValidationFailed("\n".join(lines), failures)
    return report


def write_stamp(report: GateReport, out: str | Path) -> Path:
    return write_json(out, report.__dict__, default=None)


def require_validated(data_dir: str | Path, stamp: str | Path) -> None:
    """Refuse a dataset that was never validated or changed after its gate."""
    stamp = Path(stamp)
    parquet = Path(data_dir) / PARQUET
    if not stamp.exists():
        raise ValidationFailed(
            f"{data_dir}: no validation stamp at {stamp}; run `rubricflow validate {data_dir}` first", []
        )
    recorded = json.loads(stamp.read_text()).get("sha256")
    if recorded != file_sha256(parquet):
        raise ValidationFailed(
            f"{parquet}: changed since it was validated (stamp {stamp}); run `rubricflow validate {data_dir}` again", []
        )


# ------------------------------------------------------------------------------------------------------------
# the gate stages pass: a data set's stamp


def dataset_key(data_dir: str | Path) -> str:
    """The name a data set's validation stamp and report are filed under: its path relative to the project root
    (the working directory, against which params.yaml paths resolve), e.g. ``data/synthetic``. A folder outside
    the project gets ``_outside/<name>-<12 hex digits of its absolute path>``, so no key leaves ``reports/``."""
    absd, root = Path(os.path.abspath(data_dir)), Path(os.path.abspath(Path.cwd()))
    if absd != root and absd.is_relative_to(root):
        return absd.relative_to(root).as_posix()
    return f"_outside/{absd.name or 'root'}-{hashlib.sha256(str(absd).encode()).hexdigest()[:12]}"


def stamp_path(reports_dir: str | Path, data_dir: str | Path) -> Path:
    """``<reports>/validation/<dataset_key>.json`` (the pipeline's: ``reports/validation/data/synthetic.json``)."""
    return Path(reports_dir) / "validation" / f"{dataset_key(data_dir)}.json"


def require_gate(data: DataConfig, reports_dir: str | Path, data_dir: str | Path | None = None) -> None:
    """Fail unless ``data_dir`` (default ``data.out_dir`` of the ``data`` section) passed ``validate`` and has not changed since."""
    data_dir = data_dir or data.out_dir
    require_validated(data_dir, stamp_path(reports_dir, data_dir))
