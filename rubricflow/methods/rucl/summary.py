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
                   f"(pass {m['mean_pass_foundational']:.2f}), advanced {tiers.get('advanced', m['n_advanced'])} "
                   f"(pass {m['mean_pass_advanced']:.2f}); {m['n_judge_failed']} failed judgments")
    for name in ("rucl", "rucl_outcome"):
        if (m := load_report(r / f"{name}.json")):
            t = m.get("transition_step")
            out.append(f"{name + ' ':<12}{m['steps']} GRPO steps, curriculum switch at step "
                       f"{t if t is not None else 'never'} (lambda_t at end {m['lambda_final']:.2f})"
                       if name == "rucl" else f"{name + ' ':<12}{m['steps']} GRPO steps, outcome reward only")
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
    return out
