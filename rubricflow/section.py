"""The base class of every config section (kept apart from rubricflow.config so that method packages can define
their sections without importing the composed top-level config)."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


class ConfigError(ValueError):
    """Invalid parameters; the message names the file and the dotted key."""


_UNIONS = (Union, types.UnionType)


def _strip(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _takes_bool(tp: Any) -> bool:
    tp = _strip(tp)
    if tp is bool or tp is Any or tp is object:
        return True
    if get_origin(tp) is Literal:
        return any(isinstance(a, bool) for a in get_args(tp))
    if get_origin(tp) in _UNIONS:
        return any(_takes_bool(a) for a in get_args(tp))
    return False


def _numeric(tp: Any) -> bool:
    tp = _strip(tp)
    if get_origin(tp) in _UNIONS:
        return any(_numeric(a) for a in get_args(tp))
    return tp is int or tp is float


def _bool_in(tp: Any, value: Any) -> str | None:
    """Where ``value`` puts a boolean into a number slot of type ``tp`` ("" for the value itself, "[i]" for an
    item), or None. Pydantic's lax mode would take ``true`` for 1 there."""
    if isinstance(value, bool):
        return "" if _numeric(tp) and not _takes_bool(tp) else None
    tp = _strip(tp)
    if get_origin(tp) in _UNIONS:
        options = [a for a in get_args(tp) if a is not type(None)]
        if len(options) != 1:
            return None
        tp = _strip(options[0])
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(value, Mapping) and origin in (dict, Mapping) and len(args) == 2:
        items = [(f"[{k!r}]", args[1], v) for k, v in value.items()]
    elif isinstance(value, (list, tuple)) and origin is tuple and args and args[-1] is not Ellipsis:
        items = [(f"[{i}]", t, v) for i, (t, v) in enumerate(zip(args, value))]
    elif isinstance(value, (list, tuple)) and origin in (list, tuple, set, frozenset, Sequence) and args:
        items = [(f"[{i}]", args[0], v) for i, v in enumerate(value)]
    else:
        return None
    for where, item_tp, item in items:
        inner = _bool_in(item_tp, item)
        if inner is not None:
            return where + inner
    return None


class Section(BaseModel):
    """A params.yaml section: unknown keys are errors, assignments are validated, enums dump as values.

    Numbers are read strictly where YAML is loose: a boolean is not a number (``steps: true`` would otherwise be
    1) and a float must be finite (``.inf``, ``nan``, ``"inf"`` are refused). A field that means "no limit" with
    infinity opts in with ``Field(..., allow_inf_nan=True)``. Strings still convert (``lr: "1e-4"``).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, (bool, list, tuple, Mapping)) and info.field_name in cls.model_fields:
            where = _bool_in(cls.model_fields[info.field_name].annotation, value)
            if where is not None:
                at = f" (item {where})" if where else ""
                raise PydanticCustomError("bool_not_number", "Input should be a number, not a boolean" + at)
        return value
