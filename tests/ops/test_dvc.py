"""DVC over the real dvc.yaml in a throw-away git project: repro, a no-op second repro, an `exp run -S` ablation,
and the flows and dvc.yaml agreeing on stage names."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.ops_helpers import ROOT, dvc_command_mismatches, make_project, project_env


def test_dvc_yaml_equals_the_manifest():
    """dvc.yaml and the manifest (the registered pipelines, which the CLI and the Prefect flows are built from) name the
    same stages with the same commands: a stage only one of them has, or a command that differs (a variant whose
    overrides live in its cmd), fails here instead of at run time."""
    from rubricflow import registry

    assert dvc_command_mismatches(registry.pipelines(), "dvc.yaml",
                                  extra={registry.PARAMS_STAGE: registry.PARAMS_COMMAND}) == {}
    # every manifest stage runs in some dvc file
    assert set(registry.stages()) <= {s.name for p in registry.pipelines().values() for s in p.stages}


def test_opt_in_pipelines_have_their_own_dvc_file_under_their_profile():
    """A pipeline outside `make run` (smol: the real model and a vLLM server) lives in its own dvc file, runs each of
    its stages under its profile, resolves that profile's params into its own folder, and is not in the root
    dvc.yaml (so `make run` / `dvc repro` never start it)."""
    from rubricflow import registry

    smol = registry.pipeline("smol")
    assert smol.dvc_file == "smol/dvc.yaml" and smol.profile == "smol"
    dvc = yaml.safe_load((ROOT / smol.dvc_file).read_text())["stages"]
    expected = {s.name: f"rubricflow --profile smol {s.cli}" for s in smol.stages}
    expected["params"] = "rubricflow --profile smol resolve-params --out reports/smol/params"
    assert {name: st.get("cmd") for name, st in dvc.items()} == expected
    assert all(st.get("wdir") == ".." for st in dvc.values())
    root = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert "fetch_model" not in root and "smol_judge" not in root


def test_every_stage_command_exists_in_the_cli():
    """The dvc.yaml commands resolve: each manifest stage is a `rubricflow` command (and its old names still are)."""
    import typer.main

    from flows.cli import app
    from rubricflow import registry

    commands = typer.main.get_command(app).commands
    for spec in registry.stages().values():
        assert spec.cli in commands, spec.name
        assert all(a in commands for a in spec.aliases), spec.name
        assert commands[spec.cli].help.startswith(spec.help)
    assert "train" in commands and "route-eval" in commands  # aliases of rucl / roro-eval for one release
    assert "resolve-params" in commands


def test_params_stage_depends_on_every_config_module():
    """reports/params is the resolved config: a new field or default in any config module must re-run the params
    stage (and, through its outputs, the stages that read them), not leave the resolved files stale. The list is
    derived from the composed config (rubricflow.config.config_sources), so a new method's sections and default
    studies are in it."""
    from rubricflow.config import config_sources

    sources = config_sources(ROOT)
    assert {"rubricflow/config.py", "rubricflow/sections.py", "rubricflow/grpo/config.py",
            "rubricflow/methods/roro/config.py", "rubricflow/methods/rucl/study/specs.py"} <= set(sources)
    for dvc_file in ("dvc.yaml", "smol/dvc.yaml"):
        deps = yaml.safe_load((ROOT / dvc_file).read_text())["stages"]["params"]["deps"]
        assert sorted(deps) == sources, dvc_file


def _dvc(project: Path, env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(ROOT / ".venv/bin/dvc"), *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=project, check=True,
                   capture_output=True, text=True)


@pytest.mark.slow
def test_repro_then_noop_repro_then_exp_run_ablation(tmp_path):
    project = make_project(tmp_path / "proj", git=True)
    # The repository's .gitignore, except that metrics files must be visible to git for `dvc exp` to record them
    # (with `/reports/` ignored, `dvc exp show` prints `!` for every metric; see the ops report).
    lines = [ln for ln in (ROOT / ".gitignore").read_text().splitlines() if ln.strip() not in ("/reports/", "dvc.lock")]
    (project / ".gitignore").write_text("\n".join(lines) + "\n")
    env = project_env(project, PATH=f"{ROOT / '.venv/bin'}:{os.environ['PATH']}", DVC_NO_ANALYTICS="1")
    _dvc(project, env, "init", "-q")
    _dvc(project, env, "config", "core.autostage", "true")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "init")

    first = _dvc(project, env, "repro", "validate")
    assert "Running stage 'data'" in first.stdout and "Running stage 'validate'" in first.stdout
    parquet = project / "data/synthetic/samples.parquet"
    mtime = parquet.stat().st_mtime_ns
    assert json.loads((project / "reports/data.json").read_text())["n_samples"] == 20

    again = _dvc(project, env, "repro", "validate")
    assert "Running stage" not in again.stdout
    assert "Data and pipelines are up to date." in again.stdout
    assert parquet.stat().st_mtime_ns == mtime  # nothing was rewritten

    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "baseline")
    exp = _dvc(project, env, "exp", "run", "validate", "-S", "data.seed=7", "-n", "seed7")
    assert "Running stage 'data'" in exp.stdout
    shown = json.loads(_dvc(project, env, "exp", "show", "--json").stdout)
    exps = {e["name"]: e for rev in shown for e in (rev.get("experiments") or []) for e in e.get("revs", [])}
    data = exps["seed7"]["data"]
    assert data["params"]["params.yaml"]["data"]["data"]["seed"] == 7
    assert data["metrics"]["reports/data.json"]["data"]["n_samples"] == 20


def test_stages_declare_the_resolved_sections_they_read_as_params():
    """Every stage lists `reports/params/<section>.json` for each config section its function takes, under
    `params:` (so `dvc status` and `dvc params diff` name the key that changed), never as a plain dependency."""
    from rubricflow import registry

    for dvc_file in ("dvc.yaml", "studies/dvc.yaml"):
        for name, st in yaml.safe_load((ROOT / dvc_file).read_text())["stages"].items():
            deps = [d if isinstance(d, str) else next(iter(d)) for d in st.get("deps") or []]
            assert not [d for d in deps if d.startswith("reports/params/")], f"{dvc_file} {name}: params as deps"
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, spec in registry.stages().items():
        if name not in stages:
            continue  # the smol pipeline's own stages (smol/dvc.yaml, its own resolved params)
        files = [k for it in stages[name].get("params") or [] if isinstance(it, dict) for k in it]
        missing = [s for s in spec.sections if f"reports/params/{s}.json" not in files]
        assert not missing, f"dvc.yaml stage {name} reads sections {missing} without declaring them"


def test_bytecode_caches_are_not_part_of_a_code_dependency():
    """A stage depends on package folders (rubricflow/grpo, a method's folder): the .pyc files an import or a test
    run leaves in them must not change the folder's hash, or `dvc status` reports the code modified after any run."""
    from dvc.repo import Repo

    ignore = Repo(str(ROOT)).dvcignore
    pkg = ROOT / "rubricflow" / "grpo"
    assert ignore.is_ignored_dir(str(pkg / "__pycache__"))
    assert ignore.is_ignored_file(str(pkg / "__pycache__" / "core.cpython-311.pyc"))
    assert ignore.is_ignored_file(str(pkg / "core.pyc"))
    assert not ignore.is_ignored_file(str(pkg / "core.py"))


def test_study_stages_run_registered_studies_on_the_data_they_read():
    """Each `rubricflow study <name>` stage of studies/dvc.yaml names a registered study, and a study that reads pairs
    outside the main pipeline (the wide pairs) depends on the stage that builds them, whose command is the one the
    study prints when they are missing."""
    from rubricflow import registry
    from rubricflow.methods.deltarubric import study_specs

    stages = yaml.safe_load((ROOT / "studies/dvc.yaml").read_text())["stages"]
    registered = registry.studies()
    study_stages = {n: st["cmd"].removeprefix("rubricflow study ") for n, st in stages.items()
                    if st["cmd"].startswith("rubricflow study ")}
    assert set(study_stages.values()) <= set(registered)
    assert {"deltarubric_wide_start", "deltarubric_wide_start_b", "deltarubric_wide_tune", "deltarubric_wide",
            "deltarubric_wide_b"} <= set(study_stages.values())

    build = stages["deltarubric_pairs_wide"]
    wide_dir = study_specs.WIDE_PAIRS["deltarubric.pairs.out_dir"]
    assert build["cmd"] == study_specs.WIDE_PAIRS_COMMAND and build["outs"] == [wide_dir]
    assert study_specs.WIDE_PAIRS_COMMAND in study_specs.WIDE_PAIRS_HINT
    for name, study in study_stages.items():
        spec = registered[study][1].spec()
        if spec.shared_hint == study_specs.WIDE_PAIRS_HINT:
            assert wide_dir in stages[name]["deps"], name
