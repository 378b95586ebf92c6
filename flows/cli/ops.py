"""Operations sub-commands of the ``rubricflow`` CLI (registered by ``flows/cli/__init__.py`` through
``register(app)``).

* ``rubricflow repro``    ``dvc repro`` with independent stages run at once (``flows/repro.py``;
  what ``make run`` calls);
* ``rubricflow opt-in``   make DVC see an opt-in pipeline (studies, smol), hidden by the root .dvcignore;
* ``rubricflow exps``     ``dvc exp show`` with only the columns that differ, params under their ``-S`` names;
* ``rubricflow compare``  table of MLflow runs of a stage: differing params, final metrics, transition step
  (``--publish`` also creates it as Prefect table/markdown artifacts through the ``compare`` flow);
* ``rubricflow plots``    every dvc.yaml plot rendered with matplotlib into one offline HTML page (no CDN);
* ``rubricflow deploy``   register the ``*-local`` deployments of prefect.yaml on the ``rubricflow-local`` pool;
* ``rubricflow serve``    the same, then run a process worker for the pool in the foreground.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from flows.cli.base import load_cfg, usage_error
from flows.repro import exp_show_drop
from flows.repro import repro as do_repro
from flows.serve import POOL
from flows.serve import deploy as do_deploy
from flows.serve import main as serve_main
from rubricflow.pipeline.workspace import OPT_IN, ReproBusy
from rubricflow.pipeline.workspace import opt_in as do_opt_in
from rubricflow.tracking import compare as run_table
from rubricflow.tracking.plots import plot_specs, write_offline_html


def register(app: typer.Typer) -> None:
    app.command("repro")(repro)
    app.command("opt-in")(opt_in)
    app.command("exps", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(exps)
    app.command("compare")(compare)
    app.command("plots")(plots)
    app.command("deploy")(deploy)
    app.command("serve")(serve)


def repro(
    targets: Annotated[Optional[list[str]], typer.Argument(
        help="Stages or dvc.yaml files (default: dvc.yaml).")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Stages run at once.")] = 2,
    stage_threads: Annotated[Optional[int], typer.Option(
        help="Torch threads of each stage (default: the CPUs shared between the jobs).")] = None,
):
    """Reproduce the DVC pipeline with up to --jobs independent stages at once (each a `dvc repro --single-item`);
    a failed stage stops new starts, keeps every finished output, and a rerun resumes. SIGTERM/SIGINT stop every
    running stage (no output written after it, no dvc.lock entry) and exit 128+signal; one repro per project."""
    if jobs < 1:
        raise usage_error(f"--jobs: expected a positive integer, got {jobs}")
    if stage_threads is not None and stage_threads < 1:
        raise usage_error(f"--stage-threads: expected a positive integer, got {stage_threads}")
    t0 = time.monotonic()
    try:
        outcomes = do_repro(targets or None, jobs=jobs, threads=stage_threads, report=typer.echo)
    except ValueError as e:  # an unknown stage, or a stage-durations file that is not {stage: seconds}
        raise usage_error(str(e)) from None
    except ReproBusy as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    counts = {k: sum(o.status == k for o in outcomes) for k in ("ran", "unchanged", "failed", "not started")}
    typer.echo(f"repro: {counts['ran']} ran, {counts['unchanged']} unchanged, {counts['failed']} failed, "
               f"{counts['not started']} not started, in {time.monotonic() - t0:.0f} s")
    if counts["failed"]:
        raise typer.Exit(1)


def opt_in(
    name: Annotated[str, typer.Argument(help="The opt-in pipeline: studies or smol.")],
    off: Annotated[bool, typer.Option("--off", help="Hide the pipeline from DVC again.")] = False,
):
    """Make DVC see an opt-in pipeline (studies/dvc.yaml, smol/dvc.yaml), hidden by the root .dvcignore so that
    `dvc status`, `dvc checkout` and `dvc exp show` cover the main pipeline only. Writes (or with --off removes)
    the untracked <dir>/.dvcignore that re-includes the file; `rubricflow repro smol/dvc.yaml` opts in by itself."""
    try:
        changed = do_opt_in(name, on=not off)
    except ValueError as e:
        raise usage_error(str(e)) from None
    state = "hidden from DVC" if off else "visible to DVC"
    typer.echo(f"{OPT_IN[name]}: {state}{'' if changed else ' (already)'}")


def exps(
    ctx: typer.Context,
    all_columns: Annotated[bool, typer.Option("--all-columns", help="Every column (plain `dvc exp show`).")] = False,
):
    """`dvc exp show`, readable: only the columns whose values differ between the rows (--only-changed), params.yaml's
    keys under the names `dvc exp run -S` takes (their resolved copies in reports/params/ and the file-dependency
    hashes dropped). Other arguments go to `dvc exp show` (e.g. --md, --csv, -A, --sort-by)."""
    cmd = [sys.executable, "-m", "dvc", "exp", "show"]
    if not all_columns:
        cmd += ["--only-changed", "--drop", exp_show_drop()]
    raise typer.Exit(subprocess.call([*cmd, *ctx.args]))


def compare(
    stage: Annotated[str, typer.Option(
        help="Stage whose runs are compared (rucl, deltarubric_train, sft ...).")] = "rucl",
    experiment: Annotated[Optional[str], typer.Option(help="MLflow experiment (default: tracking.experiment).")] = None,
    metric: Annotated[list[str], typer.Option("--metric", help="Metric name pattern (fnmatch), repeatable.")] = [],
    max_runs: Annotated[int, typer.Option(help="Newest runs to include.")] = 50,
    publish: Annotated[bool, typer.Option(help="Also publish the table as Prefect artifacts (compare flow).")] = False,
    pipeline: Annotated[Optional[str], typer.Option(
        help="Only the runs of one pipeline run: its id (the rubricflow.pipeline_id tag) or 'latest'.")] = None,
):
    """Compare MLflow runs of one stage and its variants (rucl with rucl_outcome): parameters that differ, final
    metrics, curriculum transition step."""
    from rich.console import Console  # rich: loaded by this command only, not at the CLI's start
    from rich.table import Table

    exp = experiment or load_cfg().tracking.experiment
    try:
        cmp = run_table.compare_runs(exp, stage, metric or None, max_runs, pipeline=pipeline)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    table = Table(title=f"{stage} runs in MLflow experiment '{exp}' ({len(cmp.rows)})")
    for c in cmp.columns:
        table.add_column(c, overflow="fold")
    for r in cmp.rows:
        table.add_row(*(run_table._fmt(r.get(c)) for c in cmp.columns))
    Console(width=200).print(table)
    if not cmp.differing_params:
        typer.echo("(all runs have the same parameters)")
    if publish:
        from flows.compare import compare as compare_flow  # Prefect

        compare_flow(experiment=exp, stage=stage, metrics=metric or list(run_table.DEFAULT_METRICS))
        typer.echo("published as Prefect artifacts compare-<stage>-table and compare-<stage>")


def plots(
    out: Annotated[Path, typer.Option(help="HTML file to write.")] = Path("reports/plots/index.html"),
):
    """Render every dvc.yaml plot with matplotlib into one self-contained HTML page (works offline)."""
    specs = plot_specs()
    path = write_offline_html(out, specs)
    present = [s for s in specs if all(Path(f).exists() for f in s.files)]
    typer.echo(f"wrote {path} ({len(present)} of {len(specs)} plots; no scripts, opens offline)")


def deploy():
    """Register the local deployments (prefect.yaml *-local) on the rubricflow-local process pool."""
    try:
        names = do_deploy()
    except (RuntimeError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"registered on pool {POOL}: {', '.join(names)}")


def serve():
    """Register the local deployments, then run a process worker for rubricflow-local (foreground)."""
    raise typer.Exit(serve_main([]))
