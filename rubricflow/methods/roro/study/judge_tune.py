"""Choose the tiny Judge's size and warm start on val pairs: the selection study ``roro_judge_tune``
(``rubricflow study roro_judge_tune``; its adapter is :data:`ADAPTER`, its default spec :func:`judge_tune_spec`).

Each variant (``SETTINGS``: overrides of ``roro.rubricor_judge.judge``) runs the warm start and one alternation
round (``rounds: 1``) on the main pipeline's trajectories and pairs (``dvc repro roro_pairs``) once per seed
(``SEEDS``, not the study seeds 101-505). Measured per variant and seed, on val only (the study runs under the
test-split guard):

* the val pairwise accuracy of each phase (warm, 1/judge, 1/rubricor), overall and per pair category;
* the phase the pipeline would keep (``select_phase``: best overall val pairwise accuracy) and its accuracy on the
  val process pairs (``kept_process``);
* the val process-pair accuracy of an exact reader of the Rubricor's rubrics after each phase (the ceiling a Judge
  reaches under those rubrics; ``oracle_process_warm`` is the warm Rubricor's);
* after the warm start, how often the Judge's greedy verdict agrees with each criterion family's literal reading
  (``judge.prompts.literal_satisfied``) on the val problems' routes under random rubrics (the warm start's own targets).

Rule, fixed before any setting was run (the study's ``Selection``): the highest mean over seeds of ``kept_process``
wins; a setting within 0.01 of the best loses to a cheaper one (fewer Judge parameters, then fewer warm-start
steps). The paper's readings (score_mode, optimizer, select_on, the criterion families) are the same in every
setting.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rubricflow.util.hashing import content_hash
from rubricflow.methods.roro.paths import pairs_path, trajectories_path
from rubricflow.methods.roro.config import RubricorJudgeConfig
from rubricflow.methods.roro.judge.prompts import FAMILIES, FAMILY_SETS, reads_the_problem
from rubricflow.methods.roro.stages import log_judge_inputs
from rubricflow.methods.roro.study.unit import build_own_routes, own_draw, own_draw_parts, step_model_outputs
from rubricflow.registry import StudyDecl
from rubricflow.study.adapter import StudyMethod, Unit
from rubricflow.study.spec import Selection, StudySpec

SEEDS = (11, 22)
# name -> overrides of roro.rubricor_judge.judge (the first is the previous default)
SETTINGS: dict[str, dict] = {
    "h64-l2-w500": {"hidden_size": 64, "num_layers": 2, "warm_steps": 500, "lr": 3e-3},
    "h64-l2-w1500": {"hidden_size": 64, "num_layers": 2, "warm_steps": 1500, "lr": 3e-3},
    "h64-l2-w1500-lr1e-3": {"hidden_size": 64, "num_layers": 2, "warm_steps": 1500, "lr": 1e-3},
    "h128-l2-w1000": {"hidden_size": 128, "num_layers": 2, "warm_steps": 1000, "lr": 3e-3},
    "h128-l4-w1500": {"hidden_size": 128, "num_layers": 4, "warm_steps": 1500, "lr": 1e-3},
}
# The settings ran under the four criterion families and the code's generation caps; the tiny profile has since
# moved to six families (roro_families), so the study names the four to keep measuring what its report says.
_CODE = RubricorJudgeConfig()
FOUR_FAMILIES = {"roro.rubricor_judge.families": "four",
                 "roro.rubricor_judge.judge.max_new_tokens": _CODE.judge.max_new_tokens,
                 "roro.rubricor_judge.rubricor.max_new_tokens": _CODE.rubricor.max_new_tokens}
CATS = ("pairwise_acc", "acc_outcome", "acc_cost", "acc_process", "acc_process_right", "acc_process_wrong")
PHASES = ("0/warm", "1/judge", "1/rubricor")


def family_key(name: str) -> str:
    """A criterion family's name as a metric key (``few LRM steps`` -> ``literal_few_lrm_steps``)."""
    return "literal_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def literal_agreement(judge, views, trajectories, seed: int, families=FAMILIES) -> dict[str, float]:
    """Per criterion family: the fraction of val routes whose greedy verdict equals the literal reading, under one
    random rubric per route (``judge.prompts.random_rubric``); a failed parse or a missing criterion counts as
    disagreement."""
    from rubricflow.methods.roro.judge.scoring import judge_scores
    from rubricflow.methods.roro.judge.prompts import family_satisfied, random_rubric

    rng = random.Random(seed)
    items, rubrics = [], []
    for t in trajectories:
        r = random_rubric(rng, len(views[t.problem_id].slm_uncertainties), families)
        rubrics.append(r)
        items.append((views[t.problem_id].question, r, t))
    parsed = judge_scores(judge, items)
    agree = {name: 0 for name, _ in families}
    for (_, r, t), row in zip(items, parsed):
        got = {k: v.satisfied for k, v in row[0].verdicts.items()} if not row[0].failed else {}
        for c in r:
            if got.get(c.id) == family_satisfied(c, t, judge.reads_problem):
                agree[c.id] += 1
    return {name: n / max(1, len(items)) for name, n in agree.items()}


def oracle_accuracy(rubrics: dict, trajectories, pairs, reads_problem: bool = False) -> dict[str, float]:
    """Val pairwise accuracy (``pair_accuracy``) of an exact reader of ``rubrics`` (of the problem too when
    ``reads_problem``): the ceiling a Judge reaches under these rubrics when it reads every criterion literally."""
    from rubricflow.methods.roro.env import oracles  # imports torch (routing): not at CLI start
    from rubricflow.methods.roro.judge.pairwise import pair_accuracy

    need = {i for p in pairs for i in (p.chosen, p.rejected)}
    scores = {i: (None if rubrics[trajectories[i].problem_id].failed
                  else oracles.literal_score(rubrics[trajectories[i].problem_id].value, trajectories[i],
                                             reads_problem))
             for i in need}
    return pair_accuracy(pairs, trajectories, scores)


def run_one(rc, seed: int) -> dict:
    """The warm start and ``rc.rubricor_judge.rounds`` alternation rounds of the Judge ``rc`` describes, measured on
    val (see the module docstring)."""
    from rubricflow.methods.roro.judge.pairs import read_trajectory_pairs
    from rubricflow.methods.roro.paths import pairs_path, trajectories_path
    from rubricflow.methods.roro.judge.rubricor import problem_views, write_rubrics
    from rubricflow.methods.roro.judge.alternation import alternate, build_lms
    from rubricflow.methods.roro.env.trajectories import read_trajectories

    rj = rc.rubricor_judge
    trajs = read_trajectories(trajectories_path(rc))
    pairs = read_trajectory_pairs(pairs_path(rc))
    views = problem_views(trajs)
    judge, rubricor = build_lms(rj, views, trajs)
    val_pids = {p.problem_id for p in pairs["val"]}
    val_trajs = [t for t in trajs if t.problem_id in val_pids]
    out: dict = {"judge_params": sum(p.numel() for p in judge.model.parameters())}
    t0 = time.perf_counter()

    def log(row: dict) -> None:
        if row["phase"] == "warm":
            out["warm_s"] = time.perf_counter() - t0
            out["literal_agreement"] = literal_agreement(judge, views, val_trajs, seed + 5,
                                                         FAMILY_SETS[rj.families])
        rubrics = write_rubrics(rubricor, views, sorted(val_pids))  # memoised: the rubrics the phase was scored under
        out.setdefault("oracle_process", []).append(
            oracle_accuracy(rubrics, trajs, pairs["val"], judge.reads_problem).get("acc_process"))

    rows = alternate(judge, rubricor, rj, trajs, pairs["train"], pairs["val"], log=log)
    out["seconds"] = time.perf_counter() - t0
    out["phases"] = [{"phase": f"{r['round']}/{r['phase']}", "selected": r["selected"],
                      **{c: r.get(f"val_{c}") for c in CATS}} for r in rows]
    kept = next(p for p in out["phases"] if p["selected"])
    out["kept_phase"], out["kept_process"], out["kept_overall"] = (kept["phase"], kept["acc_process"],
                                                                   kept["pairwise_acc"])
    return out


# ----------------------------------------------------------------------------------------------------------------
# the study adapter


def unit_overrides(vcfg: Any, name: str, spec: StudySpec, unit: Unit, udir: Path) -> dict[str, Any]:
    # roro.task.draw_per_unit: the unit draws its own problems and builds their routes and pairs under its directory
    # with the shared step models (study.unit.own_draw), so a selection reads several problem draws
    draw = own_draw(unit, udir) if vcfg.roro.task.draw_per_unit else {}
    return {**draw, "roro.rubricor_judge.seed": unit.seed, "roro.rubricor_judge.rounds": 1}


def shared_outputs(cfg: Any) -> dict[str, Path]:
    rc = cfg.roro
    if rc.task.draw_per_unit:
        return step_model_outputs(rc)
    return {"roro_trajectories": trajectories_path(rc), "roro_pairs": pairs_path(rc)}


def input_parts(ucfg: Any, unit: Unit) -> dict[str, Any]:
    rc = ucfg.roro
    if rc.task.draw_per_unit:  # the routes and pairs are built from the step models, the config and the seed
        return own_draw_parts(rc, unit)
    return {"config": {"rubricor_judge": rc.rubricor_judge.essential_dump(), "pairs": rc.pairs.essential_dump()},
            "seed": unit.seed, "trajectories": content_hash(trajectories_path(rc)),
            "pairs": content_hash(pairs_path(rc))}


def run_unit(ucfg: Any, unit: Unit, udir: Path, run: Any, secret_resolver=None) -> dict:
    """One setting and seed: :func:`run_one`, reduced to the study's metrics (the phases kept in the result)."""
    rc = ucfg.roro
    environment = build_own_routes(rc) if rc.task.draw_per_unit else None  # this unit's draw: its routes, pairs
    log_judge_inputs(run, rc)
    r = run_one(rc, unit.seed)
    by_phase = {p["phase"]: p for p in r["phases"]}
    metrics = {"kept_process": r["kept_process"], "kept_overall": r["kept_overall"],
               "judge_params": float(r["judge_params"]), "warm_steps": float(rc.rubricor_judge.judge.warm_steps),
               "judge_reads_problem": float(reads_the_problem(rc.rubricor_judge.judge_reads)),
               **{f"process_{ph.replace('/', '_')}": (by_phase.get(ph) or {}).get("acc_process") for ph in PHASES},
               "oracle_process_warm": (r.get("oracle_process") or [None])[0],
               **{family_key(n): v for n, v in r["literal_agreement"].items()}}
    return {"metrics": metrics, "eval_samples": None, "kept_phase": r["kept_phase"], "phases": r["phases"],
            "oracle_process": r.get("oracle_process"), "seconds": r["seconds"],
            **({"environment": environment} if environment else {})}


def report_phases(name: str, spec: StudySpec, results: Sequence[Mapping], stem_path: Path) -> dict[str, Any]:
    """Per unit: the kept phase and the val process accuracy of each phase, beside the exact reader's."""
    f = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["", "Per unit, val process-pair accuracy of each phase (warm, 1/judge, 1/rubricor), the phase kept, and "
             "an exact reader of the same rubrics (the Judge's ceiling under them):", "",
             "| variant | seed | kept phase | process per phase | exact reader per phase | s |",
             "|---|---|---|---|---|---|"]
    for r in results:
        per = ", ".join(f(p.get("acc_process")) for p in r.get("phases") or [])
        orc = ", ".join(f(x) for x in r.get("oracle_process") or []) or "n/a"
        lines.append(f"| {r['variant']} | {r['seed']} | {r.get('kept_phase', 'n/a')} | {per} | {orc} | "
                     f"{r.get('seconds', 0):.0f} |")
    return {"markdown": lines, "files": {}, "json": {}}


ADAPTER = StudyMethod(
    name="roro_judge",
    run_unit=run_unit,
    unit_overrides=unit_overrides,
    reserved_keys=("roro.rubricor_judge.seed", "roro.rubricor_judge.rounds", "roro.task.seed", "roro.data_dir"),
    shared_outputs=shared_outputs,
    input_parts=input_parts,
    code=("rubricflow.methods.roro", "rubricflow.training.sft", "models.tiny", "models.generation"),
    sections=("roro",),
    shared_hint="run the main pipeline's RoRo stages first (`dvc repro roro_pairs` or `make run`): the trajectories "
    "and pairs are shared by every unit",
    report_extras=report_phases,
)


def judge_tune_spec() -> StudySpec:
    metrics = ["kept_process", "kept_overall", "judge_params", "warm_steps",
               *(f"process_{ph.replace('/', '_')}" for ph in PHASES), "oracle_process_warm",
               *(family_key(n) for n, _ in FAMILIES)]
    return StudySpec(
        method="roro_judge",
        seeds=list(SEEDS),
        variants={name: {**FOUR_FAMILIES, **{f"roro.rubricor_judge.judge.{k}": v for k, v in s.items()}}
                  for name, s in SETTINGS.items()},
        metrics=metrics,
        eval_split="val",
        selection=Selection(metric="kept_process", direction="higher", tolerance=0.01,
                            cost=["judge_params", "warm_steps"]),
        out_dir="artifacts/studies/roro_judge_tune",
    )


# Generation caps that fit six families' rubrics and judgments on the tiny profile (their warm-start targets run
# longer than the code defaults, 48 / 96, allow: ``alternation.check_generation_cap``), given to both variants so
# that they differ in the families only (the four arm's caps are above what four families need; a generation that
# ends stops earlier). The tiny profile has run at these caps since six became its setting.
FAMILIES_CAPS = {"roro.rubricor_judge.judge.max_new_tokens": 72, "roro.rubricor_judge.rubricor.max_new_tokens": 128}


def families_spec() -> StudySpec:
    """``roro_families``: the four criterion families against six (``rubricor_judge.families``), with the Judge
    setting chosen by ``roro_judge_tune``; the same unit (warm start and one alternation round, val only)."""
    metrics = ["kept_process", "kept_overall", "judge_params",
               *(f"process_{ph.replace('/', '_')}" for ph in PHASES), "oracle_process_warm",
               *(family_key(n) for n, _ in FAMILY_SETS["six"])]
    return StudySpec(
        method="roro_judge",
        seeds=list(SEEDS),
        variants={name: {"roro.rubricor_judge.families": name, **FAMILIES_CAPS} for name in FAMILY_SETS},
        metrics=metrics,
        eval_split="val",
        selection=Selection(metric="kept_process", direction="higher", tolerance=0.01, cost=["judge_params"]),
        profile="tiny",  # the tiny Judge and Rubricor; FAMILIES_CAPS are theirs
        out_dir="artifacts/studies/roro_families",
    )


STUDY = StudyDecl(
    "roro_judge_tune", judge_tune_spec,
    "Chooses the tiny Judge's size and warm start on val pairs (`rubricflow study roro_judge_tune`): each setting "
    "runs the warm start and one alternation round per seed (11, 22; not the study's seeds); the highest mean kept-"
    "phase val process-pair accuracy wins, and within 0.01 of it the cheaper setting (fewer Judge parameters, then "
    "fewer warm-start steps).",
)

FAMILIES_STUDY = StudyDecl(
    "roro_families", families_spec,
    "Chooses the criterion families on val pairs (`rubricflow study roro_families`): four against six "
    "(`roro.rubricor_judge.families`), each the warm start and one alternation round per seed (11, 22); the higher "
    "mean kept-phase val process-pair accuracy wins, and within 0.01 of it the cheaper (fewer Judge parameters: four).",
)


# What the Judge reads (roro.rubricor_judge.judge_reads), chosen on val over several problem draws. Declared before any
# unit ran. Why: the six-family Judge orders 0.7 of the test process pairs on 6 of 15 fresh draws (roro_fresh,
# roro_fresh_process) and about half the accepted SLM errors are misread operands, right arithmetic that no reader of
# the steps alone can see (reports/studies/roro_family_ceiling.md); with 64 val process pairs per draw one draw cannot
# choose. Every unit draws its own problems (roro.task.draw_per_unit; seeds no other study used), both variants on
# the same draws; the tiny profile's Judge otherwise (six families, its caps, select_on val). Rule: the higher mean
# kept-phase val process-pair accuracy over the draws wins; within 0.01 of it the one that does not read the problem
# (the shorter prompt, the previous setting).
READS_SEEDS = (1601, 1602, 1603, 1604)


def reads_spec() -> StudySpec:
    metrics = ["kept_process", "kept_overall", "judge_reads_problem",
               *(f"process_{ph.replace('/', '_')}" for ph in PHASES), "oracle_process_warm",
               *(family_key(n) for n, _ in FAMILY_SETS["six"])]
    return StudySpec(
        method="roro_judge",
        seeds=list(READS_SEEDS),
        variants={reads: {"roro.rubricor_judge.judge_reads": reads, "roro.task.draw_per_unit": True}
                  for reads in ("steps", "problem")},
        metrics=metrics,
        eval_split="val",
        selection=Selection(metric="kept_process", direction="higher", tolerance=0.01, cost=["judge_reads_problem"]),
        profile="tiny",
        out_dir="artifacts/studies/roro_judge_reads",
    )


READS_STUDY = StudyDecl(
    "roro_judge_reads", reads_spec,
    "Chooses what the Judge reads on val pairs over four problem draws (`rubricflow study roro_judge_reads`): the "
    "steps alone against the problem and the steps (`roro.rubricor_judge.judge_reads`), each the warm start and one "
    "alternation round on its own draw (`roro.task.draw_per_unit`, seeds 1601-1604); the higher mean kept-phase val "
    "process-pair accuracy wins, and within 0.01 of it the steps alone.",
)


# The Judge with a calculator (judge_reads: checked), chosen on val over four more problem draws. Declared after
# roro_judge_reads and before any of its units ran. Why: in roro_judge_reads the exact reader of the warm rubrics rose
# when it read the problem (0.740 against 0.697) and the learned Judge did not follow (kept 0.742 against 0.736); its
# greedy verdicts agree with its own warm-start targets for the two "right" families on about 0.7 of the val routes
# under either reading, so a 2-layer Judge that cannot check arithmetic or an operand is what limits it. Checked
# hands it each step's check, as a tool call would. Same unit, rule and tie-break as roro_judge_reads (within 0.01:
# the steps alone, no tool); draws no other study used.
CHECKED_SEEDS = (1611, 1612, 1613, 1614)


def reads_study_on(readings: tuple[str, ...], seeds, out_dir: str, **also: Any) -> StudySpec:
    """``roro_judge_reads``'s unit, metrics and rule on other draws: one variant per reading of ``readings`` (each
    with the overrides ``also``, dotted keys under ``roro.rubricor_judge``)."""
    extra = {f"roro.rubricor_judge.{k}": v for k, v in also.items()}
    variants = {reads: {"roro.rubricor_judge.judge_reads": reads, **extra, "roro.task.draw_per_unit": True}
                for reads in readings}
    return StudySpec.model_validate({**reads_spec().model_dump(), "seeds": list(seeds), "variants": variants,
                                     "out_dir": out_dir})


def checked_spec() -> StudySpec:
    return reads_study_on(("steps", "checked"), CHECKED_SEEDS, "artifacts/studies/roro_judge_checked")


CHECKED_STUDY = StudyDecl(
    "roro_judge_checked", checked_spec,
    "Chooses whether the Judge has a calculator on val pairs over four problem draws (`rubricflow study "
    "roro_judge_checked`): the steps alone against the problem with each step's check against it "
    "(`roro.rubricor_judge.judge_reads: checked`), each the warm start and one alternation round on its own draw "
    "(seeds 1611-1614); the higher mean kept-phase val process-pair accuracy wins, and within 0.01 of it the steps "
    "alone.",
)


# The calculator Judge against the steps alone with one tokenizer (roro.rubricor_judge.tokenizer_reads: checked),
# chosen on val over four more problem draws. Declared after roro_judge_checked and before any of its units ran. Why:
# in roro_judge_checked the tokenizer was trained on each reading's own texts, so the Rubricor's tokens (and the
# Judge's vocabulary) followed the reading as well as the Judge's input; here both variants train it on the checked
# reading's texts, so a variant differs from the other in what the Judge reads only. Same unit, rule and tie-break
# (within 0.01: the steps alone); draws no other study used. Its winner, with this tokenizer, is what the tiny profile
# takes.
ONE_TOKENIZER_SEEDS = (1621, 1622, 1623, 1624)


def checked_one_tokenizer_spec() -> StudySpec:
    return reads_study_on(("steps", "checked"), ONE_TOKENIZER_SEEDS, "artifacts/studies/roro_judge_checked_tok",
                          tokenizer_reads="checked")


ONE_TOKENIZER_STUDY = StudyDecl(
    "roro_judge_checked_tok", checked_one_tokenizer_spec,
    "roro_judge_checked with one tokenizer (`rubricflow study roro_judge_checked_tok`): the steps alone against the "
    "calculator Judge, both with the tokenizer of the checked reading's texts "
    "(`roro.rubricor_judge.tokenizer_reads: checked`), so they differ in the Judge's input only; each the warm start "
    "and one alternation round on its own draw (seeds 1621-1624); the higher mean kept-phase val process-pair accuracy "
    "wins, and within 0.01 of it the steps alone.",
)
