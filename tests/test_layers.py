"""The import graph is layered: models <- rubricflow <- tasks <- flows. Nothing imports upward, and the core
package never imports Prefect (it must run without an orchestrator)."""

import ast
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
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    found = violations()
    assert any("upward: models -> flows" in v for v in found)
    assert any("imports prefect" in v for v in found)
