"""DeltaRubric's lines of the run summary and its CLI commands ``rubricflow eval-judge`` and
``rubricflow checklist-room``."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Optional

from pydantic import ValidationError

from rubricflow.data.pairs import PairDataError
from rubricflow.methods.deltarubric.modes import COMPARED_MODES, MODES
from rubricflow.pipeline.commands import Command, CommandContext, CommandError, Opt
from rubricflow.pipeline.summary import load_report
from rubricflow.util.io import write_json


def summary_lines(r: Path) -> list[str]:
    m = load_report(r / "deltarubric_eval.json")
    if not m:
        return []
    out = []
    order = COMPARED_MODES
    sets = sorted((k for k, v in m.items() if isinstance(v, dict)), key=lambda k: (not k.startswith("sft/"), k))
    for key in sets:
        accs = m[key]
        modes = [k for k in order if k in accs] + sorted(
            k for k in accs if k not in order and not k.endswith(("_format_violation", "_separating", "_deciding")))
        sep = accs.get("deltarubric_separating")
        line = (f"{'deltarubric' if not out else '':<12}{key}: " + ", ".join(f"{k} {accs[k]:.1%}" for k in modes)
                + " (pair accuracy)" + ("" if sep is None else f"; separating checklists {sep:.1%}"))
        dec = accs.get("deltarubric_deciding")
        if dec is not None:  # does the planner have something to choose (issue 39)
            gap = accs["oracle"] - accs["deltarubric"] if "oracle" in accs and "deltarubric" in accs else None
            line += f", deciding against the facts {dec:.1%}" + ("" if gap is None else f"; oracle gap {gap:+.1%}")
        out.append(line)
    return out


def eval_judge(
    ctx: CommandContext,
    model: Annotated[list[Path], Opt("Policy directory (repeatable); default: SFT and GRPO outputs.")] = [],
    pairs: Annotated[list[Path], Opt("Pair directory (repeatable); default: the synthetic pairs.")] = [],
    split: Annotated[Optional[str], Opt(
        "Only this split (default: test for the synthetic pairs, all for others).")] = None,
    limit: Annotated[int, Opt("Pairs per set (0 = all).")] = 0,
    mode: Annotated[list[str], Opt(f"Judge modes: {', '.join(MODES)} (repeatable; default: "
                                   f"{', '.join(COMPARED_MODES)}).")] = [],
    out: Annotated[Optional[Path], Opt("Also write the tables as json here.")] = None,
) -> None:
    """Print verifier accuracy per judge mode (and format violations) for policies x pair sets."""
    from rubricflow.methods.deltarubric.evaluate import format_table, judge_tables  # evaluate loads torch

    cfg = ctx.load_config()
    dr = cfg.deltarubric
    bad = [m for m in mode if m not in MODES]
    if bad:
        raise CommandError(f"--mode {bad[0]!r}: expected one of {MODES}", code=2)
    models = {p.name: str(p) for p in model} or {"sft": dr.sft.out_dir, "grpo": dr.train.out_dir}
    default_pairs = Path(dr.pairs.out_dir)
    sets = {}
    for p in pairs or [default_pairs]:
        sp = split if split is not None else ("test" if p == default_pairs else None)
        sets[p.name] = (str(p), sp, limit)
    try:
        tables = judge_tables(dr, cfg.models, cfg.generation, models, sets, tuple(mode) or COMPARED_MODES)
    except (PairDataError, FileNotFoundError, ValueError) as e:
        raise CommandError(str(e)) from None
    ctx.echo(format_table(tables))
    if out:
        write_json(out, tables)


def checklist_room_cmd(
    ctx: CommandContext,
    form: Annotated[Optional[str], Opt("Pair form, narrow or wide (default: deltarubric.pairs.form).")] = None,
    keys: Annotated[Optional[int], Opt("Perception keys per wide image (default: deltarubric.pairs.n_keys).")] = None,
    confounds: Annotated[Optional[int], Opt("Shared misreadings per wide partial pair (default: "
                                            "deltarubric.pairs.confounds).")] = None,
    out: Annotated[Optional[Path], Opt("Also write the shares as json here.")] = None,
) -> None:
    """Print how often the static-exhaustive, reference and random checklists separate the synthetic pairs of
    deltarubric.pairs when executed against the facts: does the planner have something to choose (no model; the
    pairs are generated in a temporary folder)."""
    from rubricflow.methods.deltarubric.config import PairsConfig
    from rubricflow.methods.deltarubric.planning import checklist_room, format_room
    from rubricflow.methods.deltarubric.synthetic import build_pairs

    given = {k: v for k, v in {"form": form, "n_keys": keys, "confounds": confounds}.items() if v is not None}
    try:
        p = PairsConfig.model_validate({**ctx.load_config().deltarubric.pairs.model_dump(), **given})
    except ValidationError as e:
        err = e.errors()[0]
        option = {"n_keys": "keys"}.get(str(err["loc"][0]), err["loc"][0])
        raise CommandError(f"checklist-room --{option}: {err['msg']}", code=2) from None
    with tempfile.TemporaryDirectory() as tmp:
        pairs = build_pairs(tmp, list(p.tasks), {"train": p.train, "val": p.val, "test": p.test}, p.seed,
                            p.image_size, p.partial_frac, p.form, p.n_keys, p.confounds)
    room = checklist_room(pairs)
    shape = f", {p.n_keys} keys, {p.confounds} confounds" if p.form == "wide" else ""
    ctx.echo(f"{p.form} pairs ({', '.join(p.tasks)}; seed {p.seed}{shape}): checklists executed against the facts, "
             "% of pairs separated / separated toward the preferred response")
    ctx.echo(format_room(room))
    if out:
        write_json(out, room)


COMMANDS = (Command("eval-judge", eval_judge), Command("checklist-room", checklist_room_cmd))
