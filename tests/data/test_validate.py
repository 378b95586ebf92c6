"""Great Expectations gates: broken datasets are refused with a message naming the problem, and nothing
downstream is written or changed (checked through the real CLI and a real `dvc repro`)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from flows.cli import app
from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.data.validate import ValidationFailed, require_validated, validate_dataset, write_stamp

SIZES = {"train": 10, "val": 0, "test": 10, "calib": 0}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    d = tmp_path_factory.mktemp("good") / "ds"
    build_synthetic_dataset(d, ["counting", "geometry"], SIZES, seed=3, image_size=56)
    return d


def _copy(good, tmp_path) -> Path:
    d = tmp_path / "ds"
    shutil.copytree(good, d)
    return d


def _edit(d: Path, fn) -> None:
    df = pq.read_table(d / "samples.parquet").to_pandas()
    df = fn(df)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), d / "samples.parquet")


def _params(tmp_path: Path) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(f"reports_dir: {tmp_path / 'reports'}\ndata: {{min_split_size: 2}}\n")
    return p


def test_good_dataset_passes_and_stamps(good, tmp_path):
    rep = validate_dataset(good, min_split_size=2, required_splits=["train", "test"])
    assert rep.success and rep.n_rows == 40 and rep.split_counts == {"train": 20, "test": 20}
    stamp = write_stamp(rep, tmp_path / "stamp.json")
    require_validated(good, stamp)  # no exception


BROKEN = {
    "missing column": (lambda df: df.drop(columns=["answer"]), ["expect_table_columns_to_match_set", "answer"]),
    "null answers": (lambda df: df.assign(answer=df["answer"].where(df.index != 2, None)), ["expect_column_values_to_not_be_null", "`answer`", "counting-train-00002"]),
    "duplicate ids": (lambda df: df.assign(id=df["id"].where(df.index != 5, df["id"][4])), ["expect_column_values_to_be_unique", "`id`", "counting-train-00004"]),
    "wrong answer type": (lambda df: df.assign(answer=df["answer"].where(df.index != 1, "seven")), ["expect_column_values_to_match_regex", "`answer`", "counting-train-00001", "seven"]),
    "wrong column type": (lambda df: df.assign(answer_type=1), ["expect_column_values_to_be_of_type", "answer_type"]),
    "unknown split": (lambda df: df.assign(split=df["split"].where(df.index != 0, "dev")), ["expect_column_values_to_be_in_set", "`split`", "counting-train-00000"]),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_dataset_is_refused_by_the_cli(case, good, tmp_path):
    d = _copy(good, tmp_path)
    fn, needles = BROKEN[case]
    _edit(d, fn)
    params = _params(tmp_path)
    res = CliRunner().invoke(app, ["--params", str(params), "--no-track", "validate", str(d)])
    assert res.exit_code == 1, res.output
    for n in needles:
        assert n in res.output, (n, res.output)
    assert not (tmp_path / "reports" / "validation").exists()  # no stamp anywhere: downstream stays blocked


@pytest.mark.parametrize("kind", ["missing", "corrupt"])
def test_missing_or_corrupt_image(kind, good, tmp_path):
    d = _copy(good, tmp_path)
    victim = d / "images" / "geometry-test-00003.png"
    if kind == "missing":
        victim.unlink()
    else:
        victim.write_bytes(b"\x89PNG not really")
    with pytest.raises(ValidationFailed) as e:
        validate_dataset(d)
    msg = str(e.value)
    assert "image_status" in msg and "geometry-test-00003" in msg and f"{kind}: images/geometry-test-00003.png" in msg


def test_split_size_and_required_split(good, tmp_path):
    d = _copy(good, tmp_path)
    _edit(d, lambda df: df[~((df["split"] == "test") & (df.index % 10 != 0))])
    with pytest.raises(ValidationFailed, match=r"split_size_at_least.*test=2 \(< 5\)"):
        validate_dataset(d, min_split_size=5)
    with pytest.raises(ValidationFailed, match="expect_column_distinct_values_to_contain_set"):
        validate_dataset(good, required_splits=["train", "calib"])


def test_stale_stamp_is_refused(good, tmp_path):
    d = _copy(good, tmp_path)
    stamp = write_stamp(validate_dataset(d), tmp_path / "s.json")
    _edit(d, lambda df: df.assign(question=df["question"] + "!"))
    with pytest.raises(ValidationFailed, match="changed since it was validated"):
        require_validated(d, stamp)
    with pytest.raises(ValidationFailed, match="no validation stamp"):
        require_validated(d, tmp_path / "none.json")


def _tree_digest(p: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p.rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(p)).encode() + f.read_bytes() + str(f.stat().st_mtime_ns).encode())
    return h.hexdigest()


@pytest.mark.slow
def test_dvc_repro_stops_at_the_gate_and_leaves_downstream_outputs_intact(good, tmp_path):
    """A real DVC pipeline (validate -> base_model): after the data breaks, `dvc repro` fails at the gate and
    the downstream model directory is neither rewritten nor removed."""
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copytree(good, proj / "data" / "synthetic")
    (proj / "params.yaml").write_text(
        "data: {min_split_size: 2, splits: {train: 10, val: 0, test: 10, calib: 0}}\n"
        "profile: tiny\nprofiles: {tiny: {models: {policy: {source: tiny, path: artifacts/models/base-vl, "
        "hidden_size: 32, num_layers: 1, num_heads: 2, vision_hidden_size: 32, vision_depth: 1, vocab_size: 320}}}}\n"
    )
    (proj / "dvc.yaml").write_text(
        "stages:\n"
        "  validate:\n    cmd: rubricflow --no-track validate data/synthetic\n    deps: [data/synthetic]\n"
        "    outs: [{reports/validation/data/synthetic.json: {cache: false}}]\n"
        "  base_model:\n    cmd: rubricflow --no-track base-model\n"
        "    deps: [reports/validation/data/synthetic.json, data/synthetic]\n    outs: [artifacts/models/base-vl]\n"
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "RUBRICFLOW_ROOT": str(proj)}
    run = lambda *a: subprocess.run(a, cwd=proj, env=env, capture_output=True, text=True, timeout=300)  # noqa: E731
    assert run("git", "init", "-q").returncode == 0
    assert run("dvc", "init", "-q").returncode == 0
    first = run("dvc", "repro")
    assert first.returncode == 0, first.stdout + first.stderr
    model_dir = proj / "artifacts" / "models" / "base-vl"
    before = _tree_digest(model_dir)
    stamp_before = (proj / "reports" / "validation" / "data" / "synthetic.json").read_text()

    _edit(proj / "data" / "synthetic", lambda df: df.assign(answer=df["answer"].where(df.index != 3, None)))
    second = run("dvc", "repro")
    out = second.stdout + second.stderr
    assert second.returncode != 0
    assert "expect_column_values_to_not_be_null" in out and "counting-train-00003" in out
    assert "base_model" not in out.split("failed to reproduce")[0].split("Running stage")[-1]
    assert _tree_digest(model_dir) == before  # downstream output untouched
    # DVC removes a failed stage's declared outputs before running it; the stamp is rewritten only on success
    stamp = proj / "reports" / "validation" / "data" / "synthetic.json"
    assert not stamp.exists() or stamp.read_text() == stamp_before


# ------------------------------------------------------------------------------------------------------------
# Image paths stay inside the data set; empty and null inputs are named


def _set_image(df, row: int, value):
    images = list(df["images"])
    images[row] = value
    return df.assign(images=images)


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_image_paths_must_stay_inside_the_dataset(kind, good, tmp_path):
    d = _copy(good, tmp_path)
    outside = tmp_path / "outside.png"
    shutil.copyfile(d / "images" / "counting-train-00001.png", outside)  # a valid image: only the path is wrong
    if kind == "absolute":
        rel = str(outside)
    elif kind == "dotdot":
        rel = "../outside.png"
    else:
        (d / "images" / "link.png").symlink_to(outside)
        rel = "images/link.png"
    _edit(d, lambda df: _set_image(df, 1, [rel]))
    res = CliRunner().invoke(app, ["--params", str(_params(tmp_path)), "--no-track", "validate", str(d)])
    assert res.exit_code == 1, res.output
    assert "image_status" in res.output and "counting-train-00001" in res.output and rel in res.output, res.output
    assert "outside the data set" in res.output
    assert not (tmp_path / "reports" / "validation").exists()  # no stamp anywhere


def test_null_image_entry_is_named(good, tmp_path):
    d = _copy(good, tmp_path)
    _edit(d, lambda df: _set_image(df, 2, [None]))
    with pytest.raises(ValidationFailed) as e:
        validate_dataset(d)
    msg = str(e.value)
    assert "image_status" in msg and "counting-train-00002" in msg and "null image path" in msg, msg


def test_zero_rows_are_refused(good, tmp_path):
    d = _copy(good, tmp_path)
    pq.write_table(pq.read_table(d / "samples.parquet").slice(0, 0), d / "samples.parquet")  # same schema, 0 rows
    res = CliRunner().invoke(app, ["--params", str(_params(tmp_path)), "--no-track", "validate", str(d)])
    assert res.exit_code == 1, res.output
    assert "samples.parquet" in res.output and "0 rows" in res.output, res.output
    assert not (tmp_path / "reports" / "validation").exists()


# ------------------------------------------------------------------------------------------------------------
# The stamp and the stage report are keyed by the data set's path, not its folder's basename


def test_stamp_is_keyed_by_the_path_relative_to_the_project(tmp_path, monkeypatch):
    from rubricflow.data.validate import stamp_path

    monkeypatch.chdir(tmp_path)
    assert stamp_path("reports", "data/synthetic") == Path("reports/validation/data/synthetic.json")
    assert stamp_path("reports", tmp_path / "data" / "synthetic") == Path("reports/validation/data/synthetic.json")
    assert stamp_path("reports", "./data/x/../synthetic/") == Path("reports/validation/data/synthetic.json")
    assert stamp_path("reports", "scratch/synthetic") != stamp_path("reports", "data/synthetic")
    a, b = stamp_path("reports", "/elsewhere/a/synthetic"), stamp_path("reports", "/elsewhere/b/synthetic")
    assert a != b and a.parent == b.parent == Path("reports/validation/_outside")  # never escapes reports/


def test_validating_another_folder_leaves_the_pipeline_gate_and_report_alone(good, tmp_path, monkeypatch):
    """A second folder also called `synthetic` gets its own stamp and report; the pipeline's stay as they were."""
    proj = tmp_path / "proj"
    shutil.copytree(good, proj / "data" / "synthetic")
    shutil.copytree(good, proj / "scratch" / "synthetic")
    (proj / "params.yaml").write_text(
        "data: {min_split_size: 2, splits: {train: 10, val: 0, test: 10, calib: 0}}\n"
    )
    monkeypatch.chdir(proj)
    invoke = lambda *a: CliRunner().invoke(app, ["--no-track", "validate", *a])  # noqa: E731
    res = invoke()
    assert res.exit_code == 0, res.output
    stamp, report = proj / "reports/validation/data/synthetic.json", proj / "reports/validate.json"
    stamp_before, report_before = stamp.read_text(), report.read_text()

    # the other folder breaks after its first validation: its failure must not touch the pipeline's gate
    other = proj / "scratch" / "synthetic"
    assert invoke(str(other)).exit_code == 0
    other_stamp, other_report = proj / "reports/validation/scratch/synthetic.json", proj / "reports/validate/scratch/synthetic.json"
    assert other_stamp.exists() and json.loads(other_report.read_text())["n_rows"] == 40
    assert stamp.read_text() == stamp_before and report.read_text() == report_before
    _edit(other, lambda df: df.assign(answer=df["answer"].where(df.index != 3, None)))
    assert invoke(str(other)).exit_code == 1
    assert stamp.read_text() == stamp_before and report.read_text() == report_before
    require_validated(proj / "data" / "synthetic", stamp)  # the pipeline's gate still opens
    # naming the pipeline's data set explicitly is the same as the default
    assert invoke("data/synthetic").exit_code == 0 and json.loads(report.read_text())["n_rows"] == 40
