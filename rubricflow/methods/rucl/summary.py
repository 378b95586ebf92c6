"""RuCL's lines of the run summary: the tiers, the GRPO runs (switch step, greedy and sampled val accuracy before and
after) and the held-out evaluation; the curriculum transition in a flow's run report and in `rubricflow compare`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rubricflow.pipeline.summary import load_report


def _tiers(path: Path) -> dict[str, str]:
    rows = load_report(path)
    if not isinstance(rows, list):
        return {}
    tiers: dict[str, list[str]] = {}
    for row in rows:
        if row.get("tier"):
            tiers.setdefault(row["tier"], []).append(row["id"])
    return {k: "/".join(v) for k, v in tiers.items()}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def summary_lines(r: Path) -> list[str]:
    out = []
    if (m := load_report(r / "stratify.json")):
        tiers = _tiers(r / "rubrics" / "stratification.json")
        out.append(f"stratify    {m['n_candidates']} candidates, {m['n_low_coverage']} dropped for coverage, "
                   f"kept {m['n_kept']}: foundational {tiers.get('foundational', m['n_foundational'])} "
                   f"(pass {_num(m['mean_pass_foundational'])}), advanced {tiers.get('advanced', m['n_advanced'])} "
                   f"(pass {_num(m['mean_pass_advanced'])}); {m['n_judge_failed']} failed judgments")
        if m.get("mean_pass_perception") is not None:
            first = {1.0: "yes", 0.0: "no"}.get(m.get("perception_first"), "n/a")
            out.append(f"{'':<12}start passes perception {_num(m['mean_pass_perception'])}, deduction "
                       f"{_num(m.get('mean_pass_deduction'))}: perception first {first}; tiers perception-first "
                       f"{'yes' if m.get('tiers_perception_first') else 'no'}")
    for name in ("rucl", "rucl_outcome"):
        if (m := load_report(r / f"{name}.json")):
            t = m.get("transition_step")
            thr = m.get("curriculum_threshold")
            share = m.get("lambda_positive_share")
            out.append(f"{name + ' ':<12}{m['steps']} GRPO steps, curriculum switch at step "
                       f"{t if t is not None else 'never'}"
                       + (f" (S_F threshold {thr:.2f})" if thr is not None else "")
                       + f", lambda_t > 0 on {_pct(share)} of steps (at end {m['lambda_final']:.2f})"
                       if name == "rucl" else f"{name + ' ':<12}{m['steps']} GRPO steps, outcome reward only")
            hk = m.get("hacking") or {}
            if hk.get("rubric_first") is not None or hk.get("relevant_sound_first") is not None:
                out.append(f"{'':<12}hacking monitor (first -> last {hk.get('window')} steps): rubric reward "
                           f"{_num(hk.get('rubric_first'))} -> {_num(hk.get('rubric_last'))}, paid to wrong answers "
                           f"{_num(hk.get('rubric_to_wrong_first'))} -> {_num(hk.get('rubric_to_wrong_last'))}, "
                           f"answer-relevant sound share of correct answers {_num(hk.get('relevant_sound_first'))} -> "
                           f"{_num(hk.get('relevant_sound_last'))}" + ("  WARNING: " + hk["message"] if hk.get("warn")
                                                                      else ""))
            before, after = m.get("accuracy_before") or {}, m.get("accuracy_after") or {}
            sb, sa = m.get("sampled_before") or {}, m.get("sampled_after") or {}
            if before and sa:
                out.append(f"{'':<12}val greedy {_pct(before.get('overall'))} -> {_pct(after.get('overall'))}, sampled "
                           f"{_pct(sb.get('sampled_accuracy/overall'))} -> {_pct(sa.get('sampled_accuracy/overall'))}, "
                           f"pass@k {_pct(sb.get('pass_at_k/overall'))} -> {_pct(sa.get('pass_at_k/overall'))}")
    if (m := load_report(r / "rucl_eval.json")):
        rows = [name for name in ("sft", "outcome", "rucl") if isinstance(m.get(name), dict)]
        out.append(f"rucl eval   test ({m['eval_samples']}), greedy / sampled / clean pass@k: " + ", ".join(
            f"{n} {_pct(m[n].get('accuracy'))} / {_pct(m[n].get('sampled_accuracy'))} / "
            f"{_pct(m[n].get('clean_pass_at_k'))}" for n in rows))
        out.append("            difference question (sampled): "
                   + ", ".join(f"{n} {_pct(m[n].get('diff_sampled_accuracy'))}" for n in rows)
                   + "; correct but flawed (strict verifier): "
                   + ", ".join(f"{n} {_num(m[n].get('correct_but_flawed'))}" for n in rows))
        out.append("            answer-relevant flaw rate of correct sampled answers (independent readout): "
                   + ", ".join(f"{n} {_num(m[n].get('relevant_flaw_rate'))}" for n in rows))
    return out


def transition_report_lines(outcomes: list[dict]) -> list[str]:
    """The run report's transition line: the last outcome whose metrics report ``transition_step`` (the GRPO
    stage; None = never switched)."""
    found = [(o["stage"], o["metrics"]["transition_step"]) for o in outcomes
             if "transition_step" in (o.get("metrics") or {})]
    if not found:
        return []
    stage, t = found[-1]
    return [f"- curriculum transition: step **{t}** (stage {stage})" if t is not None
            else f"- curriculum transition: none (stage {stage} never switched to the advanced rubrics)"]


def transition_column(rec: Mapping[str, Any]) -> Any:
    """The transition step of one MLflow run (``rubricflow compare``): the ``curriculum/transition_step`` metric,
    else the ``curriculum.transition_step`` tag, else the ``step`` of the ``event.curriculum_transition`` tag, else
    None (never switched)."""
    v = rec.get("metrics.curriculum/transition_step")
    if v is not None and not (isinstance(v, float) and math.isnan(v)):
        return int(v)
    step = rec.get("tags.curriculum.transition_step")
    if isinstance(step, str) and step.isdigit():
        return int(step)
    tag = rec.get("tags.event.curriculum_transition")
    if isinstance(tag, str) and tag:
        try:
            return json.loads(tag).get("step")
        except (json.JSONDecodeError, AttributeError):
            return tag[:40]
    return None
