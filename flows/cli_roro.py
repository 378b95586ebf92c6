"""RoRo commands of the ``rubricflow`` CLI that print more than their metrics (the other RoRo stages get the
generated command, ``rubricflow roro-models`` ... ``rubricflow roro-router``):

* ``rubricflow roro-rubricor-judge``  Rubricor-Judge alternation; prints val pairwise accuracy per phase
* ``rubricflow roro-eval``            accuracy vs LRM cost on held-out problems: prints the table, writes the curve
                                      (``--from-file`` prints the last saved table); alias ``route-eval``
* ``rubricflow roro-judge-tune``      the tiny Judge's warm start chosen on val pairs (rubricflow.methods.roro.judge_tune)
"""

from __future__ import annotations

import json
from typing import Annotated

import typer


def roro_rubricor_judge():
    """Alternate Judge and Rubricor rejection-sampling fine-tuning; print val pairwise accuracy per phase."""
    from flows.cli import run_stage
    from rubricflow.pipelines import stage

    m = run_stage(stage("roro_rubricor_judge"))
    for r in m.get("rounds", []):
        cats = ", ".join(f"{k[len('val_acc_'):]} {r[k]:.3f}" for k in sorted(r)
                         if k.startswith("val_acc_") and k != "val_acc_process")
        typer.echo(f"round {r['round']} {r['phase']:>8}: val pairwise accuracy {r['val_pairwise_acc']:.3f} ({cats})"
                   f"{'  <- kept' if r.get('selected') else ''}")


def roro_eval(
    from_file: Annotated[bool, typer.Option("--from-file", help="Print the last saved table instead of evaluating.")] = False,
):
    """Evaluate routers and baselines on held-out problems; print the accuracy-vs-LRM-cost table."""
    from flows.cli import load_cfg, run_stage
    from rubricflow.pipelines import stage
    from rubricflow.methods.roro.evaluate import format_table

    if from_file:
        from rubricflow.methods.roro.paths import eval_dir

        path = eval_dir(load_cfg().roro) / "table.json"
        if not path.exists():
            typer.echo(f"error: {path} not found; run `rubricflow roro-eval` first", err=True)
            raise typer.Exit(1)
        saved = json.loads(path.read_text())
        rows, matched = saved["rows"], saved["matched"]
    else:
        m = run_stage(stage("roro_eval"))
        rows, matched = m["rows"], m["matched"]
    typer.echo(format_table(rows))
    for mt in matched:
        others = ", ".join(f"{m} {mt[f'{m}_accuracy_at_cost']:.3f}" for m in ("outcome-only", "threshold")
                           if f"{m}_accuracy_at_cost" in mt)
        typer.echo(
            f"cost weight {mt['cost_weight']:g}: RoRo {mt['roro_accuracy']:.3f} at LRM cost "
            f"{mt['roro_lrm_cost_frac']:.3f}; at that cost {others}, random {mt['random_matched_accuracy']:.3f}"
        )
    if not from_file:
        typer.echo("area under the accuracy-vs-cost hull: " + ", ".join(f"{k} {v:.3f}" for k, v in m["auc"].items()))
        jt = m.get("judge_test") or {}
        if jt:
            cats = ", ".join(f"{k[len('acc_'):]} {jt[k]:.3f} (n={jt['n_' + k[len('acc_'):]]:.0f})" for k in sorted(jt)
                             if k.startswith("acc_"))
            typer.echo(f"kept Judge on test pairs: pairwise accuracy {jt['pairwise_acc']:.3f} ({cats})")


# stage name -> its command (flows/cli.py registers it under the stage's CLI name and aliases)
COMMANDS = {"roro_rubricor_judge": roro_rubricor_judge, "roro_eval": roro_eval}


def roro_judge_tune(
    settings: Annotated[str, typer.Option(help="Comma-separated names from judge_tune.SETTINGS (default: all).")] = "",
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds (default: judge_tune.SEEDS, not the study's).")] = "",
    out: Annotated[str, typer.Option(help="Report stem (.md and .json).")] = "reports/studies/roro_judge_tune",
    oracle_warm: Annotated[bool, typer.Option(
        "--oracle-warm", help="Only the exact reader's val accuracy under the warm Rubricor's rubrics, per seed.")] = False,
):
    """Measure Judge settings (warm start + one round) on val pairs and select one by the rule fixed in advance."""
    from flows.cli import load_cfg
    from rubricflow.methods.roro.judge_tune import run_tune

    try:
        names = [x for x in settings.split(",") if x] or None
        seed_list = [int(x) for x in seeds.split(",") if x] or None
        chosen = run_tune(load_cfg().roro, names, seed_list, out, oracle_warm, echo=typer.echo)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if chosen is not None:
        typer.echo(f"selected: {chosen}")


def register(app: typer.Typer) -> None:
    app.command("roro-judge-tune")(roro_judge_tune)
