"""The stage framework: what a pipeline stage is, and how every entry point runs one.

A stage is a function that takes the config section(s) it needs *by name* and a :class:`StageContext`, and
returns a small dict of metrics::

    @stage("sft", retries=1)
    def sft(sft: SFTConfig, models: ModelsConfig, data: DataConfig, generation: GenerationConfig,
            ctx: StageContext) -> dict: ...

``@stage`` turns it into a :class:`StageSpec`: the one description of the stage that the CLI (``rubricflow
<cli>``), ``dvc.yaml`` (checked against the manifest by a test), the Prefect tasks (retries, the judge-calls
slot, tags) and the Prefect cache (the sections it reads) all use. Calling the spec with the composed config,
``spec(cfg, track=True)``, picks the sections named in the signature out of ``cfg`` (so a stage sees only what it
declares, and never imports the composed ``Config``), opens the stage's MLflow child run, logs those sections as
parameters and the returned metrics, and writes ``reports/<report name>.json`` atomically (``report_name(cfg, **kw)``
names it from the config and the function's extra keyword arguments; default: the stage name).

``@stage(outputs=("sft.out_dir",))`` names the dotted config keys of folders the stage writes: each is checked
writable (``rubricflow.util.io.require_writable``) before the stage's function runs, so an unwritable output folder
fails the stage at once, naming the key, instead of after the training.

Every stage runs under the test-split guard (``rubricflow.pipeline.splits``): reading ``test`` rows raises, except in
stages declared ``@stage(reads_test=True)`` (data generation and validation, and the final evaluations).

A *variant* is the same function under another name with dotted overrides (``rucl_outcome`` = ``rucl`` with
``rucl.reward.mode=outcome``): ``spec.variant("rucl_outcome", {...})``. The overrides are data on the spec, so
the CLI, DVC and Prefect apply the same ones.

The list of stages and pipelines is the registry (``rubricflow.registry``).
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from models.children import handle_signals
from rubricflow.pipeline.splits import forbid_test_split
from rubricflow.sections import ConfigError
from rubricflow.training.ranks import process_rank
from rubricflow.util.io import require_writable, write_json

# Parameters of a stage function that are not config sections.
CONTEXT_PARAM = "ctx"


class NullRun:
    """Stand-in for a tracking run when tracking is disabled (unit tests of stage logic)."""

    run_id = None
    parent_id = None

    def log_metrics(self, *a, **k):
        pass

    def log_params(self, *a, **k):
        pass

    def set_tags(self, *a, **k):
        pass

    def log_artifact(self, *a, **k):
        pass

    def log_dict(self, *a, **k):
        pass

    def log_input(self, *a, **k):
        pass

    def log_summary(self, *a, **k):
        pass

    def event(self, *a, **k):
        pass


@dataclass
class StageContext:
    """What a stage gets besides its sections: the run-level settings and the runtime services."""

    seed: int = 1234
    profile: str = "tiny"
    reports_dir: Path = Path("reports")
    artifacts_dir: Path = Path("artifacts")
    run: Any = field(default_factory=NullRun)  # the MLflow child run (rubricflow.tracking.StageRun) or a NullRun
    # name of a Prefect Secret block -> its value; the entry points (tasks/, flows/) provide it, since the core
    # never imports Prefect. None: a configured `judge.openai.secret_block` is reported as unresolvable by name.
    secret_resolver: Callable[[str], str] | None = None

    @classmethod
    def of(cls, cfg: Any, run: Any = None, secret_resolver: Callable[[str], str] | None = None) -> StageContext:
        return cls(
            seed=cfg.seed,
            profile=str(cfg.profile),
            reports_dir=Path(cfg.reports_dir),
            artifacts_dir=Path(cfg.artifacts_dir),
            run=run if run is not None else NullRun(),
            secret_resolver=secret_resolver,
        )


@dataclass(frozen=True)
class StageSpec:
    """One pipeline stage (or a variant of one): the function and everything the entry points need to run it."""

    name: str  # dvc.yaml stage name, report file name, MLflow run name
    fn: Callable[..., dict]  # the function as written (sections by name + ctx + optional extras)
    sections: tuple[str, ...]  # config sections the function takes, in signature order
    cli: str  # `rubricflow <cli>`
    aliases: tuple[str, ...] = ()  # older CLI names kept working
    retries: int = 0  # Prefect: attempts after the first
    judge: bool = False  # Prefect: holds one `judge-calls` slot; the stage builds a judge (gets a secret resolver)
    reads_test: bool = False  # a final evaluation (or data) stage; every other stage runs under the test-split guard
    resumable: bool = False  # resumes from its latest checkpoint on a retry
    timeout_s: float | None = None
    outputs: tuple[str, ...] = ()  # dotted config keys of output folders, checked writable before the function runs
    overrides: Mapping[str, Any] = field(default_factory=dict)  # dotted config overrides (variants)
    base: str | None = None  # the stage this one is a variant of
    # names the report/run from the config and the function's extra keyword arguments (default: `name`); may hold
    # a `/` (a report in a subfolder of reports/)
    report_name: Callable[..., str] | None = None
    doc: str | None = None  # one-line help; default: the first line of the function's docstring
    # MLflow names of the returned metrics (rubricflow.tracking.names.stage_names): the namespace of names not in
    # one yet (train, val, test, judge, curriculum, stage), and renames (a key or a `prefix/` -> new name, None drops)
    metric_ns: str = "stage"
    metric_names: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def help(self) -> str:
        return self.doc or (inspect.getdoc(self.fn) or self.name).strip().splitlines()[0]

    @property
    def command(self) -> str:
        """The command dvc.yaml runs for this stage."""
        return f"rubricflow {self.cli}"

    def variant(self, name: str, overrides: Mapping[str, Any], doc: str, cli: str | None = None) -> StageSpec:
        """This stage's function under another name, with dotted config ``overrides`` and its own help line."""
        return replace(
            self, name=name, cli=cli or name.replace("_", "-"), aliases=(), overrides=dict(overrides),
            base=self.base or self.name, doc=doc,
        )

    def configure(self, cfg: Any) -> Any:
        """``cfg`` with this spec's overrides applied (validated by the config's own model)."""
        return apply_overrides(cfg, self.overrides)

    def mlflow_metrics(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """The returned ``metrics`` as MLflow logs them: flattened, under the metric naming convention."""
        from rubricflow.tracking.names import stage_names

        return stage_names(flat_metrics(metrics), self.metric_ns, self.metric_names)

    def sections_of(self, cfg: Any) -> dict[str, Any]:
        out = {}
        for s in self.sections:
            if not hasattr(cfg, s):
                raise ConfigError(f"stage {self.name}: the config has no `{s}` section (the stage function takes it)")
            out[s] = getattr(cfg, s)
        return out

    def __call__(
        self,
        cfg: Any,
        *,
        track: bool = True,
        prefect_flow_run_id: str | None = None,
        secret_resolver: Callable[[str], str] | None = None,
        **kw: Any,
    ) -> dict:
        """Run the stage on the composed config: overrides, sections, tracking, the metrics report. ``kw`` are the
        function's own extra keyword arguments (``validate``'s ``data_dir``). In the main thread, SIGTERM, SIGHUP
        and SIGINT stop the stage's child processes and end it with exit status ``128 + signal``
        (``models.children.handle_signals``)."""
        with handle_signals():
            return self._run(cfg, track=track, prefect_flow_run_id=prefect_flow_run_id,
                             secret_resolver=secret_resolver, **kw)

    def _run(self, cfg: Any, *, track: bool, prefect_flow_run_id: str | None,
             secret_resolver: Callable[[str], str] | None, **kw: Any) -> dict:
        t0 = time.perf_counter()
        cfg = self.configure(cfg)
        sections = self.sections_of(cfg)
        main = process_rank() == 0  # under a multi-process launch every rank runs the stage; rank 0 publishes
        track = track and main
        run_name = self.report_name(cfg, **kw) if self.report_name else self.name
        params = {s: v.model_dump(mode="json") for s, v in sections.items()}
        params["profile"] = cfg.profile
        params["seed"] = cfg.seed
        for key in self.outputs:
            require_writable(_dotted(cfg, key), key)
        guard = contextlib.nullcontext() if self.reads_test else forbid_test_split(self.name)
        if not track:
            with guard:
                metrics = self.fn(**sections, ctx=StageContext.of(cfg, None, secret_resolver), **kw)
        else:
            from rubricflow.tracking import stage_run

            with stage_run(
                run_name,
                experiment=cfg.tracking.experiment,
                params=params,
                tags={"profile": cfg.profile},
                tracking_uri=cfg.tracking.tracking_uri,
                prefect_flow_run_id=prefect_flow_run_id,
            ) as run, guard:
                metrics = self.fn(**sections, ctx=StageContext.of(cfg, run, secret_resolver), **kw)
                metrics.setdefault("duration_s", round(time.perf_counter() - t0, 2))
                run.log_summary(self.mlflow_metrics(metrics))  # on the stage's run and as <stage>/... on the parent
                metrics["mlflow_run_id"] = run.run_id
        metrics.setdefault("duration_s", round(time.perf_counter() - t0, 2))
        # the MLflow run id stays out of the DVC metrics file (it would differ on every run in `dvc exp show`)
        if main:
            write_json(Path(cfg.reports_dir) / f"{run_name}.json",
                       {k: v for k, v in metrics.items() if k != "mlflow_run_id"})
        return metrics


def stage(
    name: str,
    *,
    cli: str | None = None,
    aliases: tuple[str, ...] = (),
    retries: int = 0,
    judge: bool = False,
    resumable: bool = False,
    reads_test: bool = False,
    timeout_s: float | None = None,
    report_name: Callable[..., str] | None = None,
    outputs: tuple[str, ...] = (),
    metric_ns: str = "stage",
    metric_names: Mapping[str, str | None] | None = None,
) -> Callable[[Callable[..., dict]], StageSpec]:
    """Declare a stage (see the module docstring). Its sections are the function's parameters before ``ctx``."""

    def deco(fn: Callable[..., dict]) -> StageSpec:
        params = list(inspect.signature(fn).parameters.values())
        names = [p.name for p in params]
        if CONTEXT_PARAM not in names:
            raise TypeError(f"stage {name}: {fn.__qualname__} must take a `{CONTEXT_PARAM}: StageContext` parameter")
        sections = tuple(
            p.name for p in params[: names.index(CONTEXT_PARAM)]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        return StageSpec(
            name=name, fn=fn, sections=sections, cli=cli or name.replace("_", "-"), aliases=tuple(aliases),
            retries=retries, judge=judge, resumable=resumable, reads_test=reads_test, timeout_s=timeout_s,
            report_name=report_name, outputs=tuple(outputs), metric_ns=metric_ns,
            metric_names=dict(metric_names or {}),
        )

    return deco


def _dotted(cfg: Any, key: str) -> Any:
    obj = cfg
    for part in key.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"stage output `{key}`: the config has no `{part}` there")
        obj = getattr(obj, part)
    return obj


def apply_overrides(cfg: Any, overrides: Mapping[str, Any]) -> Any:
    """A copy of the pydantic ``cfg`` with dotted-key ``overrides`` set, validated again; ``cfg`` if none."""
    if not overrides:
        return cfg
    data = cfg.model_dump(mode="json")
    for dotted, value in overrides.items():
        node = data
        keys = dotted.split(".")
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                raise ConfigError(f"override `{dotted}`: `{k}` is not a config section")
            node = node[k]
        if keys[-1] not in node:
            raise ConfigError(f"override `{dotted}`: no such config key")
        node[keys[-1]] = value
    return type(cfg).model_validate(data)


def flat_metrics(d: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested metrics dict as ``a/b/c -> float`` (what MLflow logs)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat_metrics(v, key + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out
