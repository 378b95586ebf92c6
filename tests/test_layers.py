"""The import graph is layered and acyclic.

* models <- rubricflow <- tasks <- flows: nothing imports upward, and the core packages never import Prefect (they
  must run without an orchestrator);
* the kernel (``models/``, ``tasks/``, ``flows/`` and everything in ``rubricflow/`` but ``rubricflow/methods/``)
  never imports a method: it iterates the registry (``rubricflow.registry``); a method's own command (a CLI
  command over its data) is a ``Command`` of its ``Method``;
* a method never imports another method (``methods/<a>`` -> ``methods/<b>``), except smol -> rucl (the smol pipeline
  is RuCL on real weights); a pipeline names another method's stages by name instead;
* only entry points and tests import the composition root ``rubricflow.config``;
* no import cycles between modules, counting imports inside functions too (a function-local import that closes a
  circle is still a circle: the modules cannot be understood or loaded one before the other).
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"models": 0, "rubricflow": 1, "tasks": 2, "flows": 3}
METHOD_IMPORTS_ALLOWED = {("smol", "rucl")}


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every absolute import of ``path`` (module level and inside functions): ``(dotted name, line)``; for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
            out += [(f"{node.module}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
    return out


def _files(root: Path, pkg: str) -> list[Path]:
    return sorted((root / pkg).rglob("*.py"))


def violations(root: Path | None = None) -> list[str]:
    root = root or ROOT
    bad = []
    for pkg, rank in RANK.items():
        for f in _files(root, pkg):
            for mod, line in imports_of(f):
                top = mod.split(".")[0]
                if top in RANK and RANK[top] > rank:
                    bad.append(f"{f.relative_to(root)}:{line} imports {mod} (upward: {pkg} -> {top})")
                if pkg in ("models", "rubricflow") and top == "prefect":
                    bad.append(f"{f.relative_to(root)}:{line} imports prefect (core layers stay Prefect-free)")
    return sorted(set(bad))


def _method_of(rel: Path) -> str | None:
    parts = rel.parts
    return parts[2] if parts[:2] == ("rubricflow", "methods") and len(parts) > 3 else None


def method_violations(root: Path | None = None) -> list[str]:
    root = root or ROOT
    bad = []
    for f in [f for pkg in RANK if (root / pkg).is_dir() for f in _files(root, pkg)]:
        rel = f.relative_to(root)
        own = _method_of(rel)
        kernel = own is None and rel.parts[:2] != ("rubricflow", "methods")
        for mod, line in imports_of(f):
            parts = mod.split(".")
            if parts[:2] != ["rubricflow", "methods"] or len(parts) < 3:
                continue
            if kernel and rel.as_posix() != "rubricflow/methods/__init__.py":
                bad.append(f"{rel}:{line} imports {mod} (the kernel names no method)")
            elif own is not None and parts[2] != own and (own, parts[2]) not in METHOD_IMPORTS_ALLOWED:
                bad.append(f"{rel}:{line} imports {mod} (method {own} -> method {parts[2]})")
    return sorted(set(bad))


def _module_name(root: Path, f: Path) -> str:
    parts = f.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_cycles(root: Path | None = None) -> list[list[str]]:
    """Strongly connected components of more than one module in the import graph of the four layers. Importing
    ``a.b.c`` loads the packages ``a`` and ``a.b`` too, except a module's own ancestors (a package's ``__init__``
    importing its submodules, which import their siblings, is how packages work)."""
    root = root or ROOT
    mods = {_module_name(root, f): f for pkg in RANK for f in _files(root, pkg) if (root / pkg).is_dir()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for name, _ in imports_of(f):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in mods and target != m and not m.startswith(target + "."):
                    graph[m].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def test_no_upward_imports():
    assert violations() == []


def test_the_checker_catches_an_upward_import(tmp_path):
    fake = tmp_path / "models"
    fake.mkdir()
    (fake / "bad.py").write_text("from flows.cli import app\nimport prefect\n")
    for pkg in ("rubricflow", "tasks", "flows"):
        (tmp_path / pkg).mkdir()
    found = violations(tmp_path)
    assert any("upward: models -> flows" in v for v in found)
    assert any("imports prefect" in v for v in found)


def test_the_kernel_names_no_method_and_methods_stay_apart():
    assert method_violations() == []


def test_the_method_checker_catches_a_kernel_import_and_a_cross_method_import(tmp_path):
    m = tmp_path / "rubricflow" / "methods"
    for d in ("rucl", "roro", "smol"):
        (m / d).mkdir(parents=True)
    (tmp_path / "rubricflow" / "judge").mkdir()
    (tmp_path / "rubricflow" / "judge" / "x.py").write_text("def f():\n    from rubricflow.methods.rucl import train\n")
    (tmp_path / "flows" / "cli").mkdir(parents=True)
    (tmp_path / "flows" / "cli" / "j.py").write_text("from rubricflow.methods.rucl.rubrics import pool\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.py").write_text("import rubricflow.methods.roro.router.mlp\n")
    (m / "roro" / "y.py").write_text("from rubricflow.methods.rucl.config import RuCLConfig\n")
    (m / "smol" / "z.py").write_text("from rubricflow.methods.rucl.config import RuCLConfig\n")  # allowed
    (m / "rucl" / "w.py").write_text("from rubricflow.methods.rucl.train import x\n")  # its own method
    assert method_violations(tmp_path) == [
        "flows/cli/j.py:1 imports rubricflow.methods.rucl.rubrics (the kernel names no method)",
        "flows/cli/j.py:1 imports rubricflow.methods.rucl.rubrics.pool (the kernel names no method)",
        "models/m.py:1 imports rubricflow.methods.roro.router.mlp (the kernel names no method)",
        "rubricflow/judge/x.py:2 imports rubricflow.methods.rucl (the kernel names no method)",
        "rubricflow/judge/x.py:2 imports rubricflow.methods.rucl.train (the kernel names no method)",
        "rubricflow/methods/roro/y.py:1 imports rubricflow.methods.rucl.config (method roro -> method rucl)",
        "rubricflow/methods/roro/y.py:1 imports rubricflow.methods.rucl.config.RuCLConfig (method roro -> method rucl)",
    ]


def test_no_import_cycles():
    assert import_cycles() == []


def test_the_cycle_checker_finds_a_planted_cycle_through_a_function_local_import(tmp_path):
    for pkg in RANK:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "rubricflow" / "a.py").write_text("from rubricflow.b import g\n\ndef f():\n    return g()\n")
    (tmp_path / "rubricflow" / "b.py").write_text("def g():\n    from rubricflow import a\n    return a\n")
    (tmp_path / "rubricflow" / "c.py").write_text("import rubricflow.a\n")  # on the path, not in the circle
    pkg = tmp_path / "rubricflow" / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from rubricflow.p import q\n")  # a package importing its submodule: fine
    (pkg / "q.py").write_text("from rubricflow.p.r import x\n")
    (pkg / "r.py").write_text("x = 1\n")
    assert import_cycles(tmp_path) == [["rubricflow.a", "rubricflow.b"]]


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
    return sorted(set(bad))


def test_no_core_module_imports_the_composition_root():
    assert config_importers() == []


def test_the_composition_root_checker_catches_an_import(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "rubricflow" / "methods" / "rucl").mkdir(parents=True)
    (tmp_path / "rubricflow" / "config.py").write_text("from rubricflow.sections import DataConfig\n")
    (tmp_path / "rubricflow" / "methods" / "rucl" / "x.py").write_text(
        "def f():\n    from rubricflow.config import Config\n")
    assert config_importers(tmp_path) == ["rubricflow/methods/rucl/x.py:2 imports rubricflow.config",
                                          "rubricflow/methods/rucl/x.py:2 imports rubricflow.config.Config"]
