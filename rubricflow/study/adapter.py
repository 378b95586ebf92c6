"""What the study harness needs from a method: the unit (one variant, one seed) and the method's adapter."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricflow.study.spec import StudySpec


@dataclass(frozen=True)
class Unit:
    variant: str
    seed: int

    @property
    def key(self) -> str:
        return f"{self.variant}/seed{self.seed}"


# A unit function: (unit config, unit, unit dir, tracking run, secret resolver) -> {"metrics": {...}, ...}
UnitFn = Callable[[Any, Unit, Path, Any, Callable[[str], str] | None], dict]


@dataclass(frozen=True)
class SeedStart:
    """What a method builds once per seed when a study's seed covers the whole chain (``per_seed_start``):

    * ``overrides(vcfg, start_dir)``: dotted keys pointing a unit's config at the start in ``start_dir`` (its warm
      start, its tiers, ...), applied before the method's ``unit_overrides``;
    * ``inputs(ucfg, seed)``: what the start depends on, one entry per part (hashed, with ``code``);
    * ``build(ucfg, seed, build_dir, start_dir)``: build the start into ``build_dir`` (renamed to ``start_dir``
      when done) and return a small summary for the report (e.g. the warm start's val accuracy and the tiers);
    * ``code``: dotted modules or packages whose source the start depends on;
    * ``resumable``: ``build`` takes a fifth argument, ``resume_dir``: a folder of the seed's own that outlives an
      interrupted or failed build (and is carried between machines with the study's progress), where the build
      checkpoints its progress and from which a later build goes on; it is emptied when the start's inputs change
      and removed once the start is in place.
    """

    overrides: Callable[[Any, Path], dict[str, Any]]
    inputs: Callable[[Any, int], dict[str, Any]]
    build: Callable[..., dict]
    code: tuple[str, ...]
    resumable: bool = False


@dataclass(frozen=True)
class StudyMethod:
    """What the harness needs from a method to study it.

    * ``unit_overrides(vcfg, name, spec, unit, udir)``: the dotted keys the study sets per unit (the method's own
      seeds, output and checkpoint folders under ``udir``, the evaluation split ``spec.eval_split``), given the
      config with the variant's overrides applied; the top-level ``seed`` is set by the harness;
    * ``reserved_keys``: those keys, which no variant may override;
    * ``shared_outputs(ucfg)``: what every unit reuses from the main pipeline (stage -> file that proves it ran);
    * ``input_parts(ucfg, unit)``: what a unit's result depends on, one entry per part (hashed into ``inputs``),
      beside the method's ``code`` (dotted modules or packages);
    * ``run_unit``: trains the unit (unless its variant is in ``spec.untrained``) and evaluates it on the unit
      config's split, returning ``{"metrics": {...}, "eval_samples": n, ...}``;
    * ``sections``: the config sections logged with each unit's MLflow run; ``shared_hint``: how to make the shared
      outputs;
    * ``report_extras(name, spec, results, stem_path)`` (optional): more of the report from the units' results
      (e.g. a training-dynamics curve over seeds): ``{"markdown": [lines], "files": {key: path}, "json": {...}}``,
      appended to ``<stem>.md``, listed among the report's files and stored under ``extras`` in ``<stem>.json``;
    * ``seed_start`` (optional): the start built once per seed for a study with ``per_seed_start``;
    * ``pair_metric(metric, result_a, result_b)`` (optional): both values of one of a spec's ``pair_metrics`` for two
      units of one seed (None where the pair has none), for the claims that name it.
    """

    name: str
    run_unit: UnitFn
    unit_overrides: Callable[[Any, str, StudySpec, Unit, Path], dict[str, Any]]
    reserved_keys: tuple[str, ...]
    shared_outputs: Callable[[Any], dict[str, Path]]
    input_parts: Callable[[Any, Unit], dict[str, Any]]
    code: tuple[str, ...]
    sections: tuple[str, ...]
    shared_hint: str
    report_extras: Callable[[str, StudySpec, Sequence[Mapping], Path], dict] | None = None
    seed_start: SeedStart | None = None
    pair_metric: Callable[[str, Mapping, Mapping], tuple[float | None, float | None]] | None = None
