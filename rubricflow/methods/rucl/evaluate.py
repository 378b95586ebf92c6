"""RuCL evaluation: the SFT start and the RuCL policy on held-out samples, answers *and* reasoning.

Greedy responses of both policies on the test split are scored by outcome correctness (rubricflow.evaluation.answers)
and by the judge on the tiered rubrics (S_F, S_A per response, rubricflow.methods.rucl.rewards.tier_scores). The
reward-hacking symptom RuCL targets (right answer, wrong reasoning) is measured twice:

* ``correct_but_flawed``: the share of correct answers whose trace the *independent* strict verifier
  (rubricflow.evaluation.trace_check: every ground-truth fact stated correctly, nothing contradicted or invented)
  rejects. It is not the reward's judge and uses no rubric, so RuCL lowering it is not circular.
* ``correct_but_flawed_relevant`` (greedy) and ``relevant_flaw_rate`` (sampled, the primary trace metric): the same
  restricted to the values the answer depends on (rubricflow.evaluation.trace_check.answer_relevant_flaws), so a misread
  of a quantity the answer does not use is not counted;
* ``correct_but_flawed_rubric``: the share of correct answers failing at least one applicable advanced rubric of
  the reward's judge (kept for comparison; partly circular by construction).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rubricflow.data.schema import read_dataset
from rubricflow.evaluation.answers import outcome_score
from rubricflow.evaluation.heldout import evaluate_sampled, greedy_metrics, greedy_responses
from rubricflow.judge.config import JudgeConfig
from rubricflow.judge.factory import make_judge
from rubricflow.judge.protocol import JudgeRequest
from rubricflow.methods.rucl.rewards import tier_map, tier_scores
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.rubrics.pool import load_tiers
from rubricflow.evaluation.trace_check import answer_relevant_flaws, trace_flaws
from rubricflow.sections import GenerationConfig


def _mean(xs) -> float | None:
    v = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(v) / len(v) if v else None


def score_responses(samples, responses: list[str], judge, rubrics, data_dir: str | Path) -> dict[str, Any]:
    """Accuracy (overall and per task), mean S_F / S_A, judge failures and the correct-but-flawed rate."""
    if len(samples) != len(responses):
        raise ValueError(f"{len(samples)} samples but {len(responses)} responses")
    outcome = [outcome_score(r, s.answer, s.answer_type) for s, r in zip(samples, responses)]
    strict = [float(bool(trace_flaws(s.facts, r))) for s, r, o in zip(samples, responses, outcome) if o == 1.0]
    relevant = [float(bool(answer_relevant_flaws(s.facts, r))) for s, r, o in zip(samples, responses, outcome)
                if o == 1.0]
    out: dict[str, Any] = {"n": len(samples), "accuracy": _mean(outcome) or 0.0, "correct_but_flawed": _mean(strict),
                           "correct_but_flawed_relevant": _mean(relevant)}
    for task in sorted({s.task for s in samples}):
        out[f"accuracy/{task}"] = _mean(o for s, o in zip(samples, outcome) if s.task == task)
    if judge is None or not rubrics:
        return out
    root = Path(data_dir).resolve()
    reqs = [JudgeRequest(f"{s.id}#eval", s.question, r, list(rubrics), [str(root / p) for p in s.images], s.facts,
                         s.answer) for s, r in zip(samples, responses)]
    judgments = judge.judge(reqs)
    tiers = tier_map(rubrics)
    s_f, s_a, flawed = [], [], []
    for o, j in zip(outcome, judgments):
        if j.failed:
            continue
        sc = tier_scores(j, tiers)
        s_f.append(sc["foundational"][0])
        s_a.append(sc["advanced"][0])
        if o == 1.0 and sc["advanced"][1] > 0:
            flawed.append(float(sc["advanced"][0] < 1.0))
    out.update({
        "s_f": _mean(s_f),
        "s_a": _mean(s_a),
        "judge_failures": sum(j.failed for j in judgments),
        "correct_but_flawed_rubric": _mean(flawed),
    })
    return out


def per_task(samples, limit: int | None = None) -> list:
    """``samples`` grouped by task (tasks sorted, file order within a task), the first ``limit`` of each."""
    tasks = sorted({s.task for s in samples})
    return [s for task in tasks for s in [x for x in samples if x.task == task][:limit]]


def evaluate_policies(
    rcfg: RuCLConfig,
    judge_cfg: JudgeConfig,
    data_dir: str | Path,
    generation: GenerationConfig,
    secret_resolver: Callable[[str], str] | None = None,
) -> dict:
    """Every ``rucl.eval_policies`` checkpoint on every problem of the ``rucl.eval_split`` split (test in the final
    evaluation; val in a selection study): greedy responses scored by :func:`score_responses` and per question type,
    and ``rucl.eval_k`` samples per problem at the GRPO temperature (``rubricflow.evaluation.heldout.evaluate_sampled``:
    the sampled accuracy, pass@k, clean pass@k), on the same sampling seed for every policy; plus each policy's gains
    over ``sft``. ``diff_accuracy`` / ``diff_sampled_accuracy`` name the bar-chart difference question (every bar must
    be read; no 1-in-3 guess), a readout no shortcut satisfies."""
    from models.loader import load_policy

    held_out = read_dataset(data_dir, split=rcfg.eval_split)
    samples = per_task(held_out, rcfg.train_limit if rcfg.eval_split == rcfg.train_split else None)
    rubrics = load_tiers(rcfg.tiers_path) if Path(rcfg.tiers_path).exists() else []
    judge = make_judge(judge_cfg, secret_resolver, image_root=data_dir) if rubrics else None
    result: dict[str, Any] = {"eval_samples": len(samples), "eval_split": rcfg.eval_split,
                              "rubrics": [r.id for r in rubrics]}
    missing = {n: p for n, p in rcfg.eval_policies.items() if not (Path(p) / "config.json").exists()}
    if missing:
        raise FileNotFoundError(f"rucl.eval_policies: no checkpoint for {missing}; train them first (dvc repro)")
    for name, path in rcfg.eval_policies.items():
        model, proc = load_policy(path)
        resp = greedy_responses(model, proc, data_dir, samples, generation)
        m = score_responses(samples, resp, judge, rubrics, data_dir)
        m.update({k: v for k, v in greedy_metrics(samples, resp).items() if k != "accuracy/overall"})
        m.update(evaluate_sampled(model, proc, data_dir, samples, generation, rcfg.eval_k, rcfg.grpo.temperature,
                                  rcfg.eval_seed))
        m["diff_accuracy"] = m.get("accuracy/qtype_diff")
        m["diff_sampled_accuracy"] = m.get("sampled_accuracy/qtype_diff")
        result[name] = m
    base = result.get("sft")
    if base is not None:
        for name in rcfg.eval_policies:
            if name != "sft":
                for key in ("accuracy", "sampled_accuracy"):
                    if base.get(key) is not None and result[name].get(key) is not None:
                        suffix = "" if key == "accuracy" else "_sampled"
                        result[f"accuracy_gain{suffix}/{name}"] = result[name][key] - base[key]
    return result
