"""The method registry: every method is one :class:`Method` object, and the kernel iterates them.

A method is a folder ``rubricflow/methods/<name>/`` whose ``__init__.py`` exposes ``METHOD``: its config sections,
its stages, the pipelines those stages form, its study adapters and default studies, its lines of the run summary
and of a flow's run report, its columns of ``rubricflow compare`` and its extra CLI commands. The kernel (config
composition, the manifest, the CLI, the study harness, the summary) reads them from here and names no method.

Where methods come from, in order:

* ``rubricflow.methods.REGISTERED``: the built-in methods, one module path each (the registration list);
* the entry-point group ``rubricflow.methods``: a third-party package adds a method without editing rubricflow,
  with ``[project.entry-points."rubricflow.methods"] mymethod = "mypkg.mymethod:METHOD"`` in its pyproject.toml;
* :func:`register`: a method added at run time (tests, notebooks), before the config is composed.

Names are unique across all three: a second method, section, stage, pipeline or study of the same name is an error
naming both owners.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rubricflow.pipeline.commands import Command
from rubricflow.pipeline.stage import StageSpec

ENTRY_POINT_GROUP = "rubricflow.methods"

# The dvc.yaml stage that resolves params.yaml into reports/params/<section>.json (the files the stages depend on).
PARAMS_STAGE = "params"
PARAMS_DIR = "reports/params"
PARAMS_COMMAND = f"rubricflow resolve-params --out {PARAMS_DIR}"
BUILTIN_LIST = "rubricflow.methods"  # the module whose REGISTERED lists the built-in methods


class RegistryError(RuntimeError):
    """Two methods claim one name, or a registered method cannot be loaded."""


@dataclass(frozen=True)
class SectionDecl:
    """A config section a method owns: ``params.yaml`` key ``name`` parsed into ``model``."""

    name: str
    model: type
    description: str


@dataclass(frozen=True)
class StudyDecl:
    """A default study (``study.<name>`` in params.yaml): ``spec`` builds its default ``StudySpec``."""

    name: str
    spec: Callable[[], Any]
    description: str


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: stages run in order by ``dvc repro`` (its ``dvc_file``) and by its Prefect flow.

    ``stage_names`` may name stages of other methods (a pipeline starts from the foundation's data and SFT); they
    are resolved against every registered stage.
    """

    name: str
    description: str
    stage_names: tuple[str, ...]
    compare: str  # the stage whose runs the flow compares across invocations (ablations)
    knobs: Mapping[str, str] = field(default_factory=dict)  # form field -> dotted config key (the Prefect UI form)
    knobs_help: str = ""
    # the DVC file that runs this pipeline's stages: the root dvc.yaml (`make run`), or an opt-in one of its own
    dvc_file: str = "dvc.yaml"
    # the profile its stages run under there (`rubricflow --profile <p> <stage>`); None: the params.yaml default
    profile: str | None = None

    @property
    def stages(self) -> tuple[StageSpec, ...]:
        return tuple(stage(n) for n in self.stage_names)

    def dvc_command(self, spec: StageSpec) -> str:
        """The command ``self.dvc_file`` runs for ``spec``."""
        if self.profile is None:
            return spec.command
        return spec.command.replace("rubricflow ", f"rubricflow --profile {self.profile} ", 1)

    def until(self, name: str | None) -> tuple[StageSpec, ...]:
        """The stages up to and including ``name`` (all when None)."""
        if name is None:
            return self.stages
        if name not in self.stage_names:
            raise ValueError(f"pipeline {self.name}: `until` stage {name!r} is not one of {list(self.stage_names)}")
        return self.stages[: self.stage_names.index(name) + 1]


@dataclass(frozen=True)
class Method:
    """Everything the kernel needs from one method (see the module docstring)."""

    name: str
    description: str
    sections: tuple[SectionDecl, ...] = ()
    stages: tuple[StageSpec, ...] = ()
    pipelines: tuple[Pipeline, ...] = ()
    # study adapters (rubricflow.study.adapter.StudyMethod): how a unit of this method is trained and evaluated; a
    # study names one by its `name` (study.<name>.method)
    adapters: tuple = ()
    studies: tuple[StudyDecl, ...] = ()
    # reports dir -> this method's lines of the run summary (`rubricflow summary`, the end of `make run`)
    summary: Callable[[Path], list[str]] | None = None
    # extra CLI commands, and stage commands that print more than their metrics (Command.stage)
    commands: tuple[Command, ...] = ()
    # stage outcomes ({"stage", "status", "metrics", "seconds"} each) -> this method's lines of a pipeline flow's run
    # report (RuCL: the curriculum transition step)
    report_lines: Callable[[list[dict]], list[str]] | None = None
    # columns of `rubricflow compare` when the compared stage is this method's: name -> its value read off one MLflow
    # run record (a `mlflow.search_runs` row: "metrics.<name>", "tags.<name>", ...; None shows as "-")
    compare_columns: Mapping[str, Callable[[Mapping[str, Any]], Any]] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------------
# loading


_EXTRA: list[Method] = []
_CACHE: dict[str, Method] | None = None


def register(method: Method) -> None:
    """Add ``method`` at run time (before ``rubricflow.config`` composes the config)."""
    global _CACHE
    _EXTRA.append(method)
    _CACHE = None


def unregister(name: str) -> None:
    """Remove a method added with :func:`register` (tests)."""
    global _CACHE
    _EXTRA[:] = [m for m in _EXTRA if m.name != name]
    _CACHE = None


def _load_ref(ref: str, where: str) -> Method:
    module, _, attr = ref.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr or "METHOD")
    except (ImportError, AttributeError) as e:
        raise RegistryError(f"{where}: cannot load method {ref!r}: {e}") from e
    if not isinstance(obj, Method):
        raise RegistryError(f"{where}: {ref!r} is a {type(obj).__name__}, expected a rubricflow.registry.Method")
    return obj


def _discover() -> list[Method]:
    builtin = importlib.import_module(BUILTIN_LIST)
    found = [_load_ref(ref, f"{BUILTIN_LIST}.REGISTERED") for ref in builtin.REGISTERED]
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.append(_load_ref(ep.value, f"entry point {ep.name!r} of group {ENTRY_POINT_GROUP!r}"))
    return found + list(_EXTRA)


def _check_unique(found: list[Method]) -> None:
    owners: dict[tuple[str, str], str] = {}
    for m in found:
        names = ([("method", m.name)] + [("section", s.name) for s in m.sections]
                 + [("stage", s.name) for s in m.stages] + [("pipeline", p.name) for p in m.pipelines]
                 + [("study", s.name) for s in m.studies] + [("study adapter", a.name) for a in m.adapters])
        for key in names:
            if key in owners:
                raise RegistryError(f"{key[0]} {key[1]!r} is registered by both {owners[key]!r} and {m.name!r}")
            owners[key] = m.name


def methods() -> dict[str, Method]:
    """Every registered method by name, in registration order (built-in, entry points, run time)."""
    global _CACHE
    if _CACHE is None:
        found = _discover()
        _check_unique(found)
        _CACHE = {m.name: m for m in found}
    return _CACHE


def method(name: str) -> Method:
    all_ = methods()
    if name not in all_:
        raise KeyError(f"unknown method {name!r}; registered: {sorted(all_)}")
    return all_[name]


# ----------------------------------------------------------------------------------------------------------------
# what the kernel reads across methods


def stages() -> dict[str, StageSpec]:
    """Every stage once, in registration order."""
    return {s.name: s for m in methods().values() for s in m.stages}


def stage(name: str) -> StageSpec:
    """The stage called ``name`` (a KeyError names the known ones)."""
    all_ = stages()
    if name not in all_:
        raise KeyError(f"unknown stage {name!r}; stages: {sorted(all_)}")
    return all_[name]


def pipelines() -> dict[str, Pipeline]:
    out = {p.name: p for m in methods().values() for p in m.pipelines}
    for p in out.values():
        for n in p.stage_names:
            stage(n)  # a pipeline naming an unknown stage fails here, naming it
    return out


def pipeline(name: str) -> Pipeline:
    all_ = pipelines()
    if name not in all_:
        raise KeyError(f"unknown pipeline {name!r}; expected one of {sorted(all_)}")
    return all_[name]


def sections() -> list[SectionDecl]:
    return [s for m in methods().values() for s in m.sections]


def studies() -> dict[str, tuple[Method, StudyDecl]]:
    """Study name -> (the method that declares it, its declaration)."""
    return {s.name: (m, s) for m in methods().values() for s in m.studies}


def study_adapters() -> dict[str, Any]:
    """Adapter name -> every registered study adapter."""
    return {a.name: a for m in methods().values() for a in m.adapters}


def commands() -> list[Command]:
    return [c for m in methods().values() for c in m.commands]


def owner(stage_name: str) -> Method:
    """The method that registers stage ``stage_name`` (a KeyError names the known stages)."""
    for m in methods().values():
        if any(s.name == stage_name for s in m.stages):
            return m
    stage(stage_name)  # raises, naming the known stages
    raise AssertionError("unreachable")


def report_lines(outcomes: list[dict]) -> list[str]:
    """Every method's lines of a run report for these stage outcomes (:attr:`Method.report_lines`)."""
    return [line for m in methods().values() if m.report_lines is not None for line in m.report_lines(outcomes)]
