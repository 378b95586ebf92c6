"""The Rubricor and the Judge (both tiny LMs, ``lm``) and their alternating optimisation on preference
pairs (``roro_rubricor_judge``).

Method: rejection-sampling fine-tuning (expert iteration), not RL (``roro.rubricor_judge.optimizer: rft``). Why:
the training signal is a pairwise ordering of two scores, available only after both trajectories of a pair are
judged; with tiny LMs, sampling K candidates, keeping the ones that order pairs correctly and fine-tuning on them
(with the shared SFT utility) optimises exactly that ordering, needs no value baseline or advantage normalisation
over a binary, very sparse reward, and costs one SFT pass per phase — affordable inside the CPU budget, where a GRPO
loop over hundreds of judge generations per step is not. It is the 0/1-reward special case of policy-gradient RL
(only the kept samples get a gradient, all with the same weight). Every kept target is re-rendered as canonical
JSON, so format never drifts.

Round 0 (``warm``): templated SFT with deliberately uninformative content (``prompts.random_rubric`` /
``noisy_judgments``): both LMs learn the output shapes, not what makes routing good.

Round r >= 1:

* **Judge phase** (rubrics fixed: the current Rubricor's greedy rubric per problem). For each training pair,
  sample K judgments of each trajectory; keep the highest-scoring judgment of the chosen trajectory and the
  lowest-scoring one of the rejected trajectory when they order the pair correctly; SFT the Judge on them.
* **Rubricor phase** (Judge fixed). For each training problem, sample K rubrics; the Judge scores the problem's
  paired trajectories under each; keep the rubric with the best pairwise accuracy (ties: larger mean score margin)
  when it orders at least one pair correctly; SFT the Rubricor on them.

A trajectory's process score is the Judge's, read as ``score_mode`` says (``sampled``, the paper's, or ``expected``;
``scoring.process_scores``).

After warm start and after every phase, the pairwise accuracy is measured on the pairs of the val problems (rubrics
written greedily by the current Rubricor, scores from the current Judge), overall and per pair category
(``pairwise``). The Judge and Rubricor kept at the end (for the router's process reward) are those of the phase with
the best val accuracy (``select_on: val``; ``last`` keeps the last phase). Test pairs are never read here: the kept
Judge is measured on them by the final evaluation (``roro_eval``).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from collections import defaultdict
from collections.abc import Callable

import torch

from rubricflow.util.io import write_json
from rubricflow.pipeline.progress import progress
from rubricflow.methods.roro.config import RoRoConfig, RubricLMConfig, RubricorJudgeConfig
from rubricflow.methods.roro.judge.scoring import judge_scores, process_scores
from rubricflow.methods.roro.judge.pairs import Pair, read_trajectory_pairs
from rubricflow.methods.roro.judge.pairwise import pair_credit, pairwise_accuracy
from rubricflow.methods.roro.paths import pairs_path, rounds_path, rubrics_path, trajectories_path
from rubricflow.methods.roro.judge.prompts import (FAMILIES, FAMILY_SETS, judge_input, noisy_judgments, random_rubric,
                                                   reads_the_problem, rubricor_input)
from rubricflow.methods.roro.env.routing import Trajectory
from rubricflow.judge.protocol import Judgment, Parsed, Rubric
from rubricflow.methods.roro.judge.rubric import ParsedRubric, parse_rubric, render_judgment_json, render_rubric_json
from rubricflow.methods.roro.judge.lm import RubricLM, build_rubric_lms
from rubricflow.methods.roro.judge.rubricor import ProblemView, problem_views, save_rubrics, write_rubrics
from rubricflow.methods.roro.env.trajectories import read_trajectories

# ----------------------------------------------------------------------------------------------------------------
# Warm start


def warm_start_examples(views: dict[str, ProblemView], trajectories: list[Trajectory], rng: random.Random,
                        per_problem: int = 4, label_noise: float = 0.5, families=FAMILIES,
                        reads: str = "steps") -> tuple[list, list]:
    """(rubricor examples, judge examples): random rubrics over ``families``; Judge labels flipped with probability
    ``label_noise``; the Judge's input as ``reads`` (``judge_reads``) says, its literal readings against the problem
    when it reads it."""
    rub, jud = [], []
    for pid, v in views.items():
        for _ in range(per_problem):
            r = random_rubric(rng, len(v.slm_uncertainties), families)
            rub.append((rubricor_input(v.question, v.slm_uncertainties), render_rubric_json(r)))
    for t in trajectories:
        v = views[t.problem_id]
        r = random_rubric(rng, len(v.slm_uncertainties), families)
        jud.append((judge_input(v.question, r, t, reads),
                    render_judgment_json(noisy_judgments(rng, r, t, label_noise, reads_the_problem(reads)))))
    return rub, jud


def routing_tokenizer_corpus(views: dict[str, ProblemView], trajectories: list[Trajectory], seed: int,
                             families=FAMILIES, reads: str = "steps") -> list[str]:
    """Chat markers plus the Rubricor and Judge warm-start texts built from these routing trajectories (the tiny
    Judge and Rubricor tokenizers are trained on it)."""
    rng = random.Random(seed)
    rub, jud = warm_start_examples(views, trajectories, rng, per_problem=2, families=families,
                                   reads=reads)
    chat_marks = ["<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"] * 20
    return chat_marks + [c + "\n" + t for c, t in rub + jud]


def build_lms(rj_cfg: RubricorJudgeConfig, views: dict[str, ProblemView],
              trajectories: list[Trajectory]) -> tuple[RubricLM, RubricLM]:
    """The Judge and the Rubricor of ``rj_cfg`` before round 0: torch seeded with ``rj_cfg.seed``, their tokenizer
    trained on ``routing_tokenizer_corpus`` of these routes in the reading ``tokenizer_reads`` names (with the check
    marks as tokens where that reading or the Judge's is 'checked'), both with the configured criterion families."""
    families, reads = FAMILY_SETS[rj_cfg.families], rj_cfg.judge_reads
    torch.manual_seed(rj_cfg.seed)
    corpus_reads = reads if rj_cfg.tokenizer_reads == "own" else rj_cfg.tokenizer_reads
    corpus = routing_tokenizer_corpus(views, trajectories, rj_cfg.seed, families, corpus_reads)
    return build_rubric_lms(corpus, rj_cfg.judge, rj_cfg.rubricor, rj_cfg.batch_size, rj_cfg.seed, families, reads,
                            marks=corpus_reads == "checked" or reads == "checked")


def check_generation_cap(lm: RubricLM, examples: list[tuple[str, str]], field: str) -> None:
    """Refuse a generation cap shorter than the longest warm-start target of ``lm``: every rubric or judgment it
    wrote would be cut (a cut judgment misses its last criteria, which then count 0)."""
    longest = max((len(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) for _, t in examples), default=0)
    if longest + 1 > lm.max_new_tokens:  # + the end-of-turn token
        raise ValueError(f"{field}={lm.max_new_tokens}: the {lm.name}'s warm-start targets run up to {longest} tokens "
                         f"plus the end of turn; raise it to at least {longest + 1} (more criteria, e.g. "
                         "roro.rubricor_judge.families: six, make them longer)")


def warm_start(judge: RubricLM | None, rubricor: RubricLM | None, rj_cfg: RubricorJudgeConfig,
               views: dict[str, ProblemView], train_trajs: list[Trajectory]) -> None:
    """Round 0: templated SFT of the Rubricor, then of the Judge (either may be None: left out, the other trained
    exactly as in the alternation: the examples of both are drawn first, from ``rj_cfg.seed``)."""
    rng = random.Random(rj_cfg.seed)
    rub_ex, jud_ex = warm_start_examples(views, train_trajs, rng, label_noise=rj_cfg.warm_label_noise,
                                         families=FAMILY_SETS[rj_cfg.families],
                                         reads=rj_cfg.judge_reads)
    for lm, examples, role in ((rubricor, rub_ex, "rubricor"), (judge, jud_ex, "judge")):
        if lm is not None:
            check_generation_cap(lm, examples, f"roro.rubricor_judge.{role}.max_new_tokens")
    torch.manual_seed(rj_cfg.seed)
    if rubricor is not None:
        rubricor.sft(rub_ex, rj_cfg.rubricor.warm_steps, rj_cfg.rubricor.batch_size, rj_cfg.rubricor.lr, rj_cfg.seed)
    if judge is not None:
        judge.sft(jud_ex, rj_cfg.judge.warm_steps, rj_cfg.judge.batch_size, rj_cfg.judge.lr, rj_cfg.seed)


# ----------------------------------------------------------------------------------------------------------------
# The alternation


def judge_phase(judge: RubricLM, rubrics: dict[str, ParsedRubric], views: dict[str, ProblemView],
                trajectories: list[Trajectory], pairs: list[Pair], cfg: RubricLMConfig, seed: int) -> dict[str, float]:
    """Rejection sampling over judgments with the rubrics fixed; SFT the Judge on the kept ones."""
    usable = [p for p in pairs if not rubrics[p.problem_id].failed]
    need = sorted({i for p in usable for i in (p.chosen, p.rejected)})
    items = [(views[trajectories[i].problem_id].question, rubrics[trajectories[i].problem_id].value,
              trajectories[i]) for i in need]
    cands = dict(zip(need, judge_scores(judge, items, n=cfg.samples, temperature=cfg.temperature, seed=seed)))

    def complete(pj: Judgment) -> bool:
        return not pj.failed and not pj.missing

    # A trajectory is chosen in some pairs and rejected in others: its target is decided by its net record
    # (wins - losses), so no trajectory gets contradictory targets. Winners get their highest-scoring candidate,
    # losers their lowest; a selected candidate is kept when it orders the majority of the trajectory's pairs
    # correctly against the partners' selected candidates.
    net: dict[int, int] = defaultdict(int)
    for p in usable:
        net[p.chosen] += 1
        net[p.rejected] -= 1
    picked: dict[int, Judgment] = {}
    for i, v in net.items():
        good = [c for c in cands[i] if complete(c)]
        if v and good:
            picked[i] = max(good, key=lambda c: c.score) if v > 0 else min(good, key=lambda c: c.score)
    right: dict[int, list[bool]] = defaultdict(list)
    for p in usable:
        if p.chosen in picked and p.rejected in picked:
            ok = picked[p.chosen].score > picked[p.rejected].score
            right[p.chosen].append(ok)
            right[p.rejected].append(ok)
    examples = []
    for i, oks in right.items():
        if sum(oks) * 2 > len(oks):
            t = trajectories[i]
            examples.append((judge_input(views[t.problem_id].question, rubrics[t.problem_id].value, t,
                                         judge.reads),
                             render_judgment_json(picked[i].verdicts)))
    n_kept = sum(1 for p in usable if p.chosen in picked and p.rejected in picked
                 and picked[p.chosen].score > picked[p.rejected].score)
    n_cand = sum(len(v) for v in cands.values())
    losses = judge.sft(examples, cfg.rft_steps, cfg.batch_size, cfg.rft_lr, seed)
    return {
        "ordered_pairs": float(n_kept),
        "kept_trajectories": float(len(examples)),
        "usable_pairs": float(len(usable)),
        "candidate_failed_frac": sum(1 for v in cands.values() for c in v if c.failed) / max(1, n_cand),
        "sft_loss_last": losses[-1] if losses else float("nan"),
    }


def warm_style_weights(rubric: list[Rubric]) -> list[Rubric]:
    """Parsed (normalised) weights back to the warm-start style, one decimal with the largest at 0.9, so that the
    Rubricor's training targets keep one weight format."""
    top = max(c.weight for c in rubric)
    return [replace(c, weight=round(0.9 * c.weight / top, 1) if top > 0 else 0.0) for c in rubric]


def rubricor_phase(rubricor: RubricLM, judge: RubricLM, views: dict[str, ProblemView], trajectories: list[Trajectory],
                   pairs: list[Pair], cfg: RubricLMConfig, seed: int, n_problems: int, score_samples: int,
                   score_temperature: float, fixed_families: bool = True,
                   score_mode: str = "sampled", families=FAMILIES) -> dict[str, float]:
    """Rejection sampling over rubrics with the Judge fixed; SFT the Rubricor on each problem's best rubric
    (``n_problems`` training problems per phase, drawn with ``seed``)."""
    by_pid: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        by_pid[p.problem_id].append(p)
    pids = sorted(by_pid)
    if n_problems < len(pids):
        pids = sorted(random.Random(seed).sample(pids, n_problems))
    texts = rubricor.generate([rubricor_input(views[p].question, views[p].slm_uncertainties) for p in pids],
                              n=cfg.samples, temperature=cfg.temperature, seed=seed)
    cands = {pid: [parse_rubric(x) for x in row] for pid, row in zip(pids, texts)}
    if fixed_families:  # the tiny Judge reads the fixed family list: a rubric that drops or repeats one is unusable
        names = [n for n, _ in families]
        for pid in pids:
            cands[pid] = [r if r.ok and [c.id for c in r.value] == names
                          else Parsed("failed", reason="not the family list", raw=r.raw)
                          for r in cands[pid]]
    # one batched Judge call over every (candidate rubric, paired trajectory)
    items, keys = [], []
    for pid in pids:
        idx = sorted({i for p in by_pid[pid] for i in (p.chosen, p.rejected)})
        for ci, r in enumerate(cands[pid]):
            if r.failed:
                continue
            for i in idx:
                items.append((views[pid].question, r.value, trajectories[i]))
                keys.append((pid, ci, i))
    scores = dict(zip(keys, process_scores(judge, items, score_mode, score_samples, score_temperature, seed)))
    examples, accs = [], []
    for pid in pids:
        best = None
        for ci, r in enumerate(cands[pid]):
            if r.failed:
                continue
            credits, margins = [], []
            for p in by_pid[pid]:
                sc, sr = scores.get((pid, ci, p.chosen)), scores.get((pid, ci, p.rejected))
                credits.append(pair_credit(sc, sr))
                margins.append((sc - sr) if sc is not None and sr is not None else -1.0)
            key = (sum(credits) / len(credits), sum(margins) / len(margins))
            if best is None or key > best[0]:
                best = (key, r)
        if best is not None and best[0][0] > 0:
            accs.append(best[0][0])
            examples.append((rubricor_input(views[pid].question, views[pid].slm_uncertainties),
                             render_rubric_json(warm_style_weights(best[1].value))))
    n_cand = sum(len(v) for v in cands.values())
    losses = rubricor.sft(examples, cfg.rft_steps, cfg.batch_size, cfg.rft_lr, seed)
    return {
        "kept_problems": float(len(examples)),
        "problems": float(len(pids)),
        "kept_train_acc_mean": sum(accs) / len(accs) if accs else float("nan"),
        "candidate_failed_frac": sum(1 for v in cands.values() for c in v if c.failed) / max(1, n_cand),
        "sft_loss_last": losses[-1] if losses else float("nan"),
    }


def select_phase(rows: list[dict], select_on: str = "val") -> int:
    """Index of the phase to keep: the best val pairwise accuracy (``val``), the best val process-pair accuracy
    (``val_process``; ties: the better pairwise accuracy), ties then the earliest; or the last phase."""
    if not rows:
        raise ValueError("select_phase: no phases")
    if select_on == "last":
        return len(rows) - 1
    if select_on == "val":
        return max(range(len(rows)), key=lambda i: (rows[i]["val_pairwise_acc"], -i))
    if select_on == "val_process":
        if any(r.get("val_acc_process") is None for r in rows):
            raise ValueError("roro.rubricor_judge.select_on: val_process needs val process pairs (same outcome and "
                             "LRM calls, calls placed differently); the val split has none: use 'val'")
        return max(range(len(rows)), key=lambda i: (rows[i]["val_acc_process"], rows[i]["val_pairwise_acc"], -i))
    raise ValueError(f"roro.rubricor_judge.select_on: unknown rule {select_on!r}; expected 'val', 'val_process' "
                     "or 'last'")


def alternate(
    judge: RubricLM,
    rubricor: RubricLM,
    rj_cfg: RubricorJudgeConfig,
    trajectories: list[Trajectory],
    train_pairs: list[Pair],
    val_pairs: list[Pair],
    log: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Warm start + ``rj_cfg.rounds`` rounds; returns one row per phase with the val pairwise accuracy (overall and
    per pair category, ``val_*``); the phase :func:`select_phase` picks is loaded back into both LMs and marked
    ``selected``."""
    views = problem_views(trajectories)
    split_of = {t.problem_id: t.split for t in trajectories}
    for name, pairs, want in (("train_pairs", train_pairs, "train"), ("val_pairs", val_pairs, "val")):
        wrong = sorted({split_of[p.problem_id] for p in pairs} - {want})
        if wrong:  # training reads train pairs, selection val pairs; never test
            raise ValueError(f"alternate: {name} must be pairs of {want} problems, got problems of split {wrong}")
    train_pids = sorted({p.problem_id for p in train_pairs})
    val_pids = sorted({p.problem_id for p in val_pairs})
    train_trajs = [t for t in trajectories if t.problem_id in set(train_pids)]
    warm_start(judge, rubricor, rj_cfg, {p: views[p] for p in train_pids}, train_trajs)

    rows: list[dict] = []
    states: list[tuple[dict, dict]] = []
    clock = [time.perf_counter()]

    def evaluate(round_: int, phase: str, extra: dict) -> None:
        val_rubrics = write_rubrics(rubricor, views, val_pids)
        held = pairwise_accuracy(judge, val_rubrics, views, trajectories, val_pairs, rj_cfg.score_mode,
                                 rj_cfg.score_samples, rj_cfg.score_temperature, rj_cfg.seed + 7)
        row = {"round": round_, "phase": phase, **{f"val_{k}": v for k, v in held.items()},
               **{f"{phase}_{k}": v for k, v in extra.items()}, "phase_s": time.perf_counter() - clock[0]}
        states.append(({k: v.detach().clone() for k, v in judge.model.state_dict().items()},
                       {k: v.detach().clone() for k, v in rubricor.model.state_dict().items()}))
        rows.append(row)
        clock[0] = time.perf_counter()
        bar.advance(val_pairwise_acc=held["pairwise_acc"])
        process = held.get("acc_process")
        print(f"roro rubricor-judge: phase {len(rows)}/{n_phases} (round {round_} {phase}): val pairwise accuracy "
              f"{held['pairwise_acc']:.3f} over {held['n_pairs']:.0f} pairs"
              + (f" (process pairs {process:.3f})" if process is not None else "") + f", {row['phase_s']:.0f} s",
              flush=True)
        if log is not None:
            log(row)

    n_phases = 1 + 2 * rj_cfg.rounds
    with progress("roro rubricor-judge", total=n_phases) as bar:
        evaluate(0, "warm", {})
        for r in range(1, rj_cfg.rounds + 1):
            rubrics = write_rubrics(rubricor, views, train_pids)
            jm = judge_phase(judge, rubrics, views, trajectories, train_pairs, rj_cfg.judge, rj_cfg.seed + 100 * r)
            evaluate(r, "judge", jm)
            rm = rubricor_phase(rubricor, judge, views, trajectories, train_pairs, rj_cfg.rubricor,
                                rj_cfg.seed + 100 * r + 1, rj_cfg.rubricor_problems, rj_cfg.score_samples,
                                rj_cfg.score_temperature, rj_cfg.fixed_families, rj_cfg.score_mode,
                                FAMILY_SETS[rj_cfg.families])
            evaluate(r, "rubricor", rm)
    keep = select_phase(rows, rj_cfg.select_on)  # chosen on val pairs; test pairs are never read here
    judge.model.load_state_dict(states[keep][0])
    rubricor.model.load_state_dict(states[keep][1])
    judge._greedy.clear()
    rubricor._greedy.clear()
    for i, row in enumerate(rows):
        row["selected"] = i == keep
    return rows


# ----------------------------------------------------------------------------------------------------------------
# The stage


def run_rubricor_judge(rc: RoRoConfig, log: Callable[[str, dict], None] | None = None) -> dict:
    """Build the Judge and the Rubricor, alternate on the stored train pairs (selection on the val pairs), save the
    kept LMs, the kept Rubricor's rubric of every problem and the per-phase val accuracy; returns the phases and
    the kept phase's accuracy."""
    t0 = time.perf_counter()
    trajs = read_trajectories(trajectories_path(rc))
    pairs = read_trajectory_pairs(pairs_path(rc))
    if not pairs["train"] or not pairs["val"]:
        raise ValueError(f"{pairs_path(rc)}: need train and val pairs, got {len(pairs['train'])} / {len(pairs['val'])}")
    rj = rc.rubricor_judge
    views = problem_views(trajs)
    judge, rubricor = build_lms(rj, views, trajs)
    rows = alternate(judge, rubricor, rj, trajs, pairs["train"], pairs["val"],
                     log=(lambda row: log("rubricor_judge", row)) if log else None)
    judge.save(rj.judge.path)
    rubricor.save(rj.rubricor.path)
    rubrics = write_rubrics(rubricor, views, sorted(views))
    save_rubrics(rubrics_path(rc), rubrics)
    sel = next(r for r in rows if r["selected"])
    out = {
        "rounds": rows,
        "optimizer": rj.optimizer, "score_mode": rj.score_mode, "select_on": rj.select_on,
        "val_pairwise_acc_round0": rows[0]["val_pairwise_acc"],
        "val_pairwise_acc_final": rows[-1]["val_pairwise_acc"],
        "val_pairwise_acc_selected": sel["val_pairwise_acc"],
        "val_process_acc_selected": sel.get("val_acc_process"),
        "selected_phase": f"{sel['round']}/{sel['phase']}",
        "rubric_failed_frac": sum(r.failed for r in rubrics.values()) / max(1, len(rubrics)),
        "judge_generations": judge.n_generated, "rubricor_generations": rubricor.n_generated,
        "duration_s": time.perf_counter() - t0,
    }
    write_json(rounds_path(rc), [{"phase_index": i, "round": r["round"], "phase": r["phase"],
                                   **{k: r[k] for k in r if k.startswith("val_acc_") or k == "val_pairwise_acc"}}
                                  for i, r in enumerate(rows)])
    return out
