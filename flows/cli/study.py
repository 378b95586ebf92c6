"""Study commands of the ``rubricflow`` CLI (registered by ``flows/cli/__init__.py`` through
``register(app)``):

* ``rubricflow study rucl [--seeds 1,2,3] [--variants a,b] [--report-name NAME] [--no-track]``  the multi-seed
  RuCL study (``study.rucl`` in params.yaml; ``rubricflow.study``): trains and evaluates every (variant, seed) unit
  not finished on the same inputs yet, then writes ``reports/studies/rucl.md``, ``.json`` and ``.png``;
* ``rubricflow study rucl --ray ADDRESS``  the same units as Ray tasks through the Prefect flow ``study``
  (flows/study.py; prefect-ray's ``RayTaskRunner``): ``auto``, ``ray://host:10001``, ``host:port``, or ``local``
  to start Ray on this machine for the run; each unit asks for the ``cluster`` section's CPUs and GPUs;
* ``rubricflow study rucl_tune``  the selection study that chooses the tiny profile's GRPO lr and temperature on
  val (``reports/studies/rucl_tune.md`` names the selected setting);
* ``rubricflow study deltarubric``  DeltaRubric against its trained baselines and ablations
  (``study.deltarubric``; the report adds the planner probe curve, ``reports/studies/deltarubric-probe.png``);
* ``rubricflow study-carry save|restore NAME [--leave-out base]``  a study's built starts and finished results
  saved to (restored from) ``studies/carry/NAME/``, to go on with a study on another machine
  (``rubricflow.study.carry``).
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Optional

import typer

from flows.cli.base import load_cfg, state
from rubricflow import registry
from rubricflow.config import ConfigError
from rubricflow.data.validate import ValidationFailed
from rubricflow.study.carry import CARRY_ROOT, CarryError, restore_progress, save_progress
from rubricflow.study.harness import UnitsUnfinished, run_study, study_spec
from rubricflow.study.rerender import rerender
from rubricflow.study.harness import report_only as write_report_only
from tasks.ray_runner import check_address, connect_address
import tasks.secrets


def _ints(text: str | None) -> list[int] | None:
    """``--seeds``: None when not given; a given value is parsed as is (``,`` is an empty list, refused at
    planning rather than read as "the default seeds")."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--seeds expects comma-separated integers, got {text!r}") from None


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def _studies_help() -> str:
    """One line per registered study (``rubricflow study --help`` lists them)."""
    def first_sentence(text: str, limit: int = 100) -> str:
        text = " ".join(text.split())
        cut = text.find(". ")
        text = text if cut < 0 else text[:cut + 1]
        return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0].rstrip(",;:(") + " ..."

    lines = [f"{name}: {first_sentence(decl.description)}" if decl.description else name
             for name, (_, decl) in registry.studies().items()]
    return "Studies (study.<name> in params.yaml):\n\n" + "\n\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("study", epilog=_studies_help())
    def study(
        name: Annotated[str, typer.Argument(help="Study: a sub-section of `study` in params.yaml (listed below).")],
        seeds: Annotated[Optional[str], typer.Option(
            help="Comma-separated seeds (default: study.<name>.seeds).")] = None,
        variants: Annotated[Optional[str], typer.Option(help="Comma-separated variants (default: all).")] = None,
        no_track: Annotated[bool, typer.Option("--no-track", help="Do not log to MLflow.")] = False,
        report_name: Annotated[Optional[str], typer.Option(
            help="Report file stem in study.<name>.report_dir (default: the study name), e.g. rucl-seeds-b for a "
            "second seed set.")] = None,
        ray: Annotated[Optional[str], typer.Option(
            "--ray", help="Run the units on Ray through the Prefect `study` flow: auto, local (started on this "
            "machine, loopback only), ray://host:10001 or host:port. The project must be on a filesystem every "
            "node shares.")] = None,
        report_only: Annotated[bool, typer.Option(
            "--report-only", help="Run nothing: write the report from the finished units' results (every unit must "
            "have one; units finished on other inputs are used and named in the report).")] = False,
        rerender_from: Annotated[Optional[str], typer.Option(
            "--rerender-from", help="Run nothing: re-render the report JSON at this path (written before "
            "preconditions and the Holm adjustment) from the per-unit metrics it keeps, with the spec's preconditions "
            "and adjusted verdicts, into --report-name (default: the study name).")] = None,
        exploratory: Annotated[bool, typer.Option(
            "--exploratory", help="Allow a working tree that differs from its commit: every page of the report is "
            "stamped exploratory and the seed ledger is left as it is (default: refused, so that a report of record "
            "regenerates from its commit).")] = False,
    ):
        """Multi-seed study: each (variant, seed) unit trained and evaluated (finished units are skipped), then the
        mean and 95% t-interval per variant, the preconditions and a Holm-adjusted verdict per claim in
        reports/studies/<name>.md/.json/.png."""
        cfg = load_cfg()
        if ray is not None and report_only:
            typer.echo("error: --ray and --report-only: --report-only runs no unit; give one of them", err=True)
            raise typer.Exit(2)
        if ray is not None:
            _on_ray(name, cfg, ray, seeds, variants, state.track and not no_track, report_name, exploratory)
            return
        try:
            if rerender_from is not None:
                summary = rerender(cfg, name, rerender_from, report_name=report_name, exploratory=exploratory)
                typer.echo(json.dumps(summary, indent=1))
                return
            if report_only:
                summary = write_report_only(cfg, name, seeds=_ints(seeds), variants=_names(variants),
                                            report_name=report_name, exploratory=exploratory)
                typer.echo(json.dumps(summary, indent=1))
                return
            summary = run_study(cfg, name, seeds=_ints(seeds), variants=_names(variants),
                                track=state.track and not no_track, secret_resolver=tasks.secrets.load_secret,
                                report_name=report_name, exploratory=exploratory)
        except ConfigError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        except (ValidationFailed, FileNotFoundError, ValueError, UnitsUnfinished) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(json.dumps(summary, indent=1))


    @app.command("study-carry")
    def study_carry(
        action: Annotated[str, typer.Argument(help="save: this machine's starts and finished results into the carry "
                                              "folder; restore: the carry folder's into the study's out_dir.")],
        name: Annotated[str, typer.Argument(help="Study: a sub-section of `study` in params.yaml.")],
        leave_out: Annotated[Optional[list[str]], typer.Option(
            "--leave-out", help="save: a subfolder of each start to leave out, what only the start's build reads "
            "(repeatable; DeltaRubric: base, the initial weights).")] = None,
        carry_dir: Annotated[str, typer.Option(
            "--dir", help="The carry folder (committed with the repository).")] = str(CARRY_ROOT),
    ):
        """Carry a study's progress to another machine through the repository: `save` writes the built starts (one
        reproducible .tar.gz per start), the checkpointed progress of resumable starts not built yet and the verified
        unit results under <dir>/<name>/; `restore` puts them into the study's out_dir, keeping whatever is there.
        The next `rubricflow study` reuses a restored start or result, or goes on from a restored partial start, only
        where its input hashes match, as for its own. Save after the study has stopped: a start being built is not
        carried (listed under `building`)."""
        if action not in ("save", "restore"):
            typer.echo(f"error: study-carry ACTION must be save or restore, got {action!r}", err=True)
            raise typer.Exit(2)
        cfg = load_cfg()
        try:
            spec = study_spec(cfg, name)
            if action == "save":
                summary = save_progress(spec, name, carry_dir, leave_out=leave_out or ())
            else:
                if leave_out:
                    raise ConfigError("study-carry restore: --leave-out applies to save only")
                summary = restore_progress(spec, name, carry_dir)
        except ConfigError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        except CarryError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(json.dumps(summary, indent=1))
        if summary.get("building"):
            typer.echo(f"error: starts being built, neither they nor their progress carried: "
                       f"{', '.join(summary['building'])}; stop the study and save again", err=True)
            raise typer.Exit(1)


def _on_ray(name: str, cfg, address: str, seeds: str | None, variants: str | None, track: bool,
            report_name: str | None, exploratory: bool = False) -> None:
    """``study NAME --ray ADDRESS``: the Prefect ``study`` flow with its units on Ray."""
    from flows.study import UnitsFailed, study as study_flow  # Prefect and prefect-ray

    try:
        address = connect_address(check_address(address, field="--ray"))  # `auto` resolved; no answer: an error now
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    os.environ["RUBRICFLOW_PARAMS"] = str(state.params)  # the flow (and every unit) reads the same file
    try:
        summary = study_flow(name=name, profile=cfg.profile, seeds=_ints(seeds), variants=_names(variants),
                             overrides=state.overrides, ray=address, track=track, report_name=report_name,
                             exploratory=exploratory)
    except ConfigError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    except (UnitsFailed, FileNotFoundError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(summary, indent=1))
