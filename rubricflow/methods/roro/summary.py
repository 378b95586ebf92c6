"""RoRo's lines of the run summary and its CLI commands that print more than their metrics:

* ``rubricflow roro-rubricor-judge``  Rubricor-Judge alternation; prints val pairwise accuracy per phase;
* ``rubricflow roro-eval``            accuracy vs LRM cost on held-out problems: prints the table, writes the curve
                                      (``--from-file`` prints the last saved table); alias ``route-eval``.

The Judge's warm start is chosen by the selection study ``rubricflow study roro_judge_tune`` (``study/judge_tune.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from rubricflow.methods.roro.paths import eval_dir
from rubricflow.pipeline.commands import Command, CommandContext, CommandError, Opt
from rubricflow.pipeline.summary import load_report


def summary_lines(r: Path) -> list[str]:
    out = []
    if (m := load_report(r / "roro_rubricor_judge.json")):
        accs = " -> ".join(f"{row['val_pairwise_acc']:.2f}" for row in m["rounds"])
        out.append(f"roro judge  val pairwise accuracy per phase: {accs} (kept {m['selected_phase']})")
    if (m := load_report(r / "roro_eval.json")):
        by = {row["method"]: row for row in m["rows"] if row.get("param") is None}
        ends = ", ".join(f"{k} {by[k]['accuracy']:.1%}" for k in ("all-slm", "all-lrm") if k in by)
        if m.get("roro_accuracy") is not None and m.get("outcome_only_accuracy_at_roro_cost") is not None:
            out.append(f"roro route  {ends}; RoRo {m['roro_accuracy']:.1%} at LRM cost {m['roro_lrm_cost_frac']:.2f} "
                       f"vs outcome-only {m['outcome_only_accuracy_at_roro_cost']:.1%} at the same cost")
        if m.get("auc"):
            order = [k for k in ("roro", "oracle-process", "outcome-only", "threshold", "random") if k in m["auc"]]
            out.append("roro route  AUC of accuracy vs cost: " + ", ".join(f"{k} {m['auc'][k]:.3f}" for k in order))
        if (jt := m.get("judge_test")):
            out.append(f"roro judge  kept Judge on test pairs: {jt['pairwise_acc']:.2f} overall, process "
                       f"{jt.get('acc_process', float('nan')):.2f}")
    return out


def roro_rubricor_judge(ctx: CommandContext) -> None:
    """Alternate Judge and Rubricor rejection-sampling fine-tuning; print val pairwise accuracy per phase."""
    m = ctx.run_stage("roro_rubricor_judge")
    for r in m.get("rounds", []):
        cats = ", ".join(f"{k[len('val_acc_'):]} {r[k]:.3f}" for k in sorted(r)
                         if k.startswith("val_acc_") and k != "val_acc_process")
        ctx.echo(f"round {r['round']} {r['phase']:>8}: val pairwise accuracy {r['val_pairwise_acc']:.3f} ({cats})"
                 f"{'  <- kept' if r.get('selected') else ''}")


def roro_eval(
    ctx: CommandContext,
    from_file: Annotated[bool, Opt("Print the last saved table instead of evaluating.", flag="--from-file")] = False,
) -> None:
    """Evaluate routers and baselines on held-out problems; print the accuracy-vs-LRM-cost table."""
    from rubricflow.methods.roro.router.evaluate import format_table  # router.evaluate loads torch

    if from_file:
        path = eval_dir(ctx.load_config().roro) / "table.json"
        if not path.exists():
            raise CommandError(f"{path} not found; run `rubricflow roro-eval` first")
        saved = json.loads(path.read_text())
        rows, matched = saved["rows"], saved["matched"]
    else:
        m = ctx.run_stage("roro_eval")
        rows, matched = m["rows"], m["matched"]
    ctx.echo(format_table(rows))
    for mt in matched:
        others = ", ".join(f"{k} {_num(mt[f'{k}_accuracy_at_cost'])}" for k in ("oracle-process", "outcome-only",
                                                                                 "threshold")
                           if f"{k}_accuracy_at_cost" in mt)
        ctx.echo(f"cost weight {mt['cost_weight']:g}: RoRo {mt['roro_accuracy']:.3f} at LRM cost "
                 f"{mt['roro_lrm_cost_frac']:.3f}; at that cost {others}, random {mt['random_matched_accuracy']:.3f}")
    if not from_file:
        ctx.echo("area under the accuracy-vs-cost hull over [0, 1] (descriptive): "
                 + ", ".join(f"{k} {v:.3f}" for k, v in m["auc"].items()))
        lo, hi = ctx.load_config().roro.eval.cost_range
        for key, what in (("chain_range_auc", "chain-exact"), ("range_auc", "outcome")):
            if m.get(key):
                ctx.echo(f"mean {what} accuracy of the hull over cost [{lo:g}, {hi:g}] (n/a: no points of its own at "
                         "both ends): " + ", ".join(f"{k} {_num(v)}" for k, v in m[key].items()))
        jt = m.get("judge_test") or {}
        if jt:
            cats = ", ".join(f"{k[len('acc_'):]} {jt[k]:.3f} (n={jt['n_' + k[len('acc_'):]]:.0f})" for k in sorted(jt)
                             if k.startswith("acc_"))
            ctx.echo(f"kept Judge on test pairs: pairwise accuracy {jt['pairwise_acc']:.3f} ({cats})")


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


COMMANDS = (
    Command("roro-rubricor-judge", roro_rubricor_judge, stage="roro_rubricor_judge"),
    Command("roro-eval", roro_eval, stage="roro_eval"),
)
