"""DeltaRubric commands for the ``rubricflow`` CLI (registered by flows/cli.py through ``register(app)``).

* ``rubricflow deltarubric-pairs``  synthetic preference pairs + data gate
* ``rubricflow deltarubric-sft``    warm start (tiny base model built here on the tiny profile)
* ``rubricflow deltarubric-train``  multi-role GRPO (planner + verifier, decoupled advantages)
* ``rubricflow deltarubric-eval``   judge tables of the SFT and trained policies (synthetic test + benchmarks)
* ``rubricflow eval-judge``         judge table of any policy directories on any pair directories
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    from flows.cli import load_cfg, run_stage

    @app.command("deltarubric-pairs")
    def deltarubric_pairs():
        """Generate synthetic preference pairs (decisive and partial visual errors) and run the pair data gate."""
        from rubricflow.deltarubric.stages import pairs_stage

        run_stage(pairs_stage)

    @app.command("deltarubric-sft")
    def deltarubric_sft():
        """Warm-start the shared planner/verifier policy on templated checklists and verdicts from facts."""
        from rubricflow.deltarubric.stages import sft_stage

        run_stage(sft_stage)

    @app.command("deltarubric-train")
    def deltarubric_train():
        """Multi-role GRPO: N checklists x M guided verdicts per pair, decoupled per-role advantages."""
        from rubricflow.deltarubric.stages import train_stage

        run_stage(train_stage)

    @app.command("deltarubric-eval")
    def deltarubric_eval():
        """Accuracy with no rubric / static rubric / DeltaRubric checklists, before (SFT) and after GRPO."""
        from rubricflow.deltarubric.stages import eval_stage

        run_stage(eval_stage)

    @app.command("eval-judge")
    def eval_judge(
        model: Annotated[list[Path], typer.Option(help="Policy directory (repeatable); default: SFT and GRPO outputs.")] = [],
        pairs: Annotated[list[Path], typer.Option(help="Pair directory (repeatable); default: the synthetic pairs.")] = [],
        split: Annotated[Optional[str], typer.Option(help="Only this split (default: test for the synthetic pairs, all for others).")] = None,
        limit: Annotated[int, typer.Option(help="Pairs per set (0 = all).")] = 0,
        mode: Annotated[list[str], typer.Option(help="Judge modes: no_rubric, static, deltarubric, oracle (repeatable).")] = [],
        out: Annotated[Optional[Path], typer.Option(help="Also write the tables as json here.")] = None,
    ):
        """Print verifier accuracy per judge mode (and format violations) for policies x pair sets."""
        from rubricflow.deltarubric.data import PairDataError
        from rubricflow.deltarubric.evaluate import MODES, format_table
        from rubricflow.deltarubric.stages import judge_tables, section
        from rubricflow.stages import write_json

        cfg = load_cfg()
        dr = section(cfg)
        bad = [m for m in mode if m not in MODES]
        if bad:
            typer.echo(f"error: --mode {bad[0]!r}: expected one of {MODES}", err=True)
            raise typer.Exit(2)
        models = {p.name: str(p) for p in model} or {"sft": dr.sft.out_dir, "grpo": dr.train.out_dir}
        default_pairs = Path(dr.pairs.out_dir)
        sets = {}
        for p in pairs or [default_pairs]:
            sp = split if split is not None else ("test" if p == default_pairs else None)
            sets[p.name] = (str(p), sp, limit)
        modes = tuple(mode) or ("no_rubric", "static", "deltarubric", "oracle")
        try:
            tables = judge_tables(cfg, models, sets, modes)
        except (PairDataError, FileNotFoundError, ValueError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(format_table(tables))
        if out:
            write_json(out, tables)
