"""Accuracy vs LRM cost on held-out problems: trained routers and baselines, curves, the printed table.

Every method routes every held-out problem (greedy routers, seeded random baselines averaged over repeats). A row
reports accuracy (the outcome), chain-exact accuracy (every step right, read off the checked steps; the primary
metric under ``roro.task.answer: parity``, where the outcome can be right by luck), mean LRM tokens per problem,
the LRM cost as a fraction of the all-LRM route, the LRM call rate per step and the FLOPs estimates
(``2 * params * tokens``: LRM only, and SLM + LRM).

Curves (:mod:`rubricflow.methods.roro.router.curves`, ``hull``): a method's points (LRM cost as a fraction of the
all-LRM cost, accuracy), anchored at all-SLM (cost 0) and all-LRM (cost 1), span their upper concave hull: every point
on it is achievable by routing each problem with one of two of the method's settings at random, so a setting below the
hull costs the method nothing.

Comparisons at matched cost (``curve_metrics``), over a cost range fixed before any result (``roro.eval.cost_range``):

* each trained method keeps the routers (one per swept cost weight) chosen on val by ``roro.eval.cost_weight_rule``
  (``select_cost_weights``), so each method's points aim at spanning the range;
* ``range_auc``: the mean accuracy of the hull over the range, only when the method's own points reach both ends;
* ``acc_at_cost_<pct>``: the hull at a matched cost, only where the method has points of its own on each side
  (``matched_accuracy``); otherwise n/a (None), never a chord from a far point to an end of the curve;
* ``auc`` (the area over all of [0, 1]) is descriptive, as is the random router: both are chords between points.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from pathlib import Path

from rubricflow.util.io import atomic_path, atomic_write_text, save_figure, write_json
from rubricflow.methods.roro.config import ROUTERS, TRAINED_ROUTERS, RoRoConfig, RoRoEvalConfig
from rubricflow.methods.roro.router.curves import common_range, curve_metrics, matched_accuracy, select_cost_weights
from rubricflow.methods.roro.judge.pairs import make_pairs
from rubricflow.methods.roro.judge.pairwise import pairwise_accuracy
from rubricflow.methods.roro.paths import cache_path, eval_dir, router_dir
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.router.mlp import load_router
from rubricflow.methods.roro.env.routing import (
    ConstantPolicy,
    RandomPolicy,
    RouterPolicy,
    RoutingEnv,
    ThresholdPolicy,
    Trajectory,
)
from rubricflow.methods.roro.judge.lm import load_rubric_lm
from rubricflow.methods.roro.judge.rubricor import problem_views, write_rubrics
from rubricflow.methods.roro.env.step_models import make_env
from rubricflow.methods.roro.env.task import Problem
from rubricflow.methods.roro.env.trajectories import collect_routes, dedupe

COLUMNS = ("method", "param", "accuracy", "chain_exact", "lrm_tokens", "lrm_cost_frac", "lrm_call_rate", "lrm_flops",
           "total_flops", "n")


def chain_exact_accuracy(trajs: list[Trajectory]) -> float | None:
    """Fraction of routes with every step right (``Trajectory.chain_exact``, checked on the cached steps); None when
    a route's steps are not checkable (GSM8K rows)."""
    flags = [t.chain_exact for t in trajs]
    if not flags or any(f is None for f in flags):
        return None
    return sum(flags) / len(flags)


def summarize(method: str, param: float | str | None, trajs: list[Trajectory], all_lrm_tokens: dict[str, int]) -> dict:
    n = len(trajs)
    steps = sum(len(t.steps) for t in trajs)
    return {
        "method": method,
        "param": param,
        "accuracy": sum(t.outcome for t in trajs) / n,
        "chain_exact": chain_exact_accuracy(trajs),
        "lrm_tokens": sum(t.lrm_tokens for t in trajs) / n,
        "lrm_cost_frac": sum(t.lrm_tokens / max(1, all_lrm_tokens[t.problem_id]) for t in trajs) / n,
        "lrm_call_rate": sum(t.lrm_calls for t in trajs) / max(1, steps),
        "lrm_flops": sum(t.lrm_flops for t in trajs) / n,
        "total_flops": sum(t.total_flops for t in trajs) / n,
        "n": n,
    }




def format_table(rows: list[dict]) -> str:
    head = ["method", "param", "accuracy", "chain-exact", "LRM tok/problem", "LRM cost", "LRM call rate", "LRM GFLOPs",
            "total GFLOPs"]
    body = []
    for r in rows:
        p = r.get("param")
        body.append([
            r["method"], "" if p is None else (f"{p:g}" if isinstance(p, (int, float)) else str(p)),
            f"{r['accuracy']:.3f}", "n/a" if r.get("chain_exact") is None else f"{r['chain_exact']:.3f}",
            f"{r['lrm_tokens']:.2f}", f"{r['lrm_cost_frac']:.3f}", f"{r['lrm_call_rate']:.3f}",
            f"{r['lrm_flops'] / 1e9:.4f}", f"{r['total_flops'] / 1e9:.4f}",
        ])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def write_curve(rows: list[dict], out_dir: Path) -> dict[str, Path]:
    """``curve.csv`` / ``curve.json`` (one point per row: method, lrm_tokens, accuracy; for ``dvc plots``) and
    ``curve.png`` (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    pts = [{"method": r["method"], "param": r.get("param"), "lrm_tokens": round(r["lrm_tokens"], 4),
            "lrm_cost_frac": round(r["lrm_cost_frac"], 4), "accuracy": round(r["accuracy"], 4),
            "chain_exact": None if r.get("chain_exact") is None else round(r["chain_exact"], 4)} for r in rows]
    with atomic_path(out_dir / "curve.csv") as tmp, tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(pts[0]))
        w.writeheader()
        w.writerows(pts)
    atomic_write_text(out_dir / "curve.json", json.dumps(pts, indent=1))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    styles = {"roro": ("o-", "C0"), "oracle-process": ("d-.", "C3"), "oracle-noisy": ("p-.", "C4"),
              "exact-reader": ("h-.", "C5"), "outcome-only": ("s--", "C1"),
              "threshold": ("^:", "C2"), "random": ("x:", "C7")}
    for method, (style, color) in styles.items():
        xs = sorted((r["lrm_tokens"], r["accuracy"]) for r in rows if r["method"] == method)
        if xs:
            ax.plot([x for x, _ in xs], [y for _, y in xs], style, color=color, label=method)
    for method, marker in (("all-slm", "v"), ("all-lrm", "D")):
        for r in rows:
            if r["method"] == method:
                ax.plot([r["lrm_tokens"]], [r["accuracy"]], marker, color="k", label=method)
    ax.set_xlabel("LRM tokens per problem")
    ax.set_ylabel("accuracy (held-out)")
    ax.set_title("RoRo: accuracy vs LRM cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, out_dir / "curve.png", dpi=120)
    return {"csv": out_dir / "curve.csv", "json": out_dir / "curve.json", "png": out_dir / "curve.png"}


# ----------------------------------------------------------------------------------------------------------------
# The stage


def anchor_rows(env: RoutingEnv, probs: list[Problem]) -> list[dict]:
    """The all-SLM and all-LRM rows (the ends of every accuracy-vs-cost curve)."""
    all_lrm_trajs = env.rollout(probs, ConstantPolicy(1))
    all_lrm = {t.problem_id: t.lrm_tokens for t in all_lrm_trajs}
    return [summarize("all-slm", None, env.rollout(probs, ConstantPolicy(0)), all_lrm),
            summarize("all-lrm", None, all_lrm_trajs, all_lrm)]


def baseline_rows(rc: RoRoConfig, env: RoutingEnv, test: list[Problem], all_lrm: dict[str, int],
                  methods=("threshold", "random"), seed: int | None = None) -> list[dict]:
    """The threshold and random baselines' curve points on ``test`` (random routers seeded from ``seed``, default
    ``rc.eval.seed``)."""
    ec = rc.eval
    seed = ec.seed if seed is None else seed
    rows = []
    if "threshold" in methods:
        for th in ec.thresholds:
            rows.append(summarize("threshold", th, env.rollout(test, ThresholdPolicy(th)), all_lrm))
    if "random" in methods:
        for i, rate in enumerate(ec.random_rates):
            rows.append(summarize("random", rate, env.rollout(test, RandomPolicy(rate, seed=seed + i),
                                                               repeats=ec.random_repeats), all_lrm))
    return rows


def _routers(rc: RoRoConfig):
    """``(method, meta, router)`` for each trained router in ``router_dir``."""
    paths = sorted(router_dir(rc).glob("*.pt"))
    if not paths:
        raise FileNotFoundError(f"{router_dir(rc)}: no trained routers; run `rubricflow roro-router` first")
    for path in paths:
        router, meta = load_router(path)
        yield meta.get("method") or ("roro" if meta["process_weight"] > 0 else "outcome-only"), meta, router


def kept_routers(rc: RoRoConfig, env: RoutingEnv) -> tuple[set[str] | None, dict]:
    """The routers each method is evaluated with (``rc.eval.cost_weight_rule``; None = all of them), chosen on the
    val problems, and per method the val cost of each swept weight and the weights kept."""
    if rc.eval.cost_weight_rule == "all":
        return None, {}
    val = problems(rc)["val"]
    all_lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(val, ConstantPolicy(1))}
    by: dict[str, dict[float, tuple[str, float]]] = {}
    for method, meta, router in _routers(rc):
        row = summarize(method, meta["cost_weight"], env.rollout(val, RouterPolicy(router, greedy=True)), all_lrm)
        by.setdefault(method, {})[meta["cost_weight"]] = (meta["tag"], row["lrm_cost_frac"])
    keep: set[str] = set()
    chosen = {}
    for method, weights in sorted(by.items()):
        kept = select_cost_weights({w: c for w, (_, c) in weights.items()}, *rc.eval.cost_range)
        keep |= {weights[w][0] for w in kept}
        chosen[method] = {"val_cost": {f"{w:g}": c for w, (_, c) in sorted(weights.items())}, "kept": kept}
    return keep, chosen


def router_rows(rc: RoRoConfig, env: RoutingEnv, test: list[Problem], all_lrm: dict[str, int],
                keep: set[str] | None = None) -> list[dict]:
    """The trained routers' curve points on ``test`` (greedy), one per router in ``router_dir`` (those tagged in
    ``keep`` when given: :func:`kept_routers`)."""
    rows = []
    for method, meta, router in _routers(rc):
        if keep is None or meta["tag"] in keep:
            trajs = env.rollout(test, RouterPolicy(router, greedy=True, name=meta["tag"]))
            rows.append(summarize(method, meta["cost_weight"], trajs, all_lrm))
    return rows


def method_curves(rows: list[dict], ec: RoRoEvalConfig | None = None) -> dict[str, dict]:
    """Per method with curve points: its points and :func:`curve_metrics` over ``ec``'s cost range and matched
    costs, anchored at the all-SLM and all-LRM rows; for chain-exact accuracy too (``chain_`` names, when the
    problems' steps are checkable)."""
    ec = ec or RoRoEvalConfig()
    out = {}
    for key, prefix in (("accuracy", ""), ("chain_exact", "chain_")):
        anchors = [(0.0, r[key]) for r in rows if r["method"] == "all-slm"]
        anchors += [(1.0, r[key]) for r in rows if r["method"] == "all-lrm"]
        if any(a is None for _, a in anchors):
            continue
        for m in ROUTERS:
            pts = [(min(1.0, r["lrm_cost_frac"]), r[key]) for r in rows if r["method"] == m]
            if pts and all(a is not None for _, a in pts):
                out.setdefault(m, {})[f"{prefix}points"] = pts
                out[m].update(curve_metrics(pts, anchors, ec.cost_range, ec.matched_costs, prefix))
    return out


def judge_test_accuracy(rc: RoRoConfig, env: RoutingEnv, test: list[Problem]) -> dict:
    """The kept Judge's pairwise accuracy on test pairs, overall and per category: every route (or, without
    ``trajectories.enumerate_routes``, the collection policies' routes) of the first ``rc.eval.judge_problems``
    problems of ``test`` (the evaluation split), paired by the training rules
    (``judge.pairs.make_pairs``), each problem's rubric written by the kept Rubricor, scored as in training
    (``score_mode``). A final evaluation: nothing is chosen on it."""
    probs = test[: rc.eval.judge_problems]
    if not probs:
        return {}
    rj = rc.rubricor_judge
    lms = {name: load_rubric_lm(spec, name, rj.batch_size, rj.judge_reads)
           for name, spec in (("judge", rj.judge), ("rubricor", rj.rubricor))}
    trajs = dedupe(collect_routes(rc, env, probs))  # collected as the training routes were
    pairs, counts = make_pairs(rc, trajs)
    views = problem_views(trajs)
    rubrics = write_rubrics(lms["rubricor"], views, sorted(views))
    acc = pairwise_accuracy(lms["judge"], rubrics, views, trajs, pairs, rj.score_mode, rj.score_samples,
                            rj.score_temperature, rj.seed + 7)
    return {**acc, "n_problems": len(probs), "pair_counts": counts}


def run_eval(rc: RoRoConfig, log: Callable[[str, dict], None] | None = None) -> dict:
    """Route the evaluation split (``rc.eval.split``) with the anchors, the baselines and the trained routers each
    method keeps (``cost_weight_rule``, chosen on val); at each RoRo router's cost, the other methods' accuracy
    where they have points on each side of it (else n/a) and a random router with its call rate; write the curve,
    the table and its JSON; measure the kept Judge on test pairs (when RoRo routers are trained)."""
    t0 = time.perf_counter()
    test = problems(rc)[rc.eval.split]
    env = make_env(rc, cache_path(rc))
    ec = rc.eval
    keep, chosen = kept_routers(rc, env)
    rows = anchor_rows(env, test)
    all_lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(test, ConstantPolicy(1))}
    rows += baseline_rows(rc, env, test, all_lrm, ec.baselines)
    rows += router_rows(rc, env, test, all_lrm, keep)
    anchors = [(r["lrm_cost_frac"], r["accuracy"]) for r in rows if r["method"] in ("all-slm", "all-lrm")]
    curves = method_curves(rows, ec)
    matched = []
    for j, r in enumerate([r for r in rows if r["method"] == "roro"]):
        rnd = summarize("random-matched", round(r["lrm_call_rate"], 4),
                        env.rollout(test, RandomPolicy(r["lrm_call_rate"], seed=ec.seed + 1000 + j),
                                    repeats=ec.random_repeats), all_lrm)
        matched.append({
            "cost_weight": r["param"], "roro_accuracy": r["accuracy"], "roro_lrm_cost_frac": r["lrm_cost_frac"],
            "roro_lrm_tokens": r["lrm_tokens"],
            **{f"{m}_accuracy_at_cost": matched_accuracy(c["points"], anchors, r["lrm_cost_frac"])
               for m, c in curves.items() if m != "roro"},
            "random_matched_accuracy": rnd["accuracy"], "random_matched_lrm_cost_frac": rnd["lrm_cost_frac"],
        })
        rows.append(rnd)
    paths = write_curve([r for r in rows if r["method"] != "random-matched"], eval_dir(rc))
    table = format_table(rows)
    atomic_write_text(eval_dir(rc) / "table.txt", table + "\n")
    main = next((m for m in matched if m["cost_weight"] == rc.router.cost_weight), matched[0] if matched else {})
    judge = judge_test_accuracy(rc, env, test) if "roro" in rc.router.methods else {}
    trained = {m: c["points"] for m, c in curves.items() if m in TRAINED_ROUTERS}
    out = {
        "rows": rows, "matched": matched, "split": rc.eval.split, "n_test": len(test), "source": rc.task.source,
        "answer": rc.task.answer, "main_cost_weight": rc.router.cost_weight,
        "cost_weights": chosen, "common_range": common_range(trained, *ec.cost_range),
        "auc": {m: c["auc"] for m, c in curves.items()},
        "range_auc": {m: c["range_auc"] for m, c in curves.items()},
        "chain_range_auc": {m: c["chain_range_auc"] for m, c in curves.items() if "chain_range_auc" in c},
        "roro_minus_outcome_auc": (curves["roro"]["auc"] - curves["outcome-only"]["auc"])
        if {"roro", "outcome-only"} <= set(curves) else None,
        "roro_accuracy": main.get("roro_accuracy"), "roro_lrm_cost_frac": main.get("roro_lrm_cost_frac"),
        "outcome_only_accuracy_at_roro_cost": main.get("outcome-only_accuracy_at_cost"),
        "roro_minus_outcome_at_cost": (main["roro_accuracy"] - main["outcome-only_accuracy_at_cost"])
        if main.get("outcome-only_accuracy_at_cost") is not None else None,
        "judge_test": judge,
        "plots": {k: str(v) for k, v in paths.items()}, "duration_s": time.perf_counter() - t0,
    }
    write_json(eval_dir(rc) / "table.json", {"rows": rows, "matched": matched})
    return out
