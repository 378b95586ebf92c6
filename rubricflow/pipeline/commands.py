"""CLI commands a method declares without importing the CLI.

A method's extra command is a plain function whose first parameter is a :class:`CommandContext` and whose other
parameters are its options, each annotated ``Annotated[type, Opt("help")]``; the CLI layer (``flows/cli``) turns
the signature into a typer command. A command with ``stage=`` replaces the generated command of that stage (it
runs the stage through ``ctx.run_stage`` and prints more than its metrics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Opt:
    """CLI metadata of one command parameter."""

    help: str
    flag: str | None = None  # the option's name on the command line (default: --<parameter-name>)
    argument: bool = False  # a positional argument rather than an option


@dataclass
class CommandContext:
    """What the CLI hands a command: the config loader, the stage runner and the printer."""

    load_config: Callable[[], Any]
    run_stage: Callable[..., dict]  # run_stage(stage name, **kw) -> metrics; errors end the command
    echo: Callable[[str], None]
    secret_resolver: Callable[[str], str] | None = None
    track: bool = True  # log to MLflow (False under `rubricflow --no-track`)


class CommandError(Exception):
    """A command refuses its input: the CLI prints ``error: <message>`` (one line) and exits with ``code``."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Command:
    name: str  # `rubricflow <name>`
    fn: Callable[..., Any]  # fn(ctx: CommandContext, **options)
    stage: str | None = None  # the stage whose generated command this one replaces
