"""Are the Rubricor's criterion families what limits RoRo's Judge? The exact-reader ceiling of the families on the
process pairs, before any Rubricor or Judge is trained.

The dose-response (``rubricflow study roro_judge_dose``) found the process-pair accuracy a process score needs before
routers trained on it beat outcome-only; the warm Rubricor's rubrics, read exactly by code, stayed below it. That is
either a limit of the four criterion families the tiny Rubricor fills (``judge.prompts.FAMILIES``) or of the
weights and parameters it writes into them. This separates the two, on the process pairs of the main pipeline's
routes (``dvc repro roro_pairs``) or of routes rebuilt for other problem draws (``--task-seeds``):

* **one criterion alone:** each family with each of its parameters, read literally (``prompts.literal_satisfied``),
  as the whole rubric: train and val process-pair accuracy (``pair_accuracy``: ties 0.5);
* **the best static rubric:** per family the parameter best on train alone, then the weights (a grid) best on train;
  its val accuracy is what one rubric, the same for every problem, reaches when an exact reader reads it. A
  query-specific rubric may do better; this is a lower bound on the families' ceiling;
* **candidate families** (``prompts.EXTRA_FAMILIES``, which ``rubricor_judge.families: six`` adds): ``no call on a
  sure step`` (no LRM step where the SLM's uncertainty digit is at most ``s``: a wasted call is an LRM call where the
  SLM was right, and the marks show the SLM's uncertainty there) and ``SLM steps are right`` (every step the SLM wrote
  is right arithmetic and starts from the previous result; what ``steps are right`` checks, restricted to the SLM's
  steps: ``prompts.visible_slm_errors``); the best static
  rubric over the families plus these, and plus graded versions of both (``GRADED``: one minus the share of steps
  that break the criterion, what a judgment's graded ``score`` could carry);
* **what the Judge does not see:** the same rubric search with the true accepted-error count (a reader who also
  read the problem: an SLM step that misreads an operand is right arithmetic, invisible without it), as a bound.

``python -m rubricflow.methods.roro.study.family_ceiling [--task-seeds 7,8,9] > reports/studies/roro_family_ceiling.md``
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from rubricflow.methods.roro.env.routing import Trajectory
from rubricflow.methods.roro.env.oracles import process_pairs
from rubricflow.methods.roro.judge.pairs import Pair
from rubricflow.methods.roro.judge.pairwise import pair_accuracy
from rubricflow.methods.roro.judge.prompts import (EXTRA_FAMILIES, FAMILIES, literal_satisfied, sure_calls,
                                                   visible_slm_errors)

Reader = Callable[[Trajectory], float]
WEIGHTS = (0.0, 0.25, 0.5, 1.0)
PARAMS = {"risky step to LRM": ("k", range(1, 7)), "uncertain steps to LRM": ("d", range(0, 9)),
          "few LRM steps": ("m", range(0, 4)), "steps are right": (None, (0,)),
          "no call on a sure step": ("s", range(0, 9)), "SLM steps are right": (None, (0,))}


def family_reader(name: str, value: int) -> Reader:
    key = PARAMS[name][0]
    params = {key: value} if key else {}
    return lambda t: float(literal_satisfied(name, params, t))


CANDIDATES = {n: None for n, _ in EXTRA_FAMILIES}  # read by prompts.literal_satisfied, as a Judge's rubric names them
GRADED: dict[str, tuple[str | None, Sequence[int], Callable[[Trajectory, int], float]]] = {
    "no call on a sure step (graded)": ("s", range(0, 9), lambda t, s: 1.0 - sure_calls(t, s) / len(t.steps)),
    "SLM steps are right (graded)": (None, (0,), lambda t, _: 1.0 - visible_slm_errors(t) / len(t.steps)),
}

# a process pair's routes are checkable, so Trajectory.accepted_slm_errors is a count there
HIDDEN = {"no accepted SLM error (reads the problem)": (None, (0,), lambda t, _: float(t.accepted_slm_errors == 0)),
          "accepted SLM errors (reads the problem, graded)": (None, (0,), lambda t, _: 1.0 - (
              t.accepted_slm_errors / len(t.steps)))}


def accuracy(pairs: Sequence[Pair], trajs: Sequence[Trajectory], reader: Reader) -> float:
    idx = {i for p in pairs for i in (p.chosen, p.rejected)}
    return pair_accuracy(list(pairs), list(trajs), {i: reader(trajs[i]) for i in idx})["pairwise_acc"]


def _options(families: dict) -> dict[str, list[tuple[int, Reader]]]:
    out = {}
    for name, spec in families.items():
        if name in PARAMS:
            out[name] = [(v, family_reader(name, v)) for v in PARAMS[name][1]]
        else:
            _, values, fn = spec
            out[name] = [(v, (lambda fn, v: lambda t: fn(t, v))(fn, v)) for v in values]
    return out


def best_static(train: Sequence[Pair], val: Sequence[Pair], trajs: Sequence[Trajectory], families: dict) -> dict:
    """Per family the parameter best on ``train`` alone, then the weight grid best on ``train`` (the first best in
    grid order wins a tie); its accuracy on ``train`` and ``val``."""
    opts = _options(families)
    pick = {n: max(o, key=lambda vr: accuracy(train, trajs, vr[1])) for n, o in opts.items()}
    names = list(pick)
    cache = {n: {i: pick[n][1](trajs[i]) for p in [*train, *val] for i in (p.chosen, p.rejected)} for n in names}
    best = None
    for ws in itertools.product(WEIGHTS, repeat=len(names)):
        if not any(ws):
            continue
        scores = {i: sum(w * cache[n][i] for n, w in zip(names, ws)) for i in cache[names[0]]}
        acc = pair_accuracy(list(train), list(trajs), scores)["pairwise_acc"]
        if best is None or acc > best[0] + 1e-12:
            best = (acc, ws, scores)
    acc, ws, scores = best
    return {"params": {n: pick[n][0] for n in names}, "weights": dict(zip(names, ws)), "train": acc,
            "val": pair_accuracy(list(val), list(trajs), scores)["pairwise_acc"]}


def ceiling(trajs: Sequence[Trajectory], pairs: dict[str, list[Pair]]) -> dict:
    train, val = process_pairs(pairs["train"], trajs), process_pairs(pairs["val"], trajs)
    single = []
    for name, opts in _options({**{n: None for n, _ in FAMILIES}, **CANDIDATES, **GRADED, **HIDDEN}).items():
        for v, r in opts:
            single.append({"criterion": name, "param": v, "in_families": name in dict(FAMILIES),
                           "train": accuracy(train, trajs, r), "val": accuracy(val, trajs, r)})
    base = {n: None for n, _ in FAMILIES}
    return {"n_train": len(train), "n_val": len(val), "single": single,
            "static_families": best_static(train, val, trajs, base),
            "static_with_candidates": best_static(train, val, trajs, {**base, **CANDIDATES}),
            "static_with_graded": best_static(train, val, trajs, {**base, **CANDIDATES, **GRADED}),
            "static_with_problem": best_static(train, val, trajs, {**base, **HIDDEN})}


def load(task_seed: int | None) -> tuple[str, list[Trajectory], dict[str, list[Pair]]]:
    """The main pipeline's routes and pairs (``task_seed`` None), or routes and pairs rebuilt in a temporary
    directory for the problems of ``roro.task.seed = task_seed`` with the main pipeline's step models (their step
    cache is copied in, so only new prefixes are generated). The ``roro`` section is its code defaults, the tiny
    profile's task, routes and pairs (params.yaml's tiny profile changes only the Judge's warm start there)."""
    from rubricflow.methods.roro.config import RoRoConfig
    from rubricflow.methods.roro.env.trajectories import read_trajectories, run_trajectories
    from rubricflow.methods.roro.judge.pairs import read_trajectory_pairs, run_pairs
    from rubricflow.methods.roro.paths import cache_path, pairs_path, trajectories_path
    from rubricflow.pipeline.stage import apply_overrides

    rc = RoRoConfig()
    if task_seed is None:
        for p in (trajectories_path(rc), pairs_path(rc)):
            if not p.exists():
                raise FileNotFoundError(f"{p}: not found; run `dvc repro roro_pairs` first")
        return "main pipeline", read_trajectories(trajectories_path(rc)), read_trajectory_pairs(pairs_path(rc))
    with tempfile.TemporaryDirectory() as tmp:
        seeded = apply_overrides(rc, {"task.seed": task_seed, "data_dir": tmp})
        if cache_path(rc).exists():
            cache_path(seeded).write_bytes(cache_path(rc).read_bytes())
        run_trajectories(seeded)
        run_pairs(seeded)
        return (f"task seed {task_seed}", read_trajectories(trajectories_path(seeded)),
                read_trajectory_pairs(pairs_path(seeded)))


def _rubric(r: dict) -> str:
    key = {n: spec[0] for n, spec in {**PARAMS, **GRADED, **HIDDEN}.items()}
    return "; ".join(f"{n} {w:g}" + (f" ({key[n]}={r['params'][n]})" if key[n] else "")
                     for n, w in r["weights"].items() if w)


def render(rows: list[dict]) -> str:
    out = ["# RoRo: the exact-reader ceiling of the criterion families on the process pairs", "",
           "Process-pair accuracy (ties 0.5) of rubrics read exactly by code, before any Rubricor or Judge is "
           "trained (`rubricflow.methods.roro.study.family_ceiling`). Parameters and weights are chosen on the train "
           "process pairs; val is read once. The dose-response study's bar: a process score ordering 0.7 of the val "
           "process pairs gave routers that beat outcome-only (`reports/studies/roro_judge_dose-5seeds.md`).", "",
           "Command: `python -m rubricflow.methods.roro.study.family_ceiling --task-seeds "
           + ",".join(r["source"].removeprefix("task seed ") for r in rows if r["source"] != "main pipeline")
           + "` (and the main pipeline's pairs).", "",
           "## The best static rubric (one rubric for every problem)", "",
           "| routes | process pairs train / val | four families: train / val | + two candidate families: train / val "
           "| + their graded versions: train / val | four + the problem read (bound): train / val |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['source']} | {r['n_train']} / {r['n_val']} | "
                   + " | ".join(f"{r[k]['train']:.3f} / {r[k]['val']:.3f}" for k in
                                ("static_families", "static_with_candidates", "static_with_graded",
                                 "static_with_problem")) + " |")
    fresh = [r for r in rows if r["source"] != "main pipeline"]
    if len(fresh) >= 2:
        from rubricflow.study.stats import t_interval

        def ci(vals):
            c = t_interval(vals)
            return f"{c['mean']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"

        val = {k: [r[k]["val"] for r in fresh] for k in ("static_families", "static_with_candidates",
                                                          "static_with_graded", "static_with_problem")}
        out += ["", f"Over the {len(fresh)} rebuilt problem draws (val; mean and 95% t-interval): four families "
                f"{ci(val['static_families'])}; with the two candidates {ci(val['static_with_candidates'])}; "
                f"with their graded versions too {ci(val['static_with_graded'])}; with the problem read "
                f"{ci(val['static_with_problem'])}. Paired, the two candidates minus four families "
                + ci([b - a for a, b in zip(val["static_families"], val["static_with_candidates"])])
                + f"; draws at or above the 0.7 bar: four families {sum(v >= 0.7 for v in val['static_families'])}"
                f" of {len(fresh)}, with the candidates {sum(v >= 0.7 for v in val['static_with_candidates'])}."]
    out += ["", "The rubrics chosen on train:", ""]
    for r in rows:
        for k, what in (("static_families", "four families"), ("static_with_candidates", "with the candidates"),
                        ("static_with_graded", "with graded candidates"),
                        ("static_with_problem", "with the problem read")):
            out.append(f"- {r['source']}, {what}: {_rubric(r[k])}")
    out += ["", "## One criterion as the whole rubric (val process pairs; train in brackets)", "",
            "| criterion | param | in FAMILIES | " + " | ".join(r["source"] for r in rows) + " |",
            "|---|---|---|" + "---|" * len(rows)]
    for i, s in enumerate(rows[0]["single"]):
        out.append(f"| {s['criterion']} | {s['param']} | {'yes' if s['in_families'] else 'no'} | " + " | ".join(
            f"{r['single'][i]['val']:.3f} ({r['single'][i]['train']:.3f})" for r in rows) + " |")
    return "\n".join(out) + "\n"


def render_json(path: Path) -> str:
    """The report of rows written by ``--json``."""
    return render(json.loads(Path(path).read_text()))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task-seeds", default="", help="Comma-separated problem seeds to rebuild routes for, beside "
                    "the main pipeline's (empty: the main pipeline's only).")
    ap.add_argument("--json", type=Path, default=None, help="Also write the numbers here.")
    ap.add_argument("--from-json", type=Path, default=None, help="Run nothing: render the rows written by --json.")
    args = ap.parse_args(argv)
    if args.from_json:
        print(render_json(args.from_json), end="")
        return
    sources = [None] + [int(s) for s in args.task_seeds.split(",") if s]
    rows = []
    for seed in sources:
        name, trajs, pairs = load(seed)
        rows.append({"source": name, **ceiling(trajs, pairs)})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(render(rows), end="")


if __name__ == "__main__":
    main()
