"""RuCL's lines of the run summary: the tiers, the curriculum of the GRPO run and the held-out evaluation."""

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
    if (m := load_report(r / "rucl.json")):
        t = m.get("transition_step")
        out.append(f"rucl        {m['steps']} GRPO steps, curriculum transition at step "
                   f"{t if t is not None else 'never'}, lambda_t at end {m['lambda_final']:.2f}")
    if (m := load_report(r / "rucl_eval.json")):
        out.append(f"rucl eval   held-out ({m['eval_samples']}): " + ", ".join(
            f"{name} {m[name]['accuracy']:.1%} (S_F {m[name]['s_f']:.2f}, S_A {m[name]['s_a']:.2f})"
            for name in ("sft", "outcome", "rucl") if isinstance(m.get(name), dict)))
    return out
