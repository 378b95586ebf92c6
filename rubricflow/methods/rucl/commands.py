"""RuCL's extra CLI command: ``rubricflow judge-agreement`` (the evaluation is the kernel's
``rubricflow.judge.agreement``; the rubrics the labels name are RuCL's pool, ``rubrics.default_pool_path``).

* ``rubricflow judge-agreement --labels L.jsonl``  judge every line of a labelled set with the configured judge
  (``judge`` section; ``--set judge.backend=openai`` picks another) and report per-rubric agreement and Cohen's
  kappa against the labels: printed, written to ``--out`` and logged to MLflow (metrics, the labelled set as an
  evaluation input, the report as ``judge_agreement.json``); more failed judgments than ``judge.max_failed_frac``
  over the whole set (however small), or none compared, is one error line and exit 1, with no report;
* ``rubricflow judge-agreement --write-labels L.jsonl``  make a labelled set instead: probe responses (gold, one
  wrong step, bare answer, wrong answer) of ``--n`` problems of ``--split``, labelled by the programmatic judge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

from rubricflow.data.schema import read_dataset
from rubricflow.judge.agreement import (
    KINDS,
    evaluate_agreement,
    log_agreement,
    probe_requests,
    read_labelled,
    write_labelled,
)
from rubricflow.judge.errors import JudgeError
from rubricflow.judge.factory import make_judge
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.methods.rucl.rubrics.pool import load_default_pool, load_pool
from rubricflow.pipeline.commands import Command, CommandContext, CommandError, Opt
from rubricflow.tracking import stage_run
from rubricflow.util.io import write_json


def _pool(cfg, rubrics: Path | None) -> dict:
    pool = load_pool(rubrics) if rubrics else load_default_pool(cfg.rubrics.default_pool_path)
    return {r.id: r for r in pool.rubrics}


def judge_agreement(
    ctx: CommandContext,
    labels: Annotated[Optional[Path], Opt("Labelled set (JSONL) to judge and compare with.")] = None,
    rubrics: Annotated[Optional[Path], Opt(
        "Rubric pool or tiers file the labels name (default: rubrics.default_pool_path).")] = None,
    out: Annotated[Path, Opt("Report (JSON) with the judgments.")] = Path("reports/judge_agreement.json"),
    write_labels: Annotated[Optional[Path], Opt(
        "Write a labelled set here instead (probe responses labelled by the programmatic judge).")] = None,
    data: Annotated[Optional[Path], Opt("--write-labels: data set folder (default: data.out_dir).")] = None,
    split: Annotated[str, Opt("--write-labels: split of the problems.")] = "calib",
    n: Annotated[int, Opt("--write-labels: problems (each gets every probe response).")] = 8,
):
    """Judge agreement: per-rubric agreement and Cohen's kappa of the configured judge against reference labels,
    logged to MLflow (or, with --write-labels, make a labelled set from the programmatic judge)."""
    if (labels is None) == (write_labels is None):
        raise CommandError("give exactly one of --labels (evaluate) and --write-labels (make a labelled set)", code=2)
    cfg = ctx.load_config()
    try:
        pool = _pool(cfg, rubrics)
        if write_labels is not None:
            samples = read_dataset(data or cfg.data.out_dir, split=split)[:n]
            if not samples:
                raise ValueError(f"{data or cfg.data.out_dir}: split {split!r} is empty")
            usable = [r for r in pool.values() if r.check]
            reqs = probe_requests(samples, list(KINDS), usable)
            ref = ProgrammaticJudge(applicability=cfg.judge.applicability).judge(reqs)
            written = write_labelled(write_labels, reqs, ref)
            ctx.echo(f"wrote {written} labelled responses ({len(samples)} problems, kinds {', '.join(KINDS)} where "
                     f"the problem allows them, {len(usable)} rubrics) to {write_labels}")
            return
        requests, reference = read_labelled(labels, pool)
        judge = make_judge(cfg.judge, ctx.secret_resolver)
        report = evaluate_agreement(judge, requests, reference, max_failed_frac=cfg.judge.max_failed_frac)
    except (FileNotFoundError, ValueError, JudgeError) as e:
        raise CommandError(str(e)) from None
    write_json(out, report, default=str)
    if ctx.track:
        with stage_run("judge_agreement", experiment=cfg.tracking.experiment, tracking_uri=cfg.tracking.tracking_uri,
                       params={"judge": cfg.judge.essential_dump(), "labels": str(labels)}) as run:
            log_agreement(run, report, labels)
            report["mlflow_run_id"] = run.run_id
    o = report["overall"]
    ctx.echo(f"judge {report['judge']} on {labels}: {report['n_requests']} responses, statuses "
             f"{report['statuses']}; agree {o['agree']}, kappa {o['kappa']} over {o['n']} verdicts")
    for rid, row in report["agreement"].items():
        ctx.echo(f"  {rid}: n={row['n']} agree={row['agree']} majority={row['majority']} kappa={row['kappa']}")
    ctx.echo(json.dumps({"report": str(out), "mlflow_run_id": report.get("mlflow_run_id")}))


COMMANDS = (Command("judge-agreement", judge_agreement),)
