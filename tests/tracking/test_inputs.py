"""Data sets as MLflow run inputs (rubricflow.tracking.inputs): name, split, context, rows and the content digest."""

import hashlib
import json

import pandas as pd
import pytest

from rubricflow import tracking
from rubricflow.tracking import inputs


def _dataset(d, splits):
    """A folder with a samples.parquet of the given splits and one image file."""
    d.mkdir(parents=True)
    pd.DataFrame({"id": [f"s{i}" for i in range(len(splits))], "split": splits}).to_parquet(d / "samples.parquet")
    (d / "images").mkdir()
    (d / "images" / "a.png").write_bytes(b"png-bytes-" + "".join(splits).encode())
    return d


def _logged_inputs(spec, cfg) -> list[tuple]:
    """Run ``spec`` tracked; the (name, context, profile) of each dataset input its MLflow run logged, sorted."""
    import mlflow

    rid = spec(cfg, track=True)["mlflow_run_id"]
    return sorted((di.dataset.name, {t.key: t.value for t in di.tags}["mlflow.data.context"],
                   json.loads(di.dataset.profile))
                  for di in mlflow.tracking.MlflowClient().get_run(rid).inputs.dataset_inputs)


@pytest.fixture
def mlflow_tmp(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", "pipe-inputs")
    return uri


def test_dvc_md5_of_a_folder_equals_dvc_data(tmp_path):
    """The folder digest is DVC's own (dvc_data's Tree over the files' md5s), so it matches dvc.lock."""
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta
    from dvc_data.hashfile.tree import Tree

    d = _dataset(tmp_path / "ds", ["train", "val"])
    tree = Tree()
    for f in sorted(x for x in d.rglob("*") if x.is_file()):
        tree.add(tuple(f.relative_to(d).parts), Meta(), HashInfo("md5", hashlib.md5(f.read_bytes()).hexdigest()))
    tree.digest()
    assert inputs.dvc_md5(d) == tree.hash_info.value
    f = d / "samples.parquet"
    assert inputs.dvc_md5(f) == hashlib.md5(f.read_bytes()).hexdigest()


def test_digest_is_the_dvc_lock_hash_when_recorded_and_current(tmp_path):
    d = _dataset(tmp_path / "data" / "synth", ["train", "train", "val"])
    md5 = inputs.dvc_md5(d)
    (tmp_path / "dvc.lock").write_text(
        f"schema: '2.0'\nstages:\n  data:\n    cmd: rubricflow data\n    outs:\n"
        f"    - path: data/synth\n      hash: md5\n      md5: {md5}\n")
    inp = inputs.describe_input(d, split="train", context="training", root=tmp_path)
    assert (inp.name, inp.source, inp.split, inp.num_rows) == ("synth:train", "data/synth", "train", 2)
    assert inp.digest == md5 and len(md5) == 36 and md5.endswith(".dir")
    assert inp.tags == {"rubricflow.digest": f"dvc-md5:{md5}", "rubricflow.split": "train",
                        "rubricflow.dvc_stage": "data"}
    # the content changed after dvc.lock was written: the lock's hash is stale, the digest is the content's SHA-256
    (d / "images" / "a.png").write_bytes(b"other")
    stale = inputs.describe_input(d, split="val", context="evaluation", root=tmp_path)
    assert stale.digest_full.startswith("sha256:") and stale.digest != md5 and stale.dvc_stage is None
    assert len(stale.digest) == inputs.MLFLOW_DIGEST_CHARS and stale.num_rows == 1


def test_digest_without_dvc_lock_is_the_content_sha256(tmp_path):
    f = tmp_path / "routes.parquet"
    pd.DataFrame({"split": ["train", "val", "val"]}).to_parquet(f)
    inp = inputs.describe_input(f, split="val", root=tmp_path)
    assert inp.digest_full == "sha256:" + hashlib.sha256(f.read_bytes()).hexdigest()
    assert (inp.name, inp.num_rows) == ("routes:val", 2)
    assert inputs.describe_input(f, root=tmp_path).num_rows == 3  # no split: every row
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        inputs.describe_input(tmp_path / "nope.parquet")


def test_two_runs_on_different_data_show_different_digests(mlflow_tmp, tmp_path):
    import mlflow

    a = _dataset(tmp_path / "a" / "synth", ["train", "train", "val"])
    b = _dataset(tmp_path / "b" / "synth", ["train", "val", "val"])
    ids = []
    for d in (a, b):
        with tracking.stage_run("rucl", experiment="inputs") as run:
            run.log_input(d, split="train", context="training")
            run.log_input(d, split="val", context="evaluation")
            ids.append(run.run_id)
    client = mlflow.tracking.MlflowClient()
    logged = []
    for rid in ids:
        dis = client.get_run(rid).inputs.dataset_inputs
        got = {}
        for di in dis:
            tags = {t.key: t.value for t in di.tags}
            got[tags["mlflow.data.context"]] = (di.dataset.name, di.dataset.digest, json.loads(di.dataset.profile),
                                               di.dataset.source)
        logged.append(got)
    (ta, va), (tb, vb) = ((g["training"], g["evaluation"]) for g in logged)
    assert ta[0] == tb[0] == "synth:train" and va[0] == vb[0] == "synth:val"
    assert ta[1] != tb[1] and va[1] != vb[1]  # different data, different digests
    assert ta[1] == va[1]  # one folder, one digest for both splits
    assert (ta[2], va[2], tb[2], vb[2]) == ({"num_rows": 2}, {"num_rows": 1}, {"num_rows": 1}, {"num_rows": 2})


def test_stages_log_what_they_read(mlflow_tmp, tmp_path, monkeypatch):
    """The RuCL training and evaluation stages log their splits of the pipeline's data set (logic stubbed)."""

    from rubricflow.config import load_config
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.methods.rucl import stages

    data_dir = tmp_path / "data" / "synthetic"
    build_synthetic_dataset(data_dir, ["counting"], {"train": 3, "val": 2, "test": 2, "calib": 1}, 0, 56)
    cfg = load_config(overrides={"reports_dir": str(tmp_path / "r"), "data.out_dir": str(data_dir),
                                 "tracking.experiment": "wiring", "rucl.eval_samples": 1})
    monkeypatch.setattr(stages, "require_gate", lambda *a, **k: None)
    monkeypatch.setattr(stages, "run_training", lambda *a, **k: {"steps": 0})
    monkeypatch.setattr(stages, "evaluate_policies", lambda *a, **k: {"acc": 1.0})
    got = {spec.name: _logged_inputs(spec, cfg) for spec in (stages.train_stage, stages.eval_stage)}
    assert got["rucl"] == [("synthetic:train", "training", {"num_rows": 3}),
                           ("synthetic:val", "evaluation", {"num_rows": 2})]
    split = cfg.rucl.eval_split
    assert got["rucl_eval"] == [(f"synthetic:{split}", "evaluation", {"num_rows": 2})]


def test_a_missing_input_is_left_to_the_reader(mlflow_tmp, tmp_path):
    """The tracking handle logs nothing for a path that does not exist: the stage's reader raises its own error."""
    import mlflow

    with tracking.stage_run("roro_pairs", experiment="missing") as run:
        assert run.log_input(tmp_path / "trajectories.parquet") is None
    assert mlflow.tracking.MlflowClient().get_run(run.run_id).inputs.dataset_inputs == []


def test_roro_and_deltarubric_stages_log_routes_and_pairs(mlflow_tmp, tmp_path, monkeypatch):
    """RoRo's Judge training logs the routes and its pairs, DeltaRubric's training its pairs (logic stubbed)."""

    from rubricflow.config import load_config
    from rubricflow.methods.deltarubric import stages as dr_stages
    from rubricflow.methods.deltarubric import train as dr_train
    from rubricflow.methods.roro.judge import alternation
    from rubricflow.methods.roro import stages as roro_stages

    roro_dir, pairs_dir = tmp_path / "roro", tmp_path / "pairs"
    roro_dir.mkdir()
    pairs_dir.mkdir()
    pd.DataFrame({"problem_id": ["p1", "p1", "p2"]}).to_parquet(roro_dir / "trajectories.parquet")
    pd.DataFrame({"split": ["train", "train", "val"]}).to_parquet(roro_dir / "pairs.parquet")
    pd.DataFrame({"split": ["train", "val", "val", "test"]}).to_parquet(pairs_dir / "pairs.parquet")
    cfg = load_config(overrides={"reports_dir": str(tmp_path / "r"), "roro.data_dir": str(roro_dir),
                                 "deltarubric.pairs.out_dir": str(pairs_dir), "tracking.experiment": "wiring2"})
    monkeypatch.setattr(alternation, "run_rubricor_judge", lambda *a, **k: {"rounds": 0})
    monkeypatch.setattr(dr_stages, "_gate", lambda *a, **k: None)
    monkeypatch.setattr(dr_train, "run_training", lambda *a, **k: {"steps": 0})
    got = {spec.name: _logged_inputs(spec, cfg) for spec in (roro_stages.rubricor_judge_stage, dr_stages.train_stage)}
    assert got["roro_rubricor_judge"] == [("pairs:train", "training", {"num_rows": 2}),
                                          ("pairs:val", "evaluation", {"num_rows": 1}),
                                          ("routes", "training", {"num_rows": 3})]
    assert got["deltarubric_train"] == [("pairs:train", "training", {"num_rows": 1}),
                                        ("pairs:val", "evaluation", {"num_rows": 2})]


def test_a_logged_data_set_carries_its_schema(mlflow_tmp, tmp_path):
    """The dataset drawer showed "No schema available": each input now has its table's columns and types."""
    import mlflow

    d = tmp_path / "synth"
    d.mkdir()
    pd.DataFrame({"id": ["a", "b"], "images": [["i/a.png"], []], "n": [1, 2], "score": [0.5, 1.0],
                  "split": ["train", "val"]}).to_parquet(d / "samples.parquet")
    rows = tmp_path / "routes.jsonl"
    rows.write_text('{"id": "r1", "cost": 0.25, "split": "val"}\n{"id": "r2", "cost": 1.5, "split": "val"}\n')
    (tmp_path / "models").mkdir()
    with tracking.stage_run("rucl", experiment="schema") as run:
        run.log_input(d, split="train")
        run.log_input(rows, split="val", context="evaluation")
        run.log_input(tmp_path / "models", context="training")
    got = {di.dataset.name: di.dataset.schema
           for di in mlflow.tracking.MlflowClient(mlflow_tmp).get_run(run.run_id).inputs.dataset_inputs}
    cols = {c["name"]: (c["type"], c.get("items")) for c in json.loads(got["synth:train"])["mlflow_colspec"]}
    assert cols == {"id": ("string", None), "images": ("array", {"type": "string"}), "n": ("long", None),
                    "score": ("double", None), "split": ("string", None)}
    assert {c["name"]: c["type"] for c in json.loads(got["routes:val"])["mlflow_colspec"]} == {
        "id": "string", "cost": "double", "split": "string"}
    assert not got["models"]  # a folder without a table has no schema
