"""RoRo commands for the ``rubricflow`` CLI (registered by flows/cli.py through ``register(app)``).

* ``rubricflow roro-models``          train the SLM and the LRM (tiny profile) / check the real ones
* ``rubricflow roro-trajectories``    routing trajectories from diverse policies
* ``rubricflow roro-pairs``           preference pairs (outcome, cost, process)
* ``rubricflow roro-rubricor-judge``  Rubricor-Judge alternation; held-out pairwise accuracy per phase
* ``rubricflow roro-router``          GRPO routers (RoRo and outcome-only) over the cost-weight sweep
* ``rubricflow route-eval``           accuracy vs LRM cost on held-out problems: prints the table, writes the curve
"""

from __future__ import annotations

import json
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    from flows.cli import load_cfg, run_stage

    @app.command("roro-models")
    def roro_models():
        """Train the small and large step models (tiny Qwen2, SFT on step-by-step arithmetic)."""
        from rubricflow.roro.stages import models_stage

        run_stage(models_stage)

    @app.command("roro-trajectories")
    def roro_trajectories():
        """Route train/val problems with all-SLM, all-LRM, random and uncertainty-threshold policies."""
        from rubricflow.roro.stages import trajectories_stage

        run_stage(trajectories_stage)

    @app.command("roro-pairs")
    def roro_pairs():
        """Build preference pairs by outcome, then LRM cost, then process quality."""
        from rubricflow.roro.stages import pairs_stage

        run_stage(pairs_stage)

    @app.command("roro-rubricor-judge")
    def roro_rubricor_judge():
        """Alternate Judge and Rubricor rejection-sampling fine-tuning; print held-out pairwise accuracy."""
        from rubricflow.roro.stages import rubricor_judge_stage

        m = run_stage(rubricor_judge_stage)
        for r in m.get("rounds", []):
            typer.echo(f"round {r['round']} {r['phase']:>8}: held-out pairwise accuracy {r['heldout_pairwise_acc']:.3f}")

    @app.command("roro-router")
    def roro_router():
        """GRPO-train the RoRo and outcome-only routers at every swept cost weight."""
        from rubricflow.roro.stages import router_stage

        run_stage(router_stage)

    @app.command("route-eval")
    def route_eval(
        from_file: Annotated[bool, typer.Option("--from-file", help="Print the last saved table instead of evaluating.")] = False,
    ):
        """Evaluate routers and baselines on held-out problems; print the accuracy-vs-LRM-cost table."""
        from rubricflow.roro.evaluate import format_table

        if from_file:
            from rubricflow.roro.pipeline import eval_dir
            from rubricflow.roro.stages import _roro

            path = eval_dir(_roro(load_cfg())) / "table.json"
            if not path.exists():
                typer.echo(f"error: {path} not found; run `rubricflow route-eval` first", err=True)
                raise typer.Exit(1)
            saved = json.loads(path.read_text())
            rows, matched = saved["rows"], saved["matched"]
        else:
            from rubricflow.roro.stages import eval_stage

            m = run_stage(eval_stage)
            rows, matched = m["rows"], m["matched"]
        typer.echo(format_table(rows))
        for mt in matched:
            typer.echo(
                f"cost weight {mt['cost_weight']:g}: RoRo {mt['roro_accuracy']:.3f} at LRM cost "
                f"{mt['roro_lrm_cost_frac']:.3f}; at that cost outcome-only {mt['outcome-only_accuracy_at_cost']:.3f}, "
                f"threshold {mt['threshold_accuracy_at_cost']:.3f}, random {mt['random_matched_accuracy']:.3f}"
            )
