"""The ``rubricflow`` command line: one subcommand per pipeline stage (what dvc.yaml runs), plus tools.

The stage commands are generated from the manifest (``rubricflow.pipelines``): ``rubricflow <spec.cli>`` runs the
stage, older names stay as aliases. A stage whose command takes arguments or prints more than its metrics has a
hand-written command in ``flows/cli_<method>.py`` (``COMMANDS``), registered under the same name.

Global options come before the subcommand: ``rubricflow --profile gpu --set rucl.reward.mode=outcome train``.
Every stage reads params.yaml (``--params``) through the typed config, so invalid parameters fail before any
work with a message naming the key.
"""

from __future__ import annotations

import rubricflow.env  # noqa: F401  (project-local caches and telemetry off, before anything heavy)

import inspect
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

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

    A value that is not valid YAML (or repeats a key) is an error naming the item; type checks are the config's.
    """
    from rubricflow.yamlload import load_yaml, yaml_error_line

    out = {}
    for item in items:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise usage_error(f"--set expects key=value, got {item!r}")
        try:
            out[k.strip()] = load_yaml(v)
        except yaml.YAMLError as e:
            raise usage_error(f"--set {item!r}: the value is not valid YAML: {yaml_error_line(e)}") from None
    return out


@app.callback()
def main(
    params: Annotated[Path, typer.Option(help="Parameters file (the one config source).")] = Path("params.yaml"),
    profile: Annotated[Optional[str], typer.Option(help="Profile overlay to use (tiny, gpu); default from params.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a parameter: dotted.key=value (repeatable).")] = [],
    no_track: Annotated[bool, typer.Option("--no-track", help="Do not log to MLflow.")] = False,
    threads: Annotated[Optional[int], typer.Option(help="Torch intra-op threads (default $RUBRICFLOW_THREADS or 1).")] = None,
):
    if threads is not None and threads < 1:
        raise usage_error(f"--threads: expected a positive integer, got {threads}")
    state.params, state.profile, state.overrides, state.track = params, profile, _parse_set(set_), not no_track
    try:
        rubricflow.env.configure_threads(threads)
    except ValueError as e:  # $RUBRICFLOW_THREADS is not a positive integer
        raise usage_error(str(e)) from None


def load_cfg():
    from rubricflow.config import ConfigError, load_config

    try:
        return load_config(state.params, profile=state.profile, overrides=state.overrides)
    except ConfigError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def run_stage(spec, **kw) -> dict:
    """Run a manifest stage with uniform error reporting: known errors print their message and exit non-zero."""
    from rubricflow.config import ConfigError
    from rubricflow.data.validate import ValidationFailed
    from rubricflow.judge.errors import JudgeError  # preflight failed, failure budget exceeded
    from tasks.secrets import load_secret

    cfg = load_cfg()
    try:
        metrics = spec(cfg, track=state.track, secret_resolver=load_secret, **kw)
    except (ValidationFailed, ConfigError, FileNotFoundError, ValueError, JudgeError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(_brief(metrics), indent=1, default=str))
    return metrics


def _reflow(doc: str) -> str:
    """A docstring as help text: paragraphs kept, the line breaks inside a paragraph joined (rich keeps them)."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


def _brief(m: dict) -> dict:
    return {k: v for k, v in m.items() if not isinstance(v, (list,)) or len(v) < 12}


# ---------------------------------------------------------------------------------------------------- foundation


INGEST_HELP = """Convert a public dataset into rubricflow's schema (parquet + images).

    The data set is built in a staging folder and renamed into place. A non-empty --out is replaced only when it
    is a previous rubricflow data set (or with --force); --out may never be the current directory, the source's
    folder or a folder holding the source or the image root. Image paths must stay inside the image root."""


@app.command(help=_reflow(INGEST_HELP))
def ingest(
    format: Annotated[str, typer.Option("--format", help="virl39k | mathverse | vlrewardbench | mmrewardbench")],
    src: Annotated[Path, typer.Option(help="Source file (parquet/json/jsonl).")],
    out: Annotated[Path, typer.Option(help="Output dataset directory: new, empty or a previous rubricflow data set.")],
    split: Annotated[str, typer.Option(help="Split assigned to the converted rows.")] = "test",
    image_root: Annotated[Optional[Path], typer.Option(help="Folder image paths are relative to (default: src's).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty --out that is not a rubricflow data set.")] = False,
):
    from rubricflow.data.adapters import IngestError, ingest as do_ingest

    try:
        n = do_ingest(format, src, out, split=split, image_root=image_root, force=force)
    except IngestError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"ingested {n} records from {src} ({format}) into {out}")


@app.command("resolve-params")
def resolve_params(
    out: Annotated[Path, typer.Option(help="Folder for one JSON file per effective config section.")] = Path(
        "reports/params"
    ),
):
    """Write the effective config (profile applied), one file per section: the params DVC stages depend on."""
    from rubricflow.config import write_resolved

    cfg = load_cfg()
    written = write_resolved(cfg, out)
    typer.echo(f"resolved profile {cfg.profile!r}: {', '.join(sorted(written))} -> {out}")


@app.command("show-config")
def show_config():
    """Print the effective configuration (profile overlay applied) as YAML."""
    cfg = load_cfg()
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


@app.command()
def summary(
    pipeline_id: Annotated[Optional[str], typer.Option(help="Pipeline id (default: $RUBRICFLOW_PIPELINE_ID).")] = None,
    elapsed: Annotated[Optional[float], typer.Option(help="Seconds the pipeline took (printed).")] = None,
):
    """Summarise the last pipeline run: stages, key metrics, how to open MLflow (back-fills dvc.lock tags)."""
    from rubricflow.summary import print_summary

    cfg = load_cfg()
    print_summary(cfg.reports_dir, cfg.tracking, pipeline_id, elapsed)


def validate(
    data_dir: Annotated[Optional[Path], typer.Argument(help="Dataset directory (default: data.out_dir).")] = None,
):
    """Great Expectations gate on a dataset; non-zero exit naming expectation, column and offending ids.

    On success the stamp is written to reports/validation/<path>.json, <path> being the folder's path relative to
    the project root (reports/validation/data/synthetic.json for data.out_dir; a folder outside the project is
    filed under _outside/<name>-<hash>). The stage report is reports/validate.json for data.out_dir (the
    pipeline's) and reports/validate/<path>.json for any other folder, so checking another folder never changes
    the pipeline's gate or report."""
    from rubricflow.pipelines import stage

    run_stage(stage("validate"), data_dir=str(data_dir) if data_dir else None)


def _stage_command(spec):
    def command():
        run_stage(spec)

    command.__doc__ = spec.help
    return command


def register_stage_commands(app: typer.Typer, custom: dict) -> None:
    """One command per manifest stage (``custom[stage name]`` where a stage has its own), plus its aliases."""
    from rubricflow.pipelines import STAGES

    for spec in STAGES.values():
        fn = custom.get(spec.name) or _stage_command(spec)
        # the stage's help line, then any further paragraphs of a hand-written command's docstring
        details = _reflow(inspect.getdoc(fn) or "").partition("\n\n")[2] if spec.name in custom else ""
        app.command(spec.cli, help=spec.help + (f"\n\n{details}" if details else ""))(fn)
        for alias in spec.aliases:
            app.command(alias, help=f"Alias of `rubricflow {spec.cli}` (kept for one release). {spec.help}")(fn)


def _register() -> None:
    from flows import cli_deltarubric, cli_ops, cli_roro, cli_study

    register_stage_commands(app, {"validate": validate, **cli_roro.COMMANDS})
    for m in (cli_deltarubric, cli_ops, cli_roro, cli_study):
        m.register(app)


_register()

if __name__ == "__main__":
    sys.exit(app())
