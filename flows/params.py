"""Typed flow parameters: the knobs each flow exposes in the Prefect UI form, built from the Config fields.

``overrides_model("RuclOverrides", {"reward_mode": "rucl.reward.mode", ...})`` makes a pydantic model whose
fields copy the type (a ``Literal`` becomes a dropdown), bounds and description of the config field at each
dotted path; the default is the value params.yaml gives for the default profile. Only values that differ from
those defaults are applied (``changed()``), as ``--set``-style dotted overrides, so an untouched form changes
nothing and a profile overlay is never pinned to another profile's value. ``extra`` takes any other dotted key
(``{"rucl.curriculum.peak": 0.3}``), exactly like ``dvc exp run -S``; unknown keys fail with the key named.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from rubricflow.config import Config, ConfigError, load_config, profile_names


def profile_choice() -> Any:
    """The type of a flow's ``profile`` field: a dropdown (``Literal``) of the profiles params.yaml defines; a plain
    string where this directory's params.yaml defines none (the flows module is imported wherever the CLI runs: the
    name is then checked when the flow loads its config, and that error names the file)."""
    try:
        return Literal[profile_names()]  # type: ignore[valid-type]
    except ConfigError:
        return str


def field_at(path: str) -> FieldInfo:
    """The FieldInfo of a dotted config path of ``Config``."""
    parts = path.split(".")
    model: type[BaseModel] = Config
    info = None
    for i, part in enumerate(parts):
        if part not in model.model_fields:
            raise KeyError(f"config path {path!r}: {part!r} is not a field of {model.__name__}")
        info = model.model_fields[part]
        if i < len(parts) - 1:
            ann = info.annotation
            if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
                raise KeyError(f"config path {path!r}: {part!r} is not a section")
            model = ann
    assert info is not None
    return info


def default_values(paths: list[str], profile: str | None = None) -> dict[str, Any]:
    """Effective value of each path in params.yaml (default profile)."""
    eff = load_config(profile=profile).model_dump(mode="json")
    out = {}
    for p in paths:
        field_at(p)  # names the path if it is not a config field
        node: Any = eff
        for part in p.split("."):
            node = node[part]
        out[p] = node
    return out


class Overrides(BaseModel):
    """Base of the generated models: knobs + ``extra``; ``changed()`` gives the dotted overrides to apply."""

    model_config = ConfigDict(extra="forbid")
    knob_paths: ClassVar[dict[str, str]] = {}
    knob_defaults: ClassVar[dict[str, Any]] = {}

    def changed(self) -> dict[str, Any]:
        out = {}
        for name, path in self.knob_paths.items():
            v = getattr(self, name)
            v = v.value if hasattr(v, "value") else v
            if v != self.knob_defaults[path]:
                out[path] = v
        extra = dict(getattr(self, "extra", {}) or {})
        clash = sorted(set(extra) & set(out))
        if clash:
            raise ConfigError(f"flow parameters: {clash} set both as a field and in `extra`")
        return {**out, **extra}


def overrides_model(name: str, knobs: dict[str, str], doc: str, profile: str | None = None) -> type[Overrides]:
    """Build the parameter model ``name`` with one field per ``knob name -> dotted config path``."""
    defaults = default_values(list(knobs.values()), profile)
    fields: dict[str, Any] = {}
    for knob, path in knobs.items():
        src = field_at(path)
        info = copy.copy(src)
        info.default = defaults[path]
        info.default_factory = None
        info.description = f"{src.description} (`{path}`; default from params.yaml)"
        fields[knob] = (src.annotation, info)
    fields["extra"] = (
        dict[str, Any],
        Field(
            default_factory=dict,
            description="Any other parameter as dotted.key: value (like `dvc exp run -S`), e.g. "
            '{"sft.steps": 20}. Unknown keys fail before any work, naming the key.',
        ),
    )
    model = create_model(name, __base__=Overrides, __doc__=doc, **fields)
    model.knob_paths = dict(knobs)
    model.knob_defaults = defaults
    return model
