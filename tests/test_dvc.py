"""DVC over the real dvc.yaml in a throw-away git project: repro, a no-op second repro, an `exp run -S` ablation,
and the flows and dvc.yaml agreeing on stage names."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.ops_helpers import ROOT, make_project, project_env


def test_every_dvc_stage_is_part_of_a_flow():
    """dvc.yaml and the Prefect flows run the same stages: a dvc.yaml stage that no flow covers (a registered
    stage, a `--set` variant of one in tasks.registry.VARIANTS, or the `resolve-params` stage every flow run
    performs itself) would silently be missing from the Prefect pipelines."""
    from tasks.inputs import resolve_params_stage
    from tasks.registry import PIPELINES, VARIANTS, discover, registry

    discover()
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    resolver = resolve_params_stage(dvc)
    covered = {s for stages in PIPELINES.values() for s in stages} | ({resolver[0]} if resolver else set())
    assert sorted(set(dvc) - covered) == [], "dvc.yaml stages missing from tasks.registry.PIPELINES"
    runnable = set(registry()) | set(VARIANTS) | ({resolver[0]} if resolver else set())
    assert sorted(set(dvc) - runnable) == [], "dvc.yaml stages that are neither registered stages nor VARIANTS"


def test_params_stage_depends_on_every_config_module():
    """reports/params is the resolved config: a new field or default in any config module must re-run the params
    stage (and, through its outputs, the stages that read them), not leave the resolved files stale."""
    import sys

    import rubricflow.config  # noqa: F401  (imports every section's config module)

    modules = {
        Path(m.__file__).resolve().relative_to(ROOT).as_posix()
        for name, m in sys.modules.items()
        if name.startswith("rubricflow") and getattr(m, "__file__", None)
        and (name.endswith(".config") or name in ("rubricflow.config", "rubricflow.section"))
    }
    assert "rubricflow/grpo/config.py" in modules and "rubricflow/roro/config.py" in modules
    deps = set(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["params"]["deps"])
    assert sorted(modules - deps) == []


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
