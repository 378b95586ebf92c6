"""The base class of every config section (kept apart from rubricflow.config so that method packages can define
their sections without importing the composed top-level config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """Invalid parameters; the message names the file and the dotted key."""


class Section(BaseModel):
    """A params.yaml section: unknown keys are errors, assignments are validated, enums dump as values."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=True)
