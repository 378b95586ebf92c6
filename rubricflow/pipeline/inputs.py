"""What a stage's result depends on, as one hash: the Prefect cache key of the stage tasks.

The declared inputs of a stage are the ones DVC already uses (``dvc.yaml``): its ``deps`` (files and directories,
code included) and its ``params`` (dotted keys of params.yaml). The key hashes

* the stage name,
* the effective value (profile overlay and flow overrides applied) of each declared param key; a key that is not
  part of the effective config (e.g. ``profiles``) is taken from the raw params file,
* the effective config sections the stage function takes, plus ``profile`` and ``seed``,
* the content (md5) of every dep file, recursively for directories,
* the source file of the stage function.

A stage that is not in ``dvc.yaml`` has unknown input files: ``declared`` is False, the flows run it uncached
(a key without its inputs could serve a stale result) and :func:`stage_inputs` says so in ``notes`` (the task
logs it). Content hashes of large files are memoised by (path, size, mtime, inode) in
``.rubricflow/filehash.sqlite`` as DVC's state db does, so an unchanged 15 GB checkpoint is not re-read.
This module has no Prefect import: :mod:`tasks.cache` builds the Prefect cache policy on it.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rubricflow.pipeline.stage import StageSpec
from rubricflow.util.hashing import MISSING, path_hash

# ----------------------------------------------------------------------------------------------------------------
# declared inputs


@dataclass
class StageInputs:
    stage: str
    params: dict[str, Any] = field(default_factory=dict)  # dotted key -> effective value
    deps: dict[str, str] = field(default_factory=dict)  # path -> content hash
    outs: list[str] = field(default_factory=list)  # declared outputs (dvc.yaml outs + metrics + plots)
    source: str = ""  # hash of the stage function's source file
    declared: bool = False  # the stage is in dvc.yaml (its deps are known, so its key can be trusted)
    notes: list[str] = field(default_factory=list)

    def key(self) -> str:
        blob = json.dumps(
            {"stage": self.stage, "params": self.params, "deps": self.deps, "source": self.source},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def missing_outputs(self, root: Path | None = None) -> list[str]:
        root = root or Path.cwd()
        return [o for o in self.outs if not (root / o).exists()]


def load_dvc_yaml(path: str | Path = "dvc.yaml") -> dict:
    p = Path(path)
    if not p.exists():
        return {}
    doc = yaml.safe_load(p.read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{p}: expected a mapping with `stages`")
    return doc.get("stages") or {}


def _entries(items) -> list[str]:
    """dvc.yaml lists hold plain strings or one-key mappings (``- reports/x.json: {cache: false}``)."""
    out = []
    for it in items or []:
        if isinstance(it, str):
            out.append(it)
        elif isinstance(it, dict):
            out.extend(str(k) for k in it)
    return out


def _param_keys(items) -> list[str]:
    """``params:`` entries: keys of params.yaml, or ``{other.yaml: [keys]}`` (only params.yaml keys are hashed here;
    another params file is hashed whole by :func:`_param_files`)."""
    keys = []
    for it in items or []:
        if isinstance(it, str):
            keys.append(it)
        elif isinstance(it, dict):
            for fname, sub in it.items():
                if Path(str(fname)).name == "params.yaml":
                    keys.extend(str(k) for k in sub or [])
    return keys


def _param_files(items) -> list[str]:
    """``params:`` files other than params.yaml (e.g. the resolved sections ``reports/params/<section>.json``, which
    stages declare as params so that DVC names the key that changed): hashed like a dependency."""
    return [str(fname) for it in items or [] if isinstance(it, dict) for fname in it
            if Path(str(fname)).name != "params.yaml"]


def _lookup(tree: Any, dotted: str) -> Any:
    node = tree
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return MISSING
    return node


def _source_hash(fn) -> str:
    target = inspect.unwrap(fn)
    try:
        return path_hash(inspect.getsourcefile(target) or "")
    except (TypeError, OSError):
        return MISSING


def stage_inputs(
    stage: str,
    cfg: Any,
    fn=None,
    dvc_stages: dict | None = None,
    raw_params: dict | None = None,
    sections: tuple[str, ...] = (),
) -> StageInputs:
    """Collect the declared inputs of ``stage`` (see the module docstring); ``cfg`` is the composed config."""
    dvc_stages = load_dvc_yaml() if dvc_stages is None else dvc_stages
    eff = cfg.model_dump(mode="json")
    inp = StageInputs(stage)
    for s in ("profile", "seed", *sections):
        inp.params[s] = _lookup(eff, s)
    spec = dvc_stages.get(stage)
    if spec is None:
        inp.notes.append(
            f"stage {stage!r} is not in dvc.yaml: its input files are unknown, so it is not cached (runs every time)"
        )
    else:
        inp.declared = True
        for key in _param_keys(spec.get("params")):
            val = _lookup(eff, key)
            if val == MISSING and raw_params is not None:
                val = _lookup(raw_params, key)
            inp.params[key] = val
        for dep in [*_entries(spec.get("deps")), *_param_files(spec.get("params"))]:
            if "${" in dep:
                inp.notes.append(f"dvc.yaml stage {stage!r}: templated dep {dep!r} is not hashed")
                continue
            inp.deps[dep] = path_hash(dep)
        inp.outs = [o for kind in ("outs", "metrics", "plots") for o in _entries(spec.get(kind)) if "${" not in o]
    if fn is not None:
        inp.source = _source_hash(fn)
    return inp


def raw_params(path: str | Path | None = None) -> dict:
    """The params file as written (for keys such as ``profiles`` that the effective config does not hold)."""
    p = Path(path or os.environ.get("RUBRICFLOW_PARAMS", "params.yaml"))
    if not p.exists():
        return {}
    return yaml.safe_load(p.read_text()) or {}


def spec_inputs(spec: StageSpec, cfg: Any, dvc_stages: dict | None = None) -> StageInputs:
    """:func:`stage_inputs` of a manifest stage: its dvc.yaml entry, its sections (with its overrides applied to
    ``cfg``) and the source of its function."""
    return stage_inputs(spec.name, spec.configure(cfg), fn=spec.fn, dvc_stages=dvc_stages, raw_params=raw_params(),
                        sections=spec.sections)
