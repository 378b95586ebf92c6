"""Stage and method commands of the ``rubricflow`` CLI, generated from the registry (``rubricflow.registry``).

Every registered stage gets ``rubricflow <spec.cli>`` (and its older names as aliases), which runs the stage and
prints its metrics. A method's ``Command`` (``Method.commands``) is a plain function taking a ``CommandContext`` and
options annotated ``Annotated[type, Opt(...)]`` (``rubricflow.pipeline.commands``); :func:`typer_command` turns it into
a typer command. One with ``stage=`` replaces that stage's generated command (under the stage's CLI name and aliases).
"""

from __future__ import annotations

import inspect
from typing import Annotated, get_args, get_origin, get_type_hints

import typer

from flows.cli.base import _reflow, load_cfg, run_stage, state
from rubricflow import registry
from rubricflow.pipeline.commands import Command, CommandContext, CommandError, Opt
import tasks.secrets


def _context() -> CommandContext:
    return CommandContext(load_config=load_cfg, run_stage=run_stage, echo=typer.echo,
                          secret_resolver=tasks.secrets.load_secret, track=state.track)


def typer_command(cmd: Command):
    """A typer command function for ``cmd``: its options from the signature (``Opt`` metadata -> typer options or
    arguments), the context filled in, a ``CommandError`` printed as one line with its exit code."""
    fn = cmd.fn
    hints = get_type_hints(fn, include_extras=True)
    params = list(inspect.signature(fn).parameters.values())[1:]  # the first is the CommandContext
    new_params = []
    for p in params:
        ann = hints.get(p.name, p.annotation)
        if get_origin(ann) is Annotated:
            base, *meta = get_args(ann)
            opt = next((m for m in meta if isinstance(m, Opt)), None)
            if opt is not None:
                info = (typer.Argument(help=opt.help) if opt.argument
                        else typer.Option(*( [opt.flag] if opt.flag else []), help=opt.help))
                ann = Annotated[base, info]
        new_params.append(p.replace(annotation=ann))

    def command(**kwargs):
        try:
            return fn(_context(), **kwargs)
        except CommandError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.code) from None

    command.__signature__ = inspect.Signature(new_params)
    command.__name__ = fn.__name__
    command.__doc__ = fn.__doc__
    return command


def stage_help(spec) -> str:
    """The stage's help line, whole: its ``doc``, else the first paragraph of its function's docstring with the
    line breaks joined (``spec.help`` is the first physical line, which can end mid-sentence)."""
    if spec.doc:
        return spec.doc
    return _reflow(inspect.getdoc(spec.fn) or spec.name).partition("\n\n")[0]


def _stage_command(spec):
    def command():
        run_stage(spec)

    command.__doc__ = stage_help(spec)
    return command


def register(app: typer.Typer) -> None:
    """One command per registered stage (a method's command where it replaces one), plus its aliases; then the
    methods' other commands."""
    commands = registry.commands()
    custom = {c.stage: c for c in commands if c.stage}
    unknown = sorted(set(custom) - set(registry.stages()))
    if unknown:
        raise registry.RegistryError(f"commands replace unknown stages {unknown}")
    for spec in registry.stages().values():
        cmd = custom.get(spec.name)
        fn = typer_command(cmd) if cmd else _stage_command(spec)
        # the stage's help line, then any further paragraphs of a method command's docstring
        details = _reflow(inspect.getdoc(cmd.fn) or "").partition("\n\n")[2] if cmd else ""
        line = stage_help(spec)
        app.command(spec.cli, help=line + (f"\n\n{details}" if details else ""))(fn)
        for alias in spec.aliases:
            app.command(alias, help=f"Alias of `rubricflow {spec.cli}` (kept for one release). {line}")(fn)
    for cmd in commands:
        if not cmd.stage:
            app.command(cmd.name, help=_reflow(inspect.getdoc(cmd.fn) or cmd.name))(typer_command(cmd))
