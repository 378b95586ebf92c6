"""Which stages exist, and which stages make up each pipeline.

A stage is a function registered in ``rubricflow.stages.REGISTRY`` by the ``@stage(name)`` decorator, in
``rubricflow/stages.py`` or in a method package (``rubricflow/deltarubric/stages.py``, ``rubricflow/rucl/train.py``
...). :func:`discover` imports every module under ``rubricflow/`` whose source applies ``@stage(`` so that the
registry is complete without a hand-kept import list (the stage modules import their heavy dependencies inside
the functions, so this is cheap).

A pipeline is an ordered list of stage names: adding a stage to a flow is one line in :data:`PIPELINES`. A name
that is not registered (yet) is reported by name by :func:`resolve` (the flows log it and put it in their report),
never silently dropped.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import rubricflow
from rubricflow import stages as _foundation

# The three pipelines, in execution order. Names are ``@stage`` names (the same names dvc.yaml uses).
PIPELINES: dict[str, list[str]] = {
    # RuCL: foundation -> rubric pool -> calibrate/stratify -> GRPO with the curriculum -> evaluation
    "rucl": ["data", "validate", "base_model", "sft", "rubrics", "stratify", "rucl", "rucl_outcome", "rucl_eval"],
    # DeltaRubric: preference pairs -> warm-start SFT (builds its own tiny base) -> multi-role GRPO -> judge tables
    "deltarubric": ["deltarubric_pairs", "deltarubric_sft", "deltarubric_train", "deltarubric_eval"],
    # RoRo: step models -> routing trajectories -> preference pairs -> Rubricor + Judge -> router GRPO -> acc vs cost
    "roro": ["roro_models", "roro_trajectories", "roro_pairs", "roro_rubricor_judge", "roro_router", "roro_eval"],
}

# Variants: dvc.yaml stages that run a registered stage with `rubricflow --set k=v ...` overrides (the overrides are
# read from the dvc.yaml cmd, the one place they are written). variant -> registered stage.
VARIANTS: dict[str, str] = {
    "rucl_outcome": "rucl",  # the outcome-only GRPO baseline that rucl_eval compares against
}

_DECORATOR = re.compile(r"^\s*@(?:\w+\.)?stage\(", re.MULTILINE)
_discovered: list[str] | None = None


def _stage_modules(root: Path) -> list[str]:
    """Dotted names of the modules under ``root`` (the rubricflow package) that apply ``@stage(``."""
    mods = []
    for path in sorted(root.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if _DECORATOR.search(text):
            rel = path.relative_to(root.parent).with_suffix("")
            mods.append(".".join(rel.parts))
    return mods


def discover(root: Path | None = None) -> list[str]:
    """Import every stage module (once); returns the module names imported.

    An import error in a stage module is raised with the module's name: a broken stage must not look like a
    missing one.
    """
    global _discovered
    if _discovered is not None and root is None:
        return _discovered
    mods = _stage_modules(root or Path(rubricflow.__file__).parent)
    for mod in mods:
        try:
            importlib.import_module(mod)
        except Exception as e:  # noqa: BLE001 - re-raised with the module named
            raise ImportError(f"stage module {mod} failed to import: {type(e).__name__}: {e}") from e
    if root is None:
        _discovered = mods
    return mods


def registry() -> dict[str, Callable[..., dict]]:
    discover()
    return _foundation.REGISTRY


@dataclass
class Resolved:
    """A pipeline's stage list split into what can run now and what is not registered yet."""

    pipeline: str
    available: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def message(self) -> str:
        if not self.missing:
            return f"pipeline {self.pipeline}: stages {', '.join(self.available)}"
        return (
            f"pipeline {self.pipeline}: stages {', '.join(self.available) or '(none)'}; not registered yet "
            f"(skipped): {', '.join(self.missing)}"
        )


def resolve(pipeline: str, until: str | None = None) -> Resolved:
    """The stages of ``pipeline`` up to and including ``until`` (all when None), split by availability."""
    if pipeline not in PIPELINES:
        raise KeyError(f"unknown pipeline {pipeline!r}; expected one of {sorted(PIPELINES)}")
    names = PIPELINES[pipeline]
    if until is not None:
        if until not in names:
            raise ValueError(f"pipeline {pipeline}: `until` stage {until!r} is not one of {names}")
        names = names[: names.index(until) + 1]
    reg = registry()
    out = Resolved(pipeline)
    for n in names:
        (out.available if base_stage(n) in reg else out.missing).append(n)
    return out


def base_stage(name: str) -> str:
    """The registered stage a pipeline entry runs (itself, or the stage a variant runs)."""
    return VARIANTS.get(name, name)


def stage_function(name: str) -> Callable[..., dict]:
    reg = registry()
    if name not in reg:
        raise KeyError(f"stage {name!r} is not registered; registered stages: {sorted(reg)}")
    return reg[name]
