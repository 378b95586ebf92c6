"""Which dvc.yaml files DVC sees: the root .dvcignore hides the test fixtures and the opt-in pipelines (studies, smol)
until `rubricflow opt-in` (or `rubricflow repro <their dvc.yaml>`) re-includes one. Checked on copies of the real
files in a throw-away git + DVC project: `dvc status` and `dvc checkout` cover the main pipeline only."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    from flows.repro import opt_in, opt_in_targets

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
