"""The committed pipeline outputs agree with the code: `reports/params/` is what `rubricflow resolve-params` writes
for the committed params.yaml and config code, `dvc.lock` records those files and only stages of `dvc.yaml`, and
the README's "What make run shows" block is what `rubricflow summary --readme README.md` writes from the committed
`reports/`. After a change to params or config defaults, `make run` regenerates all of them (README, Pipelines)."""

import hashlib
import json
from pathlib import Path

import yaml

from rubricflow.config import load_config, write_resolved
from rubricflow.pipeline.summary import README_BEGIN, README_END, readme_block

ROOT = Path(__file__).resolve().parents[2]
HOW = "regenerate with `make run` and commit reports/, dvc.lock (then `rubricflow summary --readme README.md`)"


def test_committed_params_are_the_codes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    write_resolved(load_config("params.yaml"), tmp_path)
    now = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in (ROOT / "reports" / "params").glob("*.json")}
    assert sorted(committed) == sorted(now), HOW
    stale = sorted(name for name in now if committed[name] != now[name])
    assert not stale, f"reports/params/{stale} differ from the code's effective params: {HOW}"


def test_dvc_lock_records_the_committed_params_and_only_current_stages():
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert sorted(set(lock) - set(stages)) == [], f"dvc.lock names stages dvc.yaml no longer has: {HOW}"
    outs = {o["path"]: o["md5"] for o in lock["params"]["outs"]}
    for path, md5 in outs.items():
        p = ROOT / path
        if p.is_file():
            assert hashlib.md5(p.read_bytes()).hexdigest() == md5, f"{path} differs from dvc.lock: {HOW}"
    for name, stage in lock.items():
        for dep in stage.get("deps", []):
            if dep["path"].startswith("rubricflow/") or dep["path"].startswith("models/"):
                assert (ROOT / dep["path"]).exists(), f"dvc.lock stage {name} names {dep['path']}, which is gone: {HOW}"


def test_the_readme_block_is_written_from_the_committed_reports(monkeypatch):
    monkeypatch.chdir(ROOT)
    text = (ROOT / "README.md").read_text()
    block = README_BEGIN + text.split(README_BEGIN, 1)[1].split(README_END, 1)[0] + README_END
    assert block == readme_block("reports"), "run `rubricflow summary --readme README.md` and commit README.md"
    assert json.loads((ROOT / "reports" / "rucl_eval.json").read_text())  # the block is not empty by accident
    assert block.count("\n") > 8
