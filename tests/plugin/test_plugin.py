"""A fourth method added without touching the kernel: ``tests/plugin/toy_method`` (config, logic, one stage, a study
adapter, a summary line) is registered through the ``rubricflow.methods`` entry-point group by an installed
distribution's metadata, and the CLI, the manifest and its dvc file, the study harness, the config and the summary
pick it up. The CLI runs in subprocesses, so the registration never leaks into other tests."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.ops_helpers import ROOT, dvc_command_mismatches, make_project, project_env

TOY_DVC = "tests/plugin/toy_method/dvc.yaml"


def _install_entry_point(site: Path) -> None:
    """A distribution's metadata declaring the toy method, as ``pip install`` of a plug-in package leaves it."""
    info = site / "rubricflow_toy-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rubricflow-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rubricflow.methods]\ntoy = tests.plugin.toy_method:METHOD\n")


@pytest.fixture
def project(tmp_path):
    p = make_project(tmp_path / "proj")
    (p / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    site = tmp_path / "site"
    _install_entry_point(site)
    env = project_env(p, PYTHONPATH=f"{site}:{ROOT}")
    return p, env


def _cli(project, env, *args: str) -> str:
    proc = subprocess.run([str(ROOT / ".venv/bin/rubricflow"), *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"rubricflow {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_a_method_from_an_entry_point_reaches_the_cli_config_dvc_study_and_summary(project):
    p, env = project
    assert "toy-count" in _cli(p, env, "--help")

    # the config: its section and its study, with their defaults, and --set on its keys
    cfg = yaml.safe_load(_cli(p, env, "show-config"))
    assert cfg["toy"] == {"n": 3, "scale": 1.0, "out_dir": "artifacts/toy"}
    assert cfg["study"]["toy"]["method"] == "toy" and cfg["study"]["toy"]["seeds"] == [1, 2, 3, 4, 5]

    # the stage: the generated command runs it (seed 1234: score = 1.0 * 4 + 1234 % 7 = 6)
    _cli(p, env, "--no-track", "--set", "toy.n=4", "toy-count")
    assert json.loads((p / "reports/toy_count.json").read_text())["score"] == pytest.approx(6.0)
    assert json.loads((p / "artifacts/toy/count.json").read_text()) == [1, 2, 3, 4]

    # the summary prints its line
    assert "toy         counted 4 steps, score 6.0" in _cli(p, env, "summary")

    # the study harness: 2 variants x 5 seeds; big - small = 3 on every seed, so the claim is shown (exploratory: the
    # project's tree may differ from its commit while the suite runs, and a report of record is refused then)
    out = json.loads(_cli(p, env, "study", "toy", "--no-track", "--exploratory"))
    assert out["units"] == 10 and out["ran"] == 10
    assert out["claims"] == {"big vs small (score)": "shown"}
    assert "**Exploratory report**" in (p / "reports/studies/toy.md").read_text()
    report = json.loads((p / "reports/studies/toy.json").read_text())
    assert report["variants"]["big"]["score"]["mean"] == pytest.approx(6.0 + sum(s % 7 for s in range(1, 6)) / 5)

    # the manifest and its dvc file agree (as the root dvc.yaml is checked against the built-in methods)
    check = ("import json; from rubricflow import registry; from tests.ops_helpers import dvc_command_mismatches; "
             f"print(json.dumps(dvc_command_mismatches(registry.pipelines(), {TOY_DVC!r})))")
    proc = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", check], cwd=p, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {}


def test_without_the_entry_point_the_method_is_absent_and_the_dvc_check_names_its_stage():
    from rubricflow import registry

    assert "toy" not in registry.methods() and "toy_count" not in registry.stages()
    # the same check names a stage the dvc file runs but no registered pipeline declares
    assert dvc_command_mismatches(registry.pipelines(), TOY_DVC) == {"toy_count": ("rubricflow toy-count", None)}
