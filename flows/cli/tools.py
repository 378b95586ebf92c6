"""Tool commands of the ``rubricflow`` CLI: ``ingest``, ``resolve-params``, ``show-config``, ``summary``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

from flows.cli.base import _reflow, app, load_cfg
from rubricflow.config import write_resolved
from rubricflow.data.adapters import IngestError
from rubricflow.data.adapters import ingest as do_ingest
from rubricflow.pipeline.summary import print_summary, write_readme_block


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
    image_root: Annotated[Optional[Path], typer.Option(
        help="Folder image paths are relative to (default: src's).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace a non-empty --out that is not a rubricflow data set.")] = False,
):
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
    readme: Annotated[Optional[Path], typer.Option(
        help="Instead of printing, rewrite the 'What make run shows' block of this README from the stage reports "
        "(between its make-run-summary markers).")] = None,
):
    """Summarise the last pipeline run: stages, key metrics, how to open MLflow (back-fills dvc.lock tags)."""
    cfg = load_cfg()
    if readme is not None:
        try:
            changed = write_readme_block(readme, cfg.reports_dir)
        except (OSError, ValueError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"{readme}: {'rewritten' if changed else 'already up to date'} from {cfg.reports_dir}/")
        return
    print_summary(cfg.reports_dir, cfg.tracking, pipeline_id, elapsed)
