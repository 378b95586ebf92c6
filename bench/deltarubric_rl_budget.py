"""DeltaRubric's RL step time on the wide pairs, per trained judge, and the budget a seed set fits (issue 39, item 4).

The issue fixes the RL budget before the runs: at least 200 steps x 8 pairs where a 5-seed set of the study fits in
90 minutes on the 2 cores, otherwise the largest that fits, stated. This script measures what a step costs: from a
warm start trained in the wide setting (``--start``, e.g. a ``deltarubric_wide_start`` start), it runs ``--steps``
GRPO steps of ``--pairs`` pairs per step for each trained judge, with the study's samples per pair (``BUDGET``: N =
M = K = 5; DeltaRubric: N checklists x M verdicts plus K no-rubric verdicts per pair; each control: N x M verdicts per
pair; the generative control with the lookup tool: N x M calls and second turns), one torch thread, in one process,
on a copy of the start. It prints the seconds per step and, against the baseline measured in the same run (the
no-rubric judge, the cheapest step), each judge's ratio; then the projected wall time of a seed set: ``seeds`` x (sum
over the trained variants of ``budget`` x s/step) / ``workers`` (units run two at a time on 2 cores), warm starts
excluded (the selection study measures them). Last line::

    deltarubric_rl step_s: <judge>=<s> ...; ratio vs no_rubric: <judge>=<x> ...; 200x8 set: <minutes> min; fits 90
    min: <steps> steps

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/deltarubric_rl_budget.py --start DIR [--steps 3 --pairs 8]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

JUDGES = ("no_rubric", "deltarubric", "reading", "generative")  # no_rubric first: the baseline
# the study's trained variants per seed and their judge (issue 39, item 5): DeltaRubric, the absolute planner reward,
# the generative and reading controls (the static-exhaustive control is the start's verifier, not trained)
VARIANT_JUDGES = ("deltarubric", "deltarubric", "generative", "reading")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", required=True, help="a warm start trained in the wide setting (a policy folder)")
    ap.add_argument("--steps", type=int, default=3, help="timed GRPO steps per judge (after one untimed step)")
    ap.add_argument("--pairs", type=int, default=8, help="pairs per step")
    ap.add_argument("--seeds", type=int, default=5, help="seeds in a set (projection)")
    ap.add_argument("--workers", type=int, default=2, help="units run at once (projection)")
    ap.add_argument("--budget", type=int, default=200, help="steps per unit (projection)")
    ap.add_argument("--minutes", type=float, default=90, help="a seed set's wall-time budget (the budget rule)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from rubricflow.config import load_config
    from rubricflow.methods.deltarubric.study_specs import WIDE_RL_TRAIN, WIDE_SETTING
    from rubricflow.methods.deltarubric.train import training_inputs, train_policy

    # the RL studies' settings (N, M, K of BUDGET; the wide setting; the policy's width is the start's own), this
    # run's pairs per step
    over = {**WIDE_SETTING, **WIDE_RL_TRAIN, "deltarubric.train.grpo.prompts_per_step": args.pairs}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for judge in JUDGES:
            start = Path(tmp) / f"start-{judge}"
            shutil.copytree(args.start, start)
            cfg = load_config(overrides={**over, "deltarubric.sft.out_dir": str(start),
                                         "deltarubric.train.judge": judge, "deltarubric.train.probe_every": 0,
                                         "deltarubric.train.grpo.steps": args.steps + 1,
                                         "deltarubric.train.out_dir": str(Path(tmp) / f"out-{judge}")})
            dr = cfg.deltarubric
            model, proc, gen, train_items, _ = training_inputs(dr, cfg.models, cfg.generation)
            stamps: list[float] = []
            train_policy(model, proc, gen, train_items, [], dr.train, Path(tmp) / f"ckpt-{judge}",
                         progress=lambda _n: stamps.append(time.perf_counter()), quoted=dr.verifier_quotes)
            seconds[judge] = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1)  # the first step untimed
            print(f"{judge}: {seconds[judge]:.1f} s/step ({args.pairs} pairs)", flush=True)
    base = seconds["no_rubric"]
    step_set = args.seeds * sum(seconds[j] for j in VARIANT_JUDGES) / args.workers  # one step of every unit of a set
    minutes = step_set * args.budget / 60
    # the budget rule (study_specs.WIDE_RL_STEPS): the most steps, a multiple of 10 and at most 200, whose timed
    # steps fill four fifths of the set's 90 minutes (the rest for the probes and evaluations not timed here)
    fits = min(200, int(0.8 * args.minutes * 60 / step_set) // 10 * 10)
    print("deltarubric_rl step_s: " + " ".join(f"{j}={s:.1f}" for j, s in seconds.items())
          + "; ratio vs no_rubric: " + " ".join(f"{j}={s / base:.2f}" for j, s in seconds.items())
          + f"; {args.budget}x{args.pairs} set: {minutes:.0f} min ({args.seeds} seeds, {args.workers} at once)"
          + f"; fits {args.minutes:g} min: {fits} steps")


if __name__ == "__main__":
    main()
