"""The ``rubricflow`` typer app: global options, the config loader and the stage runner every command uses.

Command modules (``flows/cli/*.py``) import this module and add their commands; ``flows/cli/__init__.py`` imports
them all. Global options come before the subcommand: ``rubricflow --profile gpu --set rucl.reward.mode=outcome
train``. Every stage reads params.yaml (``--params``) through the typed config, so invalid parameters fail before
any work with a message naming the key.
"""

from __future__ import annotations

import rubricflow.util.env  # noqa: F401  (project-local caches and telemetry off, before anything heavy)

import errno
import inspect
import json
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml
from typer.core import TyperOption

from models.errors import RunFailed  # a missing backend, a server that did not start, a fetch that failed
from rubricflow.config import ConfigError, load_config
from rubricflow.data.validate import ValidationFailed
from rubricflow.judge.errors import JudgeError  # preflight failed, failure budget exceeded
from rubricflow.registry import stage
from rubricflow.util.io import NotWritable
from rubricflow.util.yamlload import load_yaml, yaml_error_line
import tasks.secrets


def _no_flag_metavar() -> None:
    """Flags take no value: typer's rich help would show their type (``--no-track <bool>``); show nothing."""
    if getattr(TyperOption.display_type_rich, "_rubricflow", False):
        return
    original = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        if self.is_flag and self.metavar is None:
            return None
        return original(self, ctx)

    display_type_rich._rubricflow = True
    TyperOption.display_type_rich = display_type_rich


_no_flag_metavar()

app = typer.Typer(
    name="rubricflow",
    help="Rubric-based RL pipelines (RuCL, DeltaRubric, RoRo): stages, evaluation and tools.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class State:
    params: Path = Path("params.yaml")
    profile: str | None = None
    overrides: dict = {}
    track: bool = True


state = State()


def usage_error(message: str) -> typer.Exit:
    """Print ``error: message`` (one line, no traceback) and return the exit for a usage/config error (2)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _parse_set(items: list[str]) -> dict:
    """``--set dotted.key=value`` items as {key: value}, each value parsed as YAML (``3``, ``1e-4``, ``[1, 2]``).

    A value that is not valid YAML (or repeats a key) is an error naming the item, and so is a key given twice
    (``--set seed=1 --set seed=2`` would silently keep the last); type checks are the config's.
    """
    out = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise usage_error(f"--set expects key=value, got {item!r}")
        if k.strip() in out:
            raise usage_error(f"--set {item!r}: key `{k.strip()}` is set twice; give each key once")
        try:
            out[k.strip()] = load_yaml(v)
        except yaml.YAMLError as e:
            raise usage_error(f"--set {item!r}: the value is not valid YAML: {yaml_error_line(e)}") from None
    return out


@app.callback()
def main(
    params: Annotated[Path, typer.Option(help="Parameters file (the one config source).")] = Path("params.yaml"),
    profile: Annotated[Optional[str], typer.Option(
        help="Profile overlay to use: a key of `profiles` in params.yaml (tiny, gpu, smol); "
             "default: its `profile`.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a parameter: dotted.key=value (repeatable).")] = [],
    no_track: Annotated[bool, typer.Option("--no-track", help="Do not log to MLflow.")] = False,
    threads: Annotated[Optional[int], typer.Option(
        help="Torch intra-op threads (default $RUBRICFLOW_THREADS or 1).")] = None,
):
    if threads is not None and threads < 1:
        raise usage_error(f"--threads: expected a positive integer, got {threads}")
    state.params, state.profile, state.overrides, state.track = params, profile, _parse_set(set_), not no_track
    try:
        rubricflow.util.env.configure_threads(threads)
    except ValueError as e:  # $RUBRICFLOW_THREADS is not a positive integer
        raise usage_error(str(e)) from None


def load_cfg():
    try:
        return load_config(state.params, profile=state.profile, overrides=state.overrides)
    except ConfigError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def run_stage(spec, **kw) -> dict:
    """Run a stage (a ``StageSpec`` or a stage name) with uniform error reporting: known errors print their message
    and exit non-zero."""
    spec = stage(spec) if isinstance(spec, str) else spec
    cfg = load_cfg()
    try:
        metrics = spec(cfg, track=state.track, secret_resolver=tasks.secrets.load_secret, **kw)
    except (ValidationFailed, ConfigError, FileNotFoundError, ValueError, JudgeError, RunFailed, NotWritable) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    except OSError as e:  # a full disk (rubricflow.util.io.DiskFull, a checkpoint save) names its file: one line
        if e.errno != errno.ENOSPC:
            raise
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(_brief(metrics), indent=1, default=str))
    return metrics


def _reflow(doc: str) -> str:
    """A docstring as help text: paragraphs kept, the line breaks inside a paragraph joined (rich keeps them)."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


def _brief(m: dict) -> dict:
    return {k: v for k, v in m.items() if not isinstance(v, (list,)) or len(v) < 12}
