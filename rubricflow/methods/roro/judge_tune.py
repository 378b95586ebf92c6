"""Choose the tiny Judge's size and warm start on val pairs: ``rubricflow roro-judge-tune`` (flows/cli_roro.py).

Each setting (``SETTINGS``: overrides of ``roro.rubricor_judge.judge``) runs the warm start and one alternation
round (``rounds: 1``) on the main pipeline's trajectories and pairs (``dvc repro roro_pairs``) with every seed of
``SEEDS``. Measured per setting and seed, on val only (test problems are never read):

* the val pairwise accuracy of each phase (warm, 1/judge, 1/rubricor), overall and per pair category;
* the phase the pipeline would keep (``select_phase``: best overall val pairwise accuracy) and its accuracy on the
  val process pairs;
* after the warm start, how often the Judge's greedy verdict agrees with each criterion family's literal reading
  (``prompts.literal_satisfied``) on the val problems' routes under random rubrics (the warm start's own targets).

Rule, fixed before any setting was run: the selected setting has the highest mean, over ``SEEDS`` (not the study
seeds 101-505), of the kept phase's val process-pair accuracy; a setting within 0.01 of the best loses to a cheaper
one (fewer parameters, then fewer warm-start steps). The paper's readings (score_mode, optimizer, select_on, the
criterion families) are the same in every setting.

Writes ``reports/studies/roro_judge_tune.md`` and ``.json``; models are not saved.
"""

from __future__ import annotations

import random
import re
import statistics
import time
from pathlib import Path

SEEDS = (11, 22)
# name -> overrides of roro.rubricor_judge.judge (the first is the previous default)
SETTINGS: dict[str, dict] = {
    "h64-l2-w500": {"hidden_size": 64, "num_layers": 2, "warm_steps": 500, "lr": 3e-3},
    "h64-l2-w1500": {"hidden_size": 64, "num_layers": 2, "warm_steps": 1500, "lr": 3e-3},
    "h64-l2-w1500-lr1e-3": {"hidden_size": 64, "num_layers": 2, "warm_steps": 1500, "lr": 1e-3},
    "h128-l2-w1000": {"hidden_size": 128, "num_layers": 2, "warm_steps": 1000, "lr": 3e-3},
    "h128-l4-w1500": {"hidden_size": 128, "num_layers": 4, "warm_steps": 1500, "lr": 1e-3},
}
CATS = ("pairwise_acc", "acc_outcome", "acc_cost", "acc_process", "acc_process_right", "acc_process_wrong")


def literal_agreement(judge, views, trajectories, seed: int) -> dict[str, float]:
    """Per criterion family: the fraction of val routes whose greedy verdict equals the literal reading, under one
    random rubric per route (``prompts.random_rubric``); a failed parse or a missing criterion counts as disagreement."""
    from rubricflow.methods.roro.prompts import FAMILIES, literal_satisfied, random_rubric
    from rubricflow.methods.roro.judge import judge_scores

    rng = random.Random(seed)
    items, rubrics = [], []
    for t in trajectories:
        r = random_rubric(rng, len(views[t.problem_id].slm_uncertainties))
        rubrics.append(r)
        items.append((views[t.problem_id].question, r, t))
    parsed = judge_scores(judge, items)
    agree = {name: 0 for name, _ in FAMILIES}
    for (_, r, t), row in zip(items, parsed):
        got = {j["criterion"]: j["satisfied"] for j in row[0].judgments} if not row[0].failed else {}
        for c in r:
            if got.get(c["criterion"]) == literal_satisfied(c["criterion"], c["params"], t):
                agree[c["criterion"]] += 1
    return {name: n / max(1, len(items)) for name, n in agree.items()}


def guidance_params(criterion: str, guidance: str) -> dict | None:
    """The parameters (``k``, ``d``, ``m``) a criterion family's score guidance names, read back from its text;
    None when the text is not the family's template."""
    from rubricflow.methods.roro.prompts import FAMILIES

    guide = dict(FAMILIES).get(criterion)
    if guide is None:
        return None
    pattern = re.escape(guide)
    for key in "kdm":
        pattern = pattern.replace(re.escape("{" + key + "}"), f"(?P<{key}>-?\\d+)")
    m = re.fullmatch(pattern, guidance.strip())
    return {k: int(v) for k, v in m.groupdict().items()} if m else None


def literal_score(rubric: list[dict], t) -> float | None:
    """An exact reader's process score of ``t`` under a parsed rubric: ``sum weight * 1.0 * literal reading``
    (score 1.0, the families' guidance); None when a criterion is not a family template."""
    from rubricflow.methods.roro.prompts import literal_satisfied

    total = 0.0
    for c in rubric:
        params = guidance_params(c["criterion"], c.get("score_guidance", ""))
        if params is None:
            return None
        total += c["weight"] * float(literal_satisfied(c["criterion"], {"k": 0, "d": 0, "m": 0, **params}, t))
    return total


def oracle_accuracy(rubrics: dict, trajectories, pairs) -> dict[str, float]:
    """Val pairwise accuracy (``pair_accuracy``) of an exact reader of ``rubrics``: the ceiling a Judge reaches
    under these rubrics when it reads every criterion literally."""
    from rubricflow.methods.roro.pairwise import pair_accuracy

    need = {i for p in pairs for i in (p.chosen, p.rejected)}
    scores = {i: (None if rubrics[trajectories[i].problem_id].failed
                  else literal_score(rubrics[trajectories[i].problem_id].criteria, trajectories[i])) for i in need}
    return pair_accuracy(pairs, trajectories, scores)


def oracle_warm(rc, seed: int) -> dict[str, float]:
    """The exact reader's val accuracy under the warm-started Rubricor's greedy rubrics (the Judge setting does not
    enter: the Rubricor's warm start is the same in every setting)."""
    import torch

    from rubricflow.methods.roro.pairs import read_trajectory_pairs
    from rubricflow.methods.roro.paths import pairs_path, trajectories_path
    from rubricflow.methods.roro.rubric_lm import build_rubric_lms
    from rubricflow.methods.roro.rubricor import problem_views, write_rubrics
    from rubricflow.methods.roro.rubricor_judge import routing_tokenizer_corpus, warm_start_examples
    from rubricflow.methods.roro.trajectories import read_trajectories

    rj = rc.rubricor_judge.model_copy(update={"seed": seed})
    trajs = read_trajectories(trajectories_path(rc))
    pairs = read_trajectory_pairs(pairs_path(rc))
    views = problem_views(trajs)
    torch.manual_seed(seed)
    _, rubricor = build_rubric_lms(routing_tokenizer_corpus(views, trajs, seed), rj.judge, rj.rubricor,
                                   rj.batch_size, seed)
    train_pids = sorted({p.problem_id for p in pairs["train"]})
    rub_ex, _ = warm_start_examples({p: views[p] for p in train_pids},
                                    [t for t in trajs if t.problem_id in set(train_pids)], random.Random(seed))
    torch.manual_seed(seed)  # as alternate() does before the warm start
    rubricor.sft(rub_ex, rj.rubricor.warm_steps, rj.rubricor.batch_size, rj.rubricor.lr, seed)
    val_pids = sorted({p.problem_id for p in pairs["val"]})
    return oracle_accuracy(write_rubrics(rubricor, views, val_pids), trajs, pairs["val"])


def run_one(rc, setting: dict, seed: int) -> dict:
    import torch

    from rubricflow.methods.roro.pairs import read_trajectory_pairs
    from rubricflow.methods.roro.paths import pairs_path, trajectories_path
    from rubricflow.methods.roro.rubric_lm import build_rubric_lms
    from rubricflow.methods.roro.rubricor import problem_views, write_rubrics
    from rubricflow.methods.roro.rubricor_judge import alternate, routing_tokenizer_corpus
    from rubricflow.methods.roro.trajectories import read_trajectories
    from rubricflow.stage import apply_overrides

    rc = apply_overrides(rc, {"rubricor_judge.rounds": 1, "rubricor_judge.seed": seed,
                              **{f"rubricor_judge.judge.{k}": v for k, v in setting.items()}})
    rj = rc.rubricor_judge
    trajs = read_trajectories(trajectories_path(rc))
    pairs = read_trajectory_pairs(pairs_path(rc))
    views = problem_views(trajs)
    torch.manual_seed(rj.seed)
    corpus = routing_tokenizer_corpus(views, trajs, rj.seed)
    judge, rubricor = build_rubric_lms(corpus, rj.judge, rj.rubricor, rj.batch_size, rj.seed)
    val_pids = {p.problem_id for p in pairs["val"]}
    val_trajs = [t for t in trajs if t.problem_id in val_pids]
    out: dict = {"judge_params": sum(p.numel() for p in judge.model.parameters())}
    t0 = time.perf_counter()

    def log(row: dict) -> None:
        if row["phase"] == "warm":
            out["warm_s"] = time.perf_counter() - t0
            out["literal_agreement"] = literal_agreement(judge, views, val_trajs, seed + 5)
        rubrics = write_rubrics(rubricor, views, sorted(val_pids))  # memoised: the rubrics the phase was scored under
        out.setdefault("oracle_process", []).append(oracle_accuracy(rubrics, trajs, pairs["val"]).get("acc_process"))

    rows = alternate(judge, rubricor, rj, trajs, pairs["train"], pairs["val"], log=log)
    out["seconds"] = time.perf_counter() - t0
    out["phases"] = [{"phase": f"{r['round']}/{r['phase']}", "selected": r["selected"],
                      **{c: r.get(f"val_{c}") for c in CATS}} for r in rows]
    kept = next(p for p in out["phases"] if p["selected"])
    out["kept_phase"], out["kept_process"], out["kept_overall"] = kept["phase"], kept["acc_process"], kept["pairwise_acc"]
    return out


def select(results: dict[str, dict[int, dict]]) -> str:
    """The rule of the module docstring: best mean kept-phase val process accuracy; within 0.01 the cheaper wins."""
    mean = {n: statistics.mean(r["kept_process"] for r in by_seed.values()) for n, by_seed in results.items()}
    best = max(mean.values())
    near = [n for n in mean if mean[n] >= best - 0.01]
    cost = lambda n: (next(iter(results[n].values()))["judge_params"], SETTINGS.get(n, {}).get("warm_steps", 0))  # noqa: E731
    return min(near, key=cost)


def report(results: dict[str, dict[int, dict]], chosen: str) -> str:
    from rubricflow.methods.roro.prompts import FAMILIES

    f = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["# RoRo Judge setting, chosen on val (`rubricflow roro-judge-tune`)", "",
             "Warm start + 1 alternation round per setting and seed; val pairs only (test never read). Rule, fixed "
             "before the runs: highest mean over seeds of the kept phase's val process-pair accuracy; within 0.01 "
             "the cheaper setting.", "",
             "| setting | judge params | seed | kept phase | kept: process | kept: overall | process per phase "
             "(warm, 1/judge, 1/rubricor) | exact reader of the same rubrics: process per phase | literal agreement after "
             "warm (risky, uncertain, few, right) | s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, by_seed in results.items():
        for seed, r in sorted(by_seed.items()):
            per = ", ".join(f(p["acc_process"]) for p in r["phases"])
            lit = ", ".join(f"{r['literal_agreement'][family]:.2f}" for family, _ in FAMILIES)
            orc = ", ".join(f(x) for x in r.get("oracle_process", [])) or "n/a"
            lines.append(f"| {name} | {r['judge_params']} | {seed} | {r['kept_phase']} | {f(r['kept_process'])} | "
                         f"{f(r['kept_overall'])} | {per} | {orc} | {lit} | {r['seconds']:.0f} |")
    lines += ["", "| setting | mean kept process (val) | mean kept overall (val) | mean process over all phases |",
              "|---|---|---|---|"]
    for name, by_seed in results.items():
        rs = list(by_seed.values())
        allp = [p["acc_process"] for r in rs for p in r["phases"]]
        lines.append(f"| {name} | {statistics.mean(r['kept_process'] for r in rs):.3f} | "
                     f"{statistics.mean(r['kept_overall'] for r in rs):.3f} | {statistics.mean(allp):.3f} |")
    lines += ["", f"Selected: `{chosen}` ({SETTINGS.get(chosen, {})})."]
    left = [n for n in SETTINGS if n not in results]
    if left:
        lines += ["", "Listed in `SETTINGS` but not measured here (not part of the choice): "
                  + ", ".join(f"`{n}`" for n in left) + "."]
    return "\n".join(lines) + "\n"


def run_tune(rc, settings: list[str] | None = None, seeds: list[int] | None = None,
             out: str = "reports/studies/roro_judge_tune", oracle_warm_only: bool = False, echo=print) -> str | None:
    """Measure ``settings`` x ``seeds`` on val (resuming from ``<out>.json``), write ``<out>.json`` / ``<out>.md`` and
    return the setting the rule selects; ``oracle_warm_only``: only the exact reader under the warm Rubricor's
    rubrics, per seed (returns None). The CLI is ``rubricflow roro-judge-tune`` (flows/cli_roro.py)."""
    import json

    from rubricflow.io import atomic_write_text, write_json
    from rubricflow.methods.roro.stages import roro_threads

    settings = list(SETTINGS) if settings is None else settings
    seeds = list(SEEDS) if seeds is None else seeds
    unknown = [n for n in settings if n not in SETTINGS]
    if unknown:
        raise ValueError(f"unknown judge_tune setting(s) {unknown}: expected names from {list(SETTINGS)}")
    if oracle_warm_only:
        with roro_threads(rc):
            for seed in seeds:
                acc = oracle_warm(rc, seed)
                echo(f"exact reader, warm Rubricor, seed {seed}: " + " ".join(
                    f"{k.removeprefix('acc_')} {v:.3f}" for k, v in acc.items() if k.startswith("acc_") or k == "pairwise_acc"))
        return None
    js = Path(out + ".json")
    results: dict[str, dict[int, dict]] = {}
    if js.exists():  # resume: settings and seeds already measured are kept
        results = {n: {int(s): r for s, r in d.items()} for n, d in json.loads(js.read_text())["results"].items()}
    with roro_threads(rc):
        for name in settings:
            for seed in seeds:
                if seed in results.get(name, {}):
                    continue
                r = run_one(rc, SETTINGS[name], seed)
                results.setdefault(name, {})[seed] = r
                echo(f"{name} seed {seed}: kept {r['kept_phase']} process {r['kept_process']:.3f} overall "
                     f"{r['kept_overall']:.3f} ({r['seconds']:.0f} s)")
                write_json(js, {"seeds": seeds, "results": results})
    chosen = select({n: results[n] for n in settings if n in results})
    write_json(js, {"seeds": seeds, "results": results, "selected": chosen, "selected_setting": SETTINGS[chosen]})
    atomic_write_text(Path(out + ".md"), report({n: results[n] for n in settings if n in results}, chosen))
    return chosen
