"""RoRo's study adapters (``study.roro``: the question asks the final value; ``study.roro_parity``: its parity,
``roro.task.answer``): every routing method once per seed.

A variant names exactly one routing method (``roro.router.methods`` plus ``roro.eval.baselines``):

* ``roro``: the Rubricor-Judge alternation with the unit's seed (its phase kept on val pairs), then routers trained
  with outcome + the Judge's process score - cost at every swept cost weight;
* ``oracle-process``: routers trained with outcome + the exact process score read off the checked steps - cost
  (the upper bound on what any learned Judge could give; no Judge);
* ``outcome-only``: routers trained with outcome - cost at every swept cost weight (no Judge);
* ``threshold``: the uncertainty-threshold router at every threshold (no training; no seed dependence);
* ``random``: the random router at every rate (seeded by the unit; descriptive, a chord between the curve's ends).

A trained unit keeps, per method, the routers chosen on val by ``roro.eval.cost_weight_rule`` (their points aim at
spanning ``roro.eval.cost_range``), routes the evaluation split (``roro.eval.split``: test for these reporting
studies) and reduces its curves (LRM cost as a fraction of the all-LRM cost against chain-exact accuracy, the
primary metric, and against the outcome; anchored at all-SLM and all-LRM) to the scalars the harness aggregates
(``rubricflow.methods.roro.router.curves.curve_metrics``): the hull's mean over the common range (``range_auc``), the
accuracy at the matched costs (``acc_at_cost_<pct>``), each n/a where the method has no points of its own on each
side, the descriptive area over [0, 1] (``auc``) and the cost range of its points; chain-exact ones are named
``chain_...``. The claims compare two methods over the costs inside the range that both units' own points span
(the pair metrics ``chain_pair_range_auc`` / ``pair_range_auc``, computed per seed from both units' points). A
``roro`` unit also reports its kept Judge's pairwise accuracy on the evaluation split's route pairs
(``judge_test_acc``, ``judge_test_process_acc``) and keeps the alternation's per-phase val accuracies in its result.
:func:`~rubricflow.methods.roro.study.report.report_extra` adds to the report the per-phase Judge table (mean and 95%
t-interval over seeds, overall and per pair category, each against chance 0.5) and the accuracy-vs-cost curves with
their 95% bands over seeds (``<stem>-curves.png``).

Shared, not per seed: the step models, the trajectories, the pairs and the step cache of the main pipeline
(``dvc repro roro_pairs``). Each unit writes under ``<out_dir>/<variant>/seed<k>/out`` (Judge, Rubricor, rubrics,
routers, evaluation) and checkpoints under ``<router.checkpoint_dir>/../studies/<study>/<variant>/seed<k>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricflow.methods.roro.config import TRAINED_ROUTERS
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.paths import cache_path, pairs_path, trajectories_path
from rubricflow.methods.roro.stages import log_judge_inputs
from rubricflow.methods.roro.study.report import PHASE_METRICS, pair_metric, report_extra
from rubricflow.sections import ConfigError
from rubricflow.study.adapter import StudyMethod, Unit
from rubricflow.study.spec import StudySpec
from rubricflow.util.hashing import content_hash

# This module is loaded at every CLI start (the registry); the environment, Judge and router modules load torch,
# so the functions import them when they run.


def unit_kind(rc) -> str:
    """The one routing method a unit config names; ConfigError otherwise."""
    kinds = list(rc.router.methods) + list(rc.eval.baselines)
    if len(kinds) != 1:
        raise ConfigError(
            f"a RoRo study variant must name exactly one routing method (roro.router.methods + roro.eval.baselines), "
            f"got {kinds}"
        )
    return kinds[0]


def _unit_overrides(vcfg: Any, name: str, spec: StudySpec, unit: Unit, udir: Path) -> dict[str, Any]:
    out = udir / "out"
    # the scripted (long-chain) environment is rebuilt per seed: its draws, its problems and so its routes and pairs,
    # written under the unit's own data directory; the tiny models' environment is the main pipeline's, shared, or
    # (task.draw_per_unit) its step models are and each unit draws its own problems
    rc = vcfg.roro
    env = {**({"roro.scripted.seed": unit.seed} if rc.scripted_env else {}),
           **own_draw(unit, udir)} if own_routes(rc) else {}
    return {
        **env,
        "roro.seed": unit.seed,  # router initialisation
        "roro.out_dir": str(out),
        "roro.rubricor_judge.seed": unit.seed,  # Judge / Rubricor initialisation, warm start and candidate sampling
        "roro.rubricor_judge.judge.path": str(out / "judge"),
        "roro.rubricor_judge.rubricor.path": str(out / "rubricor"),
        "roro.router.grpo.seed": unit.seed,  # rollouts and minibatches of router GRPO
        "roro.router.checkpoint_dir": str(Path(vcfg.roro.router.checkpoint_dir).parent / "studies" / name
                                          / unit.variant / f"seed{unit.seed}"),
        "roro.eval.seed": unit.seed,  # the random baseline
        "roro.eval.split": spec.eval_split,
    }


def own_routes(rc) -> bool:
    """Each unit builds its own problems, routes and pairs (the scripted environment, or task.draw_per_unit)."""
    return rc.scripted_env or rc.task.draw_per_unit


# A unit that draws its own problems (task.draw_per_unit), here and in the Judge-selection unit (study.judge_tune):
# its task seed is its seed, its routes, pairs and step cache live under its directory, and only the step models are
# shared.


def own_draw(unit: Unit, udir: Path) -> dict[str, Any]:
    """The overrides that give a unit its own problem draw, built under ``udir``."""
    return {"roro.task.seed": unit.seed, "roro.data_dir": str(udir / "data")}


def step_model_outputs(rc) -> dict[str, Path]:
    """The shared step models, as shared outputs."""
    return {"roro_models (SLM)": Path(rc.slm.path) / "config.json",
            "roro_models (LRM)": Path(rc.lrm.path) / "config.json"}


def own_draw_parts(rc, unit: Unit) -> dict[str, Any]:
    """What a unit with its own draw depends on: the config, the seed and the step models."""
    return {"config": {"roro": rc.essential_dump()}, "seed": unit.seed,
            "slm": content_hash(rc.slm.path), "lrm": content_hash(rc.lrm.path)}


def build_own_routes(rc) -> dict[str, Any]:
    """Build the unit's routes and pairs (``roro-trajectories``, ``roro-pairs``); their summary."""
    from rubricflow.methods.roro.env.trajectories import run_trajectories
    from rubricflow.methods.roro.judge.pairs import run_pairs

    tr = run_trajectories(rc)
    environment = {k: tr[k] for k in ("n_unique", "slm_step_error_rate", "uncertainty_auc")}
    environment["pairs"] = {k: v for k, v in run_pairs(rc).items() if "available" not in k}
    return environment


def _shared_outputs(cfg: Any) -> dict[str, Path]:
    rc = cfg.roro
    if rc.scripted_env:  # every unit builds its own environment, routes and pairs
        return {}
    models = step_model_outputs(rc)
    if rc.task.draw_per_unit:  # every unit builds its own routes and pairs with the shared step models
        return models
    return {
        **models,
        "roro_trajectories": trajectories_path(rc),
        "roro_trajectories (step cache)": cache_path(rc),
        "roro_pairs": pairs_path(rc),
    }


def _input_parts(ucfg: Any, unit: Unit) -> dict[str, Any]:
    rc = ucfg.roro
    if rc.scripted_env:  # the environment is the config and the seed (the routes and pairs are built from them)
        return {"config": {"roro": rc.essential_dump()}, "seed": unit.seed}
    models = own_draw_parts(rc, unit)
    if rc.task.draw_per_unit:  # the routes and pairs are built from the models, the config and the seed
        return models
    return {
        **models,
        "trajectories": content_hash(trajectories_path(rc)),
        "pairs": content_hash(pairs_path(rc)),
        "step_cache": content_hash(cache_path(rc)),
    }


def run_roro_unit(ucfg: Any, unit: Unit, udir: Path, run: Any, secret_resolver=None) -> dict:
    """One unit: train what its method needs (the alternation for ``roro``, routers for the two trained methods),
    then route the evaluation split and reduce the curve to scalars."""
    from rubricflow.methods.roro.router.evaluate import (
        anchor_rows,
        baseline_rows,
        judge_test_accuracy,
        kept_routers,
        method_curves,
        router_rows,
    )
    from rubricflow.methods.roro.router.train import run_router
    from rubricflow.methods.roro.judge.alternation import run_rubricor_judge
    from rubricflow.methods.roro.env.step_models import make_env

    rc = ucfg.roro
    kind = unit_kind(rc)
    out: dict[str, Any] = {"kind": kind}
    if own_routes(rc) and kind in ("roro", "oracle-noisy", "exact-reader"):  # they read this unit's routes and pairs
        out["environment"] = build_own_routes(rc)
    if kind == "roro":  # the alternation reads the routes and the pairs
        log_judge_inputs(run, rc)
    if kind == "roro":
        rj = run_rubricor_judge(rc)
        keep = ("round", "phase", "selected", *PHASE_METRICS, "val_judge_failed_frac", "val_rubric_failed_frac")
        out["judge_rounds"] = [{k: r[k] for k in keep if k in r} for r in rj["rounds"]]
    if kind in TRAINED_ROUTERS:
        tr = run_router(rc)
        out["routers"] = [{k: r[k] for k in ("tag", "cost_weight", "final_train_accuracy", "final_train_cost_frac",
                                             "missing_rewards")} for r in tr["runs"]]
        if tr.get("dose"):  # the dose-response scorers: the calibration and the accuracy reached on val
            out["dose"] = tr["dose"]
    probs = problems(rc)[rc.eval.split]
    env = make_env(rc, cache_path(rc))
    rows = anchor_rows(env, probs)
    all_lrm = {r.problem_id: r.lrm_tokens for r in env.rollout(probs, _all_lrm_policy())}
    if kind in ("threshold", "random"):
        rows += baseline_rows(rc, env, probs, all_lrm, (kind,))
    else:
        keep, out["cost_weights"] = kept_routers(rc, env)  # chosen on val (roro.eval.cost_weight_rule)
        rows += router_rows(rc, env, probs, all_lrm, keep)
    curve = method_curves(rows, rc.eval)[kind]
    judge = judge_test_accuracy(rc, env, probs) if kind == "roro" else {}
    metrics = {k: v for k, v in curve.items() if not k.endswith("points")}
    anchors = {r["method"]: r["accuracy"] for r in rows if r["method"] in ("all-slm", "all-lrm")}
    if judge:
        metrics["judge_test_acc"] = judge["pairwise_acc"]
        metrics["judge_test_process_acc"] = judge.get("acc_process")
        out["judge_test"] = {k: v for k, v in judge.items() if k != "pair_counts"}
        out["judge_test_pair_counts"] = judge["pair_counts"]
    chain_anchors = {r["method"]: r["chain_exact"] for r in rows if r["method"] in ("all-slm", "all-lrm")}
    return {**out, "metrics": metrics, "eval_samples": len(probs), "cost_range": list(rc.eval.cost_range),
            "points": curve["points"], "anchors": anchors,
            "chain_points": curve.get("chain_points"), "chain_anchors": chain_anchors, "rows": rows}


def _all_lrm_policy():
    from rubricflow.methods.roro.env.routing import ConstantPolicy

    return ConstantPolicy(1)


ADAPTER = StudyMethod(
    name="roro",
    run_unit=run_roro_unit,
    unit_overrides=_unit_overrides,
    reserved_keys=("roro.seed", "roro.out_dir", "roro.rubricor_judge.seed", "roro.rubricor_judge.judge.path",
                   "roro.rubricor_judge.rubricor.path", "roro.router.grpo.seed", "roro.router.checkpoint_dir",
                   "roro.eval.seed", "roro.eval.split", "roro.scripted.seed", "roro.task.seed", "roro.data_dir"),
    shared_outputs=_shared_outputs,
    input_parts=_input_parts,
    code=("rubricflow.methods.roro", "rubricflow.grpo", "rubricflow.training.sft", "models.tiny", "models.generation"),
    sections=("roro",),
    shared_hint="run the main pipeline's RoRo stages first (`dvc repro roro_pairs` or `make run`; for "
    "roro.task.answer=parity then `rubricflow --set roro.task.answer=parity roro-trajectories` and `roro-pairs`): the "
    "step models, trajectories, pairs and step cache are shared by every unit",
    report_extras=report_extra,
    pair_metric=pair_metric,
)

