"""Which dvc.yaml files DVC sees: the root .dvcignore hides the test fixtures and the opt-in pipelines (studies, smol)
until `rubricflow opt-in` (or `rubricflow repro <their dvc.yaml>`) re-includes one. Checked on copies of the real
files in a throw-away git + DVC project: `dvc status` and `dvc checkout` cover the main pipeline only."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.ops_helpers import ROOT

MAIN = """
stages:
  one:
    cmd: python -c "open('one.txt', 'w').write('1')"
    outs: [one.txt]
"""


def _dvc(proj: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=proj, capture_output=True, text=True)
    assert not check or proc.returncode == 0, f"dvc {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc


@pytest.fixture
def proj(tmp_path, monkeypatch):
    p = tmp_path / "proj"
    p.mkdir()
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "site-cache"))
    subprocess.run(["git", "init", "-q"], cwd=p, check=True)
    _dvc(p, "init", "-q")
    shutil.copy(ROOT / ".dvcignore", p / ".dvcignore")
    for f in ("studies/dvc.yaml", "smol/dvc.yaml", "tests/plugin/toy_method/dvc.yaml"):
        (p / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, p / f)
    (p / "dvc.yaml").write_text(MAIN)
    _dvc(p, "repro", "-q")
    return p


def _stages(proj: Path) -> set[str]:
    out = _dvc(proj, "stage", "list", "--all", "--name-only").stdout
    return set(out.split())


def test_status_and_checkout_cover_the_main_pipeline_only(proj):
    assert _stages(proj) == {"one"}
    assert "Data and pipelines are up to date." in _dvc(proj, "status").stdout
    assert _dvc(proj, "checkout").returncode == 0


def test_opting_in_makes_a_pipeline_visible_and_opting_out_hides_it(proj):
    from rubricflow.pipeline.workspace import opt_in, opt_in_targets

    assert opt_in("studies", root=proj) is True
    assert opt_in("studies", root=proj) is False  # already
    assert {s for s in _stages(proj) if s.startswith("studies/")} >= {"studies/dvc.yaml:rucl_study"}
    assert not [s for s in _stages(proj) if s.startswith(("smol/", "tests/"))]
    assert "rucl_study" in _dvc(proj, "status").stdout  # not run yet: listed, as it should be once opted in
    assert opt_in("studies", on=False, root=proj) is True
    assert _stages(proj) == {"one"}

    said: list[str] = []
    opt_in_targets(["smol/dvc.yaml:rucl", "one"], said.append, root=proj)
    assert said and "smol" in said[0]
    assert "smol/dvc.yaml:rucl" in _stages(proj)
    with pytest.raises(ValueError, match="not an opt-in pipeline"):
        opt_in("nope", root=proj)


def test_exps_shows_only_the_changed_params_yaml_key_and_metric(proj, monkeypatch):
    """`rubricflow exps` (the readable `dvc exp show`): an experiment that changed one params.yaml key shows that key
    and the metric it moved, not the unchanged columns, the resolved copies or the dependency hashes."""
    (proj / "params.yaml").write_text("a:\n  n: 1\n  m: 5\n")
    (proj / "reports" / "params").mkdir(parents=True)
    resolve = ("python -c \"import yaml, json; json.dump(yaml.safe_load(open('params.yaml'))['a'], "
               "open('reports/params/a.json', 'w'))\"")
    one = ("python -c \"import json; n = json.load(open('reports/params/a.json'))['n']; "
           "json.dump({'score': n * 2, 'same': 1}, open('m.json', 'w'))\"")
    (proj / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "resolve": {"cmd": resolve, "params": [{"params.yaml": None}],
                    "outs": [{"reports/params/a.json": {"cache": False}}]},
        "one": {"cmd": one, "params": [{"reports/params/a.json": ["n"]}], "metrics": [{"m.json": {"cache": False}}]},
    }}))
    subprocess.run(["git", "add", "-A"], cwd=proj, check=True)
    env = {**dict(__import__("os").environ), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    subprocess.run(["git", "commit", "-qm", "base"], cwd=proj, check=True, env=env)
    _dvc(proj, "repro")
    subprocess.run(["git", "add", "-A"], cwd=proj, check=True)
    subprocess.run(["git", "commit", "-qm", "run"], cwd=proj, check=True, env=env)
    subprocess.run([sys.executable, "-m", "dvc", "exp", "run", "-q", "-S", "a.n=4", "-n", "four"], cwd=proj,
                   check=True, env=env, capture_output=True)
    monkeypatch.chdir(proj)
    out = subprocess.run([sys.executable, "-m", "flows.cli", "exps", "--csv"], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0].split(",")
    print("\nrubricflow exps --csv:\n" + out.stdout)
    assert "a.n" in header and "score" in header
    assert not [c for c in header if c.startswith("reports/params") or c in ("a.m", "same", "m.json")]
    assert any(line.startswith("four,") or ",four," in line or "four" in line for line in out.stdout.splitlines()[1:])
