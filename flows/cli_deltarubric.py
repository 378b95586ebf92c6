"""DeltaRubric tools of the ``rubricflow`` CLI (registered by flows/cli.py through ``register(app)``; the stage
commands ``rubricflow deltarubric-pairs`` ... ``deltarubric-eval`` are generated from the manifest):

* ``rubricflow eval-judge``         judge table of any policy directories on any pair directories
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer) -> None:
    from flows.cli import load_cfg

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
        from rubricflow.methods.deltarubric.data import PairDataError
        from rubricflow.methods.deltarubric.evaluate import MODES, format_table
        from rubricflow.methods.deltarubric.stages import judge_tables
        from rubricflow.io import write_json

        cfg = load_cfg()
        dr = cfg.deltarubric
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
            tables = judge_tables(dr, cfg.models, cfg.generation, models, sets, modes)
        except (PairDataError, FileNotFoundError, ValueError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(1) from None
        typer.echo(format_table(tables))
        if out:
            write_json(out, tables)
