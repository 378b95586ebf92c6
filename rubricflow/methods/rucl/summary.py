"""RuCL's lines of the run summary: the tiers, the GRPO runs (switch step, greedy and sampled val accuracy before and
after) and the held-out evaluation."""

from __future__ import annotations

from pathlib import Path

from rubricflow.summary import load_report


def _tiers(path: Path) -> dict[str, str]:
    rows = load_report(path)
    if not isinstance(rows, list):
        return {}
    tiers: dict[str, list[str]] = {}
    for row in rows:
        if row.get("tier"):
            tiers.setdefault(row["tier"], []).append(row["id"])
    return {k: "/".join(v) for k, v in tiers.items()}


def summary_lines(r: Path) -> list[str]:
    out = []
    if (m := load_report(r / "stratify.json")):
        tiers = _tiers(r / "rubrics" / "stratification.json")
        out.append(f"stratify    {m['n_candidates']} candidates, {m['n_low_coverage']} dropped for coverage, "
                   f"kept {m['n_kept']}: foundational {tiers.get('foundational', m['n_foundational'])} "
                   f"(pass {m['mean_pass_foundational']:.2f}), advanced {tiers.get('advanced', m['n_advanced'])} "
                   f"(pass {m['mean_pass_advanced']:.2f}); {m['n_judge_failed']} failed judgments")
    for name in ("rucl", "rucl_outcome"):
        if (m := load_report(r / f"{name}.json")):
            t = m.get("transition_step")
            out.append(f"{name:<12}{m['steps']} GRPO steps, curriculum switch at step "
                       f"{t if t is not None else 'never'} (lambda_t at end {m['lambda_final']:.2f})"
                       if name == "rucl" else f"{name:<12}{m['steps']} GRPO steps, outcome reward only")
            before, after = m.get("accuracy_before") or {}, m.get("accuracy_after") or {}
            sb, sa = m.get("sampled_before") or {}, m.get("sampled_after") or {}
            if before and sa:
                out.append(f"{'':<12}val greedy {before['overall']:.1%} -> {after['overall']:.1%}, sampled "
                           f"{sb.get('sampled_accuracy/overall', float('nan')):.1%} -> "
                           f"{sa.get('sampled_accuracy/overall', float('nan')):.1%}, pass@k "
                           f"{sb.get('pass_at_k/overall', float('nan')):.1%} -> {sa.get('pass_at_k/overall', float('nan')):.1%}")
    if (m := load_report(r / "rucl_eval.json")):
        out.append(f"rucl eval   test ({m['eval_samples']}), greedy / sampled / clean pass@k: " + ", ".join(
            f"{name} {m[name]['accuracy']:.1%} / {m[name].get('sampled_accuracy') or float('nan'):.1%} / "
            f"{m[name].get('clean_pass_at_k') or float('nan'):.1%}"
            for name in ("sft", "outcome", "rucl") if isinstance(m.get(name), dict)))
        out.append("            difference question (sampled): " + ", ".join(
            f"{name} {m[name].get('diff_sampled_accuracy') or float('nan'):.1%}"
            for name in ("sft", "outcome", "rucl") if isinstance(m.get(name), dict))
            + "; correct but flawed (strict verifier): " + ", ".join(
            f"{name} {m[name].get('correct_but_flawed') or float('nan'):.2f}"
            for name in ("sft", "outcome", "rucl") if isinstance(m.get(name), dict)))
    return out
