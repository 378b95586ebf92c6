"""Typed configuration: ``params.yaml`` parsed into pydantic models (the composition root).

``Config`` composes the shared sections (``rubricflow.sections``, the judge), the sections every registered
method declares (``rubricflow.registry``: ``Method.sections``, defined in ``rubricflow/methods/<name>/config.py``)
and the ``study`` section made of every method's declared studies. Only entry points (``tasks/``, ``flows/``) and
tests import this module; core code receives the section(s) it needs from the stage framework
(``rubricflow.pipeline.stage``), which ``tests/test_layers.py`` checks. The model is built when this module is first
imported: a method registered at run time (``rubricflow.registry.register``) must be registered before, or the
config recomposed with :func:`compose`.

``params.yaml`` is the one source of parameters. Its top level holds the method parameters; ``profiles`` holds
per-profile overlays (models, engine, generation and judge backends, sizes) and ``profile`` picks one. The
effective config is ``pydantic defaults <- profiles[profile] <- top-level keys``, so ``dvc exp run -S key=value``
(which edits top-level keys) always wins over the profile.

Every field has a description: the same models are the Prefect flows' parameters, so the Prefect UI renders a
form with help text and dropdowns for the ``Literal``/``Enum`` fields. Unknown keys are errors (``extra=forbid``):
a typo in params.yaml fails before any work, with the dotted key in the message.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model

from rubricflow import registry
from rubricflow.judge.config import JudgeConfig
from rubricflow.study.spec import compose_study_config
from rubricflow.util.io import atomic_write_text
from rubricflow.util.yamlload import AliasExpansionError, DuplicateKeyError, load_yaml, yaml_error_line
from rubricflow.sections import (
    ClusterConfig,
    ConfigError,
    DataConfig,
    GenerationConfig,
    ModelsConfig,
    DEFAULT_PROFILE,
    ModelSpec,
    Section,
    SFTConfig,
    SplitSizes,
    TrackingConfig,
)

__all__ = [
    "BaseConfig", "Config", "ConfigError", "DataConfig", "GenerationConfig", "ModelSpec", "ModelsConfig",
    "SFTConfig", "SplitSizes", "TrackingConfig", "compose", "config_from_dict", "config_hash", "load_config",
    "params_path", "profile_names", "recompose", "write_resolved",
]


# ----------------------------------------------------------------------------------------------------------------
# Top level


class BaseConfig(Section):
    """The run-level settings and the sections every pipeline shares; the methods' sections are added by
    :func:`compose`."""

    profile: str = Field(DEFAULT_PROFILE, min_length=1,
                         description="Active profile: a key of `profiles`, whose overlay applies.")
    seed: int = Field(1234, description="Global seed for training and sampling.")
    artifacts_dir: str = Field("artifacts", description="Root of model/rubric artifacts (DVC outputs).")
    reports_dir: str = Field("reports", description="Root of metrics, plots and validation stamps (DVC metrics).")
    data: DataConfig = Field(default_factory=DataConfig, description="Synthetic data generation and gates.")
    models: ModelsConfig = Field(default_factory=ModelsConfig, description="Model specs per role.")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="SFT warm start.")
    generation: GenerationConfig = Field(default_factory=GenerationConfig, description="Rollout generation.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow tracking.")
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig, description="Resources of a study unit on a Ray cluster (`study --ray`)."
    )
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig,
        description="Judge backend (programmatic / openai-compatible / local), cache, retries.",
    )


def compose() -> type[BaseConfig]:
    """``BaseConfig`` plus one field per registered method section, then the ``study`` section."""
    fields: dict[str, Any] = {}
    for decl in registry.sections():
        if decl.name in BaseConfig.model_fields or decl.name in fields or decl.name == "study":
            raise ConfigError(f"method section `{decl.name}` clashes with a section of the same name")
        fields[decl.name] = (decl.model, Field(default_factory=decl.model, description=decl.description))
    study = compose_study_config([d for _, d in registry.studies().values()], registry.study_adapters())
    fields["study"] = (study, Field(
        default_factory=study,
        description="Multi-seed studies (`rubricflow study <name>`, studies/dvc.yaml): variants x seeds, claims.",
    ))
    return create_model("Config", __base__=BaseConfig, __doc__=BaseConfig.__doc__, **fields)


Config = compose()


def recompose() -> type[BaseConfig]:
    """Build ``Config`` again from the registry (after :func:`rubricflow.registry.register`)."""
    global Config
    Config = compose()
    return Config


# ----------------------------------------------------------------------------------------------------------------
# Loading


def deep_merge(base: dict, over: dict) -> dict:
    """Recursively merge ``over`` into a copy of ``base`` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _format_errors(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid parameters"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        got = e.get("input")
        got_s = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  - key `{key}`: {e['msg']}{got_s}")
    return "\n".join(lines)


def resolve_raw(raw: dict, profile: str | None = None, source: str = "params.yaml") -> dict:
    """Apply the profile overlay: ``profiles[profile] <- top-level``; returns the effective dict."""
    raw = dict(raw or {})
    profiles = raw.pop("profiles", {}) or {}
    name = profile or raw.get("profile") or DEFAULT_PROFILE
    if profiles and name not in profiles:
        raise ConfigError(f"{source}: key `profile`: unknown profile {name!r}; expected one of {sorted(profiles)}")
    merged = deep_merge(profiles.get(name, {}) or {}, raw)
    merged["profile"] = name
    return merged


def read_params(path: Path) -> Any:
    """The parsed YAML document of a parameters file; ConfigError naming the file on anything unreadable.

    Refused: a missing file, a folder, bytes that are not UTF-8, a file with no document (empty or only comments:
    an empty params.yaml would silently run every default), invalid YAML and a key given twice in one mapping
    (YAML would keep the last one without a word).
    """
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder; expected a parameters file (YAML)")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: parameters file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the parameters file: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: not UTF-8 text: byte 0x{data[e.start]:02x} at line {line} (offset {e.start}); "
            "expected a UTF-8 YAML file"
        ) from None
    try:
        raw = load_yaml(text)
    except (DuplicateKeyError, AliasExpansionError) as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {yaml_error_line(e)}") from None
    if raw is None:
        raise ConfigError(f"{path}: empty parameters file; expected a mapping of parameters (see params.yaml)")
    return raw


def params_path(path: str | os.PathLike | None = None) -> Path:
    """``path``, else ``$RUBRICFLOW_PARAMS``, else ./params.yaml."""
    return Path(path or os.environ.get("RUBRICFLOW_PARAMS", "params.yaml"))


def profile_names(path: str | os.PathLike | None = None) -> tuple[str, ...]:
    """The profiles ``params.yaml`` defines (the keys of ``profiles``, in file order): the names ``profile``
    accepts. ConfigError naming the file when it has none or they are not a mapping."""
    path = params_path(path)
    raw = read_params(path)
    profiles = raw.get("profiles") if isinstance(raw, dict) else None
    if not isinstance(profiles, dict) or not profiles:
        raise ConfigError(f"{path}: key `profiles`: expected a mapping of profile name -> overlay, got {profiles!r}")
    return tuple(str(k) for k in profiles)


def load_config(
    path: str | os.PathLike | None = None, profile: str | None = None, overrides: dict[str, Any] | None = None
) -> Config:
    """Load and validate ``params.yaml`` (default: ``$RUBRICFLOW_PARAMS`` or ./params.yaml).

    ``overrides`` maps dotted keys to values (``{"rucl.reward.mode": "outcome"}``), applied last.
    Raises ConfigError naming the file and the dotted key on any problem.
    """
    path = params_path(path)
    raw = read_params(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    return config_from_dict(raw, profile=profile, overrides=overrides, source=str(path))


def config_from_dict(
    raw: dict, profile: str | None = None, overrides: dict[str, Any] | None = None, source: str = "params"
) -> Config:
    merged = resolve_raw(raw, profile, source)
    for dotted, value in (overrides or {}).items():
        node = merged
        keys = dotted.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: key `{dotted}`: `{k}` is not a section")
        node[keys[-1]] = value
    try:
        return Config.model_validate(merged)
    except ValidationError as e:
        raise ConfigError(_format_errors(e, source)) from None


def config_hash(cfg: BaseModel) -> str:
    """Stable short hash of a (sub)config, for cache keys and run tags."""
    import hashlib
    import json

    blob = json.dumps(cfg.model_dump(mode="json"), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_resolved(cfg: BaseModel, out_dir: str | os.PathLike) -> dict[str, str]:
    """Write each top-level section of the effective config to ``out_dir/<section>.json``.

    DVC stages depend on these files instead of on raw params.yaml keys: a profile overlay makes one raw key
    affect many effective values, and editing an unrelated part of ``profiles`` would otherwise invalidate every
    stage. Files are rewritten only when their content changes (DVC hashes content, not mtime, anyway).
    """
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = cfg.model_dump(mode="json")
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    sections = {k: v for k, v in data.items() if isinstance(v, dict)}
    sections["run"] = scalars  # profile, seed, artifacts_dir, reports_dir
    written = {}
    for name, value in sections.items():
        path = out / f"{name}.json"
        text = json.dumps(value, indent=1, sort_keys=True) + "\n"
        if not path.exists() or path.read_text() != text:
            atomic_write_text(path, text)
        written[name] = str(path)
    for stale in out.glob("*.json"):
        if stale.stem not in sections:
            stale.unlink()
    return written


def config_sources(root: str | os.PathLike | None = None) -> list[str]:
    """The source files (relative to ``root``, default the project root) that define a config field or default: this
    module, every module defining a section class reachable from ``Config``, and every module whose factory builds a
    default study. DVC's ``params`` stages depend on exactly these (tests/ops/test_dvc.py checks it)."""
    import inspect

    from rubricflow.util.env import PROJECT_ROOT

    root = Path(root or PROJECT_ROOT).resolve()
    modules: set = {inspect.getmodule(compose), inspect.getmodule(compose_study_config)}
    seen: set[type] = set()

    def walk(model: type) -> None:
        if model in seen:
            return
        seen.add(model)
        modules.add(inspect.getmodule(model))
        for f in model.model_fields.values():
            for tp in _types_in(f.annotation):
                if isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__module__ != "pydantic.main":
                    walk(tp)

    walk(BaseConfig)
    for decl in registry.sections():
        walk(decl.model)
    for _, decl in registry.studies().values():
        modules.add(inspect.getmodule(decl.spec))
    files = {Path(inspect.getfile(m)).resolve() for m in modules if m is not None}
    return sorted(f.relative_to(root).as_posix() for f in files if f.is_relative_to(root))


def _types_in(annotation: Any) -> list:
    from typing import get_args

    args = get_args(annotation)
    return [annotation] if not args else [t for a in args for t in _types_in(a)]
