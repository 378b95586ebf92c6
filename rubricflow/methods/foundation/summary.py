"""The foundation's lines of the run summary (data, its gate, the base model, the SFT warm start) and its CLI
command that takes an argument (``rubricflow validate [DIR]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from rubricflow.pipeline.commands import Command, CommandContext, Opt
from rubricflow.pipeline.summary import fmt_acc, load_report


def summary_lines(reports: Path) -> list[str]:
    lines = []
    if (m := load_report(reports / "data.json")):
        lines.append(f"data        {m['n_samples']} samples {m.get('splits')}")
    if (m := load_report(reports / "validate.json")):
        lines.append(f"validate    {m['n_rows']} rows passed {m['expectations']} expectations")
    if (m := load_report(reports / "base_model.json")):
        lines.append(f"base model  {m.get('arch', '')} {m['params']:,} params ({m['source']})")
    if (m := load_report(reports / "sft.json")):
        lines.append(f"sft         before: {fmt_acc(m['accuracy_before'])}")
        lines.append(f"            after:  {fmt_acc(m['accuracy_after'])}")
        if m.get("majority_baseline"):
            lines.append(f"            chance: {fmt_acc(m['majority_baseline'])} (most frequent answer)")
    return lines


def validate_command(
    ctx: CommandContext,
    data_dir: Annotated[Optional[Path], Opt("Dataset directory (default: data.out_dir).", argument=True)] = None,
) -> None:
    """Great Expectations gate on a dataset; non-zero exit naming expectation, column and offending ids.

    On success the stamp is written to reports/validation/<path>.json, <path> being the folder's path relative to
    the project root (reports/validation/data/synthetic.json for data.out_dir; a folder outside the project is
    filed under _outside/<name>-<hash>). The stage report is reports/validate.json for data.out_dir (the
    pipeline's) and reports/validate/<path>.json for any other folder, so checking another folder never changes
    the pipeline's gate or report."""
    ctx.run_stage("validate", data_dir=str(data_dir) if data_dir else None)


COMMANDS = (Command("validate", validate_command, stage="validate"),)
