"""The ``rubricflow`` command line: one subcommand per pipeline stage (what dvc.yaml runs), plus tools.

Global options come before the subcommand: ``rubricflow --profile gpu --set rucl.reward.mode=outcome train``.
Every stage reads params.yaml (``--params``) through the typed config, so invalid parameters fail before any
work with a message naming the key.
"""

from __future__ import annotations

import rubricflow.env  # noqa: F401  (project-local caches and telemetry off, before anything heavy)

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


def _parse_set(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise typer.BadParameter(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = yaml.safe_load(v)
    return out


@app.callback()
def main(
    params: Annotated[Path, typer.Option(help="Parameters file (the one config source).")] = Path("params.yaml"),
    profile: Annotated[Optional[str], typer.Option(help="Profile overlay to use (tiny, gpu); default from params.")] = None,
    set_: Annotated[list[str], typer.Option("--set", help="Override a parameter: dotted.key=value (repeatable).")] = [],
    no_track: Annotated[bool, typer.Option("--no-track", help="Do not log to MLflow.")] = False,
    threads: Annotated[Optional[int], typer.Option(help="Torch intra-op threads (default $RUBRICFLOW_THREADS or 1).")] = None,
):
    state.params, state.profile, state.overrides, state.track = params, profile, _parse_set(set_), not no_track
    rubricflow.env.configure_threads(threads)


def load_cfg():
    from rubricflow.config import ConfigError, load_config

    try:
        return load_config(state.params, profile=state.profile, overrides=state.overrides)
    except ConfigError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None


def run_stage(fn, *args, **kw) -> dict:
    """Run a stage with uniform error reporting: known errors print their message and exit non-zero."""
    from rubricflow.config import ConfigError
    from rubricflow.data.validate import ValidationFailed

    cfg = load_cfg()
    try:
        metrics = fn(cfg, *args, track=state.track, **kw)
    except (ValidationFailed, ConfigError, FileNotFoundError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(_brief(metrics), indent=1, default=str))
    return metrics


def _brief(m: dict) -> dict:
    return {k: v for k, v in m.items() if not isinstance(v, (list,)) or len(v) < 12}


# ---------------------------------------------------------------------------------------------------- foundation


@app.command()
def data():
    """Generate the synthetic multimodal dataset (counting, bar chart, coordinate geometry)."""
    from rubricflow.stages import data_stage

    run_stage(data_stage)


@app.command()
def validate(
    data_dir: Annotated[Optional[Path], typer.Argument(help="Dataset directory (default: data.out_dir).")] = None,
):
    """Great Expectations gate on a dataset; non-zero exit naming expectation, column and offending ids."""
    from rubricflow.stages import validate_stage

    run_stage(validate_stage, str(data_dir) if data_dir else None)


@app.command()
def ingest(
    format: Annotated[str, typer.Option("--format", help="virl39k | mathverse | vlrewardbench | mmrewardbench")],
    src: Annotated[Path, typer.Option(help="Source file (parquet/json/jsonl).")],
    out: Annotated[Path, typer.Option(help="Output dataset directory.")],
    split: Annotated[str, typer.Option(help="Split assigned to the converted rows.")] = "test",
    image_root: Annotated[Optional[Path], typer.Option(help="Folder image paths are relative to (default: src's).")] = None,
):
    """Convert a public dataset into rubricflow's schema (parquet + images)."""
    from rubricflow.data.adapters import IngestError, ingest as do_ingest

    try:
        n = do_ingest(format, src, out, split=split, image_root=image_root)
    except IngestError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"ingested {n} records from {src} ({format}) into {out}")


@app.command("base-model")
def base_model():
    """Build the tiny policy offline (or check that a pretrained one resolves)."""
    from rubricflow.stages import base_model_stage

    run_stage(base_model_stage)


@app.command()
def sft():
    """SFT warm start on gold reasoning traces; reports held-out accuracy before/after."""
    from rubricflow.stages import sft_stage

    run_stage(sft_stage)


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
    print_summary(cfg, pipeline_id, elapsed)


def _register_methods() -> None:
    """Method sub-commands live next to their owners (flows/cli_<method>.py); all of them are required."""
    from flows import cli_deltarubric, cli_ops, cli_roro, cli_rucl

    for m in (cli_rucl, cli_deltarubric, cli_roro, cli_ops):
        m.register(app)


_register_methods()

if __name__ == "__main__":
    sys.exit(app())
