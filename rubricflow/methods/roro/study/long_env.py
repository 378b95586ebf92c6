"""What the long-chain environment gives before any router or Judge is trained, per environment seed: the SLM's
error rate and uncertainty AUC per step type, the accuracy and cost of fixed routing rules (the uncertainty
thresholds, the formulation-aware rule, all-SLM, all-LRM) and the pair categories the pair builder finds.

``python -m rubricflow.methods.roro.study.long_env --seeds 101,202 > reports/studies/roro_long_environment.md``
(the environment of ``LONG_ENV`` in ``study/specs.py``; nothing here is trained or chosen).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.env.routing import ConstantPolicy, ThresholdPolicy
from rubricflow.methods.roro.env.step_models import make_env
from rubricflow.methods.roro.env.trajectories import _auc, run_trajectories
from rubricflow.methods.roro.judge.pairs import CATEGORIES, run_pairs
from rubricflow.methods.roro.study.specs import LONG_ENV
from rubricflow.pipeline.stage import apply_overrides

THRESHOLDS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6)


class FormulationAware:
    """Calls the LRM on every formulation step, and on a compute step whose uncertainty exceeds ``threshold``: the
    rule the environment is built to reward (a router with the step-index feature can represent it)."""

    def __init__(self, threshold: float, formulate_steps: int, step_norm: float):
        self.threshold, self.formulate, self.step_norm = threshold, formulate_steps, step_norm
        self.name = f"formulation+{threshold:g}"

    def decide(self, states: torch.Tensor) -> list[int]:
        return [int(round(s[4] * self.step_norm) < self.formulate or s[0] > self.threshold) for s in states.tolist()]


def roro_config(overrides: dict[str, object]) -> RoRoConfig:
    """The ``roro`` section's defaults with dotted ``roro.*`` overrides applied (the study's variant keys)."""
    if bad := [k for k in overrides if not k.startswith("roro.")]:
        raise ValueError(f"overrides {bad}: expected roro.* keys")
    return apply_overrides(RoRoConfig(), {k.removeprefix("roro."): v for k, v in overrides.items()})


def describe(seed: int, split: str = "val") -> dict:
    """One environment seed: step statistics on the train + val routes of all-SLM, the rules on ``split``, the
    pair categories of the train + val routes."""
    with tempfile.TemporaryDirectory() as tmp:
        over = {**LONG_ENV, "roro.scripted.seed": seed, "roro.task.seed": seed, "roro.data_dir": tmp}
        rc = roro_config(over)
        probs = problems(rc)
        env = make_env(rc)
        steps = [s for t in env.rollout(probs["train"] + probs["val"], ConstantPolicy(0)) for s in t.steps[:-1]]
        by_type = {"formulation": [s for s in steps if s.index < rc.scripted.formulate_steps],
                   "compute": [s for s in steps if s.index >= rc.scripted.formulate_steps]}
        stats = {k: {"error": sum(s.slm_correct is False for s in v) / max(1, len(v)),
                     "auc": _auc([s.slm_uncertainty for s in v if s.slm_correct is False],
                                 [s.slm_uncertainty for s in v if s.slm_correct is True])}
                 for k, v in by_type.items()}
        ev = probs[split]
        all_lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(ev, ConstantPolicy(1))}
        rules = [ConstantPolicy(0), ConstantPolicy(1), *(ThresholdPolicy(t) for t in THRESHOLDS),
                 *(FormulationAware(t, rc.scripted.formulate_steps, rc.steps.step_norm) for t in (0.4, 0.6, 1.0))]
        points = {}
        for pol in rules:
            routes = env.rollout(ev, pol)
            points[pol.name] = {
                "cost": sum(t.lrm_tokens / all_lrm[t.problem_id] for t in routes) / len(routes),
                "chain": sum(bool(t.chain_exact) for t in routes) / len(routes),
                "outcome": sum(t.outcome for t in routes) / len(routes)}
        t0 = time.perf_counter()
        tr = run_trajectories(rc)
        pc = run_pairs(rc)
        pairs = {f"{s}_{c}": pc.get(f"{s}_{c}", 0) for s in ("train", "val") for c in CATEGORIES}
        return {"seed": seed, "n_eval": len(ev), "split": split, "steps": stats, "points": points,
                "routes": tr["n_unique"], "pairs": pairs, "pairs_s": time.perf_counter() - t0}


def render(rows: list[dict]) -> str:
    names = list(rows[0]["points"])
    out = ["# RoRo: the long-chain environment before training (`LONG_ENV`, `roro.scripted` defaults)", "",
           "Per environment seed (`roro.scripted.seed` = `roro.task.seed`, as a study unit sets them): the SLM's "
           "step statistics on the all-SLM routes of the train + val problems; fixed routing rules on the "
           f"{rows[0]['n_eval']} {rows[0]['split']} problems (LRM cost as a fraction of the all-LRM cost / chain-exact "
           "accuracy / outcome accuracy); the routes the collection policies take on train + val and the pairs "
           "built from them. `formulation+t`: call the LRM on the formulation steps, and on a compute step whose "
           "uncertainty exceeds t. Nothing here is trained or chosen.", "",
           "Command: `python -m rubricflow.methods.roro.study.long_env --seeds "
           + ",".join(str(r["seed"]) for r in rows) + "`.", "",
           "## SLM steps", "",
           "| seed | formulation error | formulation uncertainty AUC | compute error | compute uncertainty AUC |",
           "|---|---|---|---|---|"]
    for r in rows:
        f, c = r["steps"]["formulation"], r["steps"]["compute"]
        out.append(f"| {r['seed']} | {f['error']:.3f} | {f['auc']:.3f} | {c['error']:.3f} | {c['auc']:.3f} |")
    out += ["", "## Fixed rules: cost / chain-exact / outcome", "", "| rule | " + " | ".join(
        str(r["seed"]) for r in rows) + " |", "|---" * (len(rows) + 1) + "|"]
    for n in names:
        out.append(f"| {n} | " + " | ".join(
            "{cost:.2f} / {chain:.2f} / {outcome:.2f}".format(**r["points"][n]) for r in rows) + " |")
    out += ["", "## Routes and pairs (train / val)", "", "| seed | routes | " + " | ".join(CATEGORIES) + " |",
            "|---" * (len(CATEGORIES) + 2) + "|"]
    for r in rows:
        out.append(f"| {r['seed']} | {r['routes']} | " + " | ".join(
            f"{r['pairs'][f'train_{c}']} / {r['pairs'][f'val_{c}']}" for c in CATEGORIES) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="101,202,303,404,505", help="Comma-separated environment seeds.")
    ap.add_argument("--split", default="val", choices=("train", "val"), help="Problems the rules are measured on.")
    args = ap.parse_args(argv)
    print(render([describe(int(s), args.split) for s in args.seeds.split(",")]), end="")


if __name__ == "__main__":
    main()
