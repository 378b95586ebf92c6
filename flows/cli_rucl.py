"""RuCL subcommands: rubric pool, stratification, GRPO training with the curriculum, evaluation."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from flows.cli import run_stage

    @app.command("rubrics")
    def rubrics():
        """RuCL Phase I: write the generalized rubric candidate pool (default pool or a teacher in O(1) calls)."""
        from rubricflow.rubrics.stage import rubrics_stage

        run_stage(rubrics_stage)

    @app.command("stratify")
    def stratify():
        """Calibrate candidates on policy samples: coverage, pass rate, filter, keep k, foundational/advanced tiers."""
        from rubricflow.rubrics.stage import stratify_tracked

        run_stage(stratify_tracked)

    @app.command("train")
    def train():
        """RuCL Phase II: GRPO with the hybrid reward and the performance-triggered curriculum."""
        from rubricflow.rucl.train import rucl_stage

        run_stage(rucl_stage)

    @app.command("rucl-eval")
    def rucl_eval():
        """Held-out accuracy, rubric pass rates and the correct-but-flawed rate: SFT vs the RL policies."""
        from rubricflow.rucl.evaluate import rucl_eval_stage

        run_stage(rucl_eval_stage)
