"""The import graph is layered: models <- rubricflow <- tasks <- flows. Nothing imports upward, and the core
package never imports Prefect (it must run without an orchestrator)."""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"models": 0, "rubricflow": 1, "tasks": 2, "flows": 3}


def imports_of(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
    return out


def violations() -> list[str]:
    bad = []
    for pkg, rank in RANK.items():
        for f in sorted((ROOT / pkg).rglob("*.py")):
            for mod, line in imports_of(f):
                top = mod.split(".")[0]
                if top in RANK and RANK[top] > rank:
                    bad.append(f"{f.relative_to(ROOT)}:{line} imports {mod} (upward: {pkg} -> {top})")
                if pkg in ("models", "rubricflow") and top == "prefect":
                    bad.append(f"{f.relative_to(ROOT)}:{line} imports prefect (core layers stay Prefect-free)")
    return bad


def test_no_upward_imports():
    assert violations() == []


def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "models"
    fake.mkdir()
    (fake / "bad.py").write_text("from flows.cli import app\nimport prefect\n")
    for pkg in ("rubricflow", "tasks", "flows"):
        (tmp_path / pkg).mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = violations()
    assert any("upward: models -> flows" in v for v in found)
    assert any("imports prefect" in v for v in found)


# The composition root: only entry points (tasks/, flows/) and tests import it. Core code receives its sections.
COMPOSITION_ROOT = "rubricflow.config"


def config_importers(root: Path | None = None) -> list[str]:
    root = root or ROOT
    bad = []
    for pkg in ("models", "rubricflow"):
        for f in sorted((root / pkg).rglob("*.py")):
            if f.relative_to(root).as_posix() == "rubricflow/config.py":
                continue
            for mod, line in imports_of(f):
                if mod == COMPOSITION_ROOT or mod.startswith(COMPOSITION_ROOT + "."):
                    bad.append(f"{f.relative_to(root)}:{line} imports {mod}")
    return bad


def test_no_core_module_imports_the_composition_root():
    assert config_importers() == []


def test_the_composition_root_checker_catches_an_import(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "rubricflow" / "methods" / "rucl").mkdir(parents=True)
    (tmp_path / "rubricflow" / "config.py").write_text("from rubricflow.sections import DataConfig\n")
    (tmp_path / "rubricflow" / "methods" / "rucl" / "x.py").write_text("def f():\n    from rubricflow.config import Config\n")
    assert config_importers(tmp_path) == ["rubricflow/methods/rucl/x.py:2 imports rubricflow.config"]
