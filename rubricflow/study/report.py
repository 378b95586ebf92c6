"""Study reports: markdown tables, a JSON record and a plot of every variant's mean and interval."""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path

from rubricflow.sections import ConfigError
from rubricflow.study.provenance import EXPLORATORY_STAMP
from rubricflow.study.spec import StudySpec
from rubricflow.study.stats import aggregate, select, t_interval
from rubricflow.util.io import atomic_write_text, save_figure, write_json


def machine() -> str:
    """CPU model (/proc/cpuinfo, else platform.processor()), core count and OS."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine() or "unknown CPU"
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def start_lines(starts: dict, title: str) -> list[str]:
    """A table of the seeds' start summaries (their scalar fields); nothing when no start was built."""
    if not starts:
        return []
    cols = sorted({k for s in starts.values() for k, v in (s or {}).items() if not isinstance(v, (dict, list))})
    lines = ["", title, "", "| seed | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for seed, s in sorted(starts.items()):
        lines.append(f"| {seed} | " + " | ".join(_cell((s or {}).get(c)) for c in cols) + " |")
    return lines


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _cell(x) -> str:
    return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def _pm(cell: Mapping) -> str:
    if cell.get("mean") is None:
        return "n/a"
    if cell.get("half_width") is None:
        return f"{cell['mean']:.3f} (n=1)"
    return f"{cell['mean']:.3f} ± {cell['half_width']:.3f}"


def render_markdown(name: str, agg: Mapping, info: Mapping, chosen: Mapping | None = None) -> str:
    pct = round(100 * agg["confidence"])
    metrics = agg["metrics"]
    split = info.get("eval_split", "test")
    lines = [f"# Study `{name}`", ""]
    if info.get("exploratory"):
        lines += [EXPLORATORY_STAMP.format(why=f": {info['exploratory']}" if isinstance(info["exploratory"], str)
                                           else ""), ""]
    lines += [
        f"Per variant: mean ± half-width of the {pct}% t-interval over seeds, {split} split"
        + (f" ({info['eval_samples']} samples)" if info.get("eval_samples") else "")
        + ". Claims: paired per-seed difference a - b.",
        "",
        "| variant | n seeds | " + " | ".join(metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for v, row in agg["variants"].items():
        lines.append(f"| {v} | {len(row['seeds'])} | " + " | ".join(_pm(row[m]) for m in metrics) + " |")
    if chosen is not None:
        cost = chosen.get("cost") or []
        rule = (f"; every setting within {chosen['tolerance']:g} of the best competes on cost ({', '.join(cost)}: "
                "lower is cheaper, in that order) and the cheapest wins" if cost and chosen.get("tolerance") else "")
        g = chosen.get("guard")
        if g:
            rule += (f"; a setting is eligible only if its mean {g['metric']} is at least {g['baseline']}'s minus "
                     f"{g['margin']:g}")
        pre = chosen.get("require_preconditions")
        if pre:
            rule += "; a setting is eligible only if every precondition on its variants holds"
        lines += [
            "",
            f"Selection on {split}: each setting's score is the mean over its variants of their mean "
            f"{chosen['metric']} ({chosen['direction']} is better){rule}.",
            "",
            "| setting | variants | score | score per seed | " + "".join(f"{c} | " for c in cost)
            + ("guard | " if g else "") + ("preconditions | " if pre else "") + "selected |",
            "|---|---|---|---|" + "---|" * len(cost) + ("---|" if g else "") + ("---|" if pre else "") + "---|",
        ]
        for k, v in chosen["settings"].items():
            members = ", ".join(f"{m} {_fmt(x)}" for m, x in v["means"].items())
            costs = "".join(f"{_fmt(c)} | " for c in v.get("cost", []))
            guard = (f"{_fmt(v.get('guard'))} {'ok' if v.get('guard_ok') else 'fails'} | " if g else "")
            if pre:
                guard += ("hold | " if v.get("preconditions_ok") else
                          "fail: " + ", ".join(v.get("preconditions_failed", [])) + " | ")
            per_seed = v.get("per_seed")
            seeds = ", ".join(f"{seed}: {_fmt(x)}" for seed, x in per_seed.items()) if per_seed else "n/a"
            lines.append(f"| {k} | {members} | {_fmt(v['score'])} | {seeds} | {costs}{guard}"
                         f"{'**selected**' if k == chosen['selected'] else ''} |")
        gaps = {k: v["missing"] for k, v in chosen["settings"].items() if v.get("missing")}
        if gaps:
            def where(w) -> str:
                return w if isinstance(w, str) else "seed " + ", ".join(map(str, w))

            lines += ["", f"Not eligible, {chosen['metric']} missing: " + "; ".join(
                f"{k} (" + ", ".join(f"{m} {where(w)}" for m, w in miss.items()) + ")" for k, miss in gaps.items())
                + "."]
        fb = chosen.get("fallback")
        if fb:
            lines += ["", f"No setting has {chosen['metric']} on every unit; by the fallback rule (most_defined) the "
                      "settings with the most variants that have it on every seed ("
                      + ", ".join(f"{k} {n}" for k, n in fb["defined"].items()) + ") compete on the mean over those "
                      "variants: " + (", ".join(f"{k} {_fmt(x)}" for k, x in fb["scores"].items())
                                      if fb["scores"] else fb.get("why_none", "")) + "."]
        lines += ["", f"**selected: {chosen['selected']}**"]
        if chosen.get("grid_end") is not None:
            lines += ["", f"**{chosen['grid_end']} is an end of the grid**: where the study's rule extends the grid "
                      "one step past its winning end, that step runs before the choice is used."]
        elif chosen.get("grid") and chosen.get("selected") is not None:
            lines += ["", "The winner is inside the grid."]
    bad = agg.get("invalid_values") or []
    if bad:
        lines += ["", f"**{len(bad)} value(s) are not finite numbers and are left out of the means and claims:** "
                  + "; ".join(f"{b['variant']}/seed{b['seed']} {b['metric']} = {b['value']}" for b in bad[:20])
                  + (f"; and {len(bad) - 20} more" if len(bad) > 20 else "")]
    lines += precondition_lines(agg.get("preconditions") or [])
    lines += claim_lines(agg["claims"], pct)
    paired = [c for c in agg["claims"] if "pair_values" in c]
    if paired:
        lines += ["", "Claims on a pair metric (defined for the two units of a seed together), per seed `a / b` "
                  "(n/a: the pair has no value on that seed):", ""]
        for c in paired:
            per_seed = "; ".join(f"{s}: {_fmt(xa)} / {_fmt(xb)}" for s, (xa, xb) in sorted(c["pair_values"].items()))
            lines.append(f"- {c['a']} vs {c['b']} ({c['metric']}): {per_seed or 'no paired seeds'}")
    lines += start_lines(info.get("seed_starts") or {}, "Start of each seed (built once per seed, shared by its "
                         "variants):")
    for g, starts in (info.get("group_starts") or {}).items():
        lines += start_lines(starts, f"Start of each seed in start group `{g}` (built once per seed, shared by the "
                             "group's variants):")
    lines += [
        "",
        f"- seeds: {', '.join(str(s) for s in info.get('seeds', []))} (study parameters, fixed in advance)",
        "- variants: " + "; ".join(f"`{v}`: " + ("untrained start checkpoint" if v in info.get("untrained", ())
                                                   else str(info["overrides"].get(v) or "params.yaml as it is"))
                                   for v in agg["variants"]) if info.get("overrides") else "- variants: n/a",
        f"- shared, not per seed: {info.get('shared', 'n/a')}",
        f"- machine: {info.get('machine', 'n/a')}",
        f"- git commit: {info.get('git_commit', 'n/a')}",
        f"- params hash: {info.get('params_hash') or 'n/a'}",
        f"- units: {info.get('n_units', 'n/a')}",
    ]
    rec = info.get("inputs") or {}
    if rec.get("digest"):
        lines.append(f"- unit inputs: digest {rec['digest']}; "
                     + "; ".join(f"{k} {v}" for k, v in rec["parts"].items()))
    if "inputs_differ" in info:
        differ = info.get("inputs_differ") or {}
        parts = sorted({p for v in differ.values() for p in v})
        lines.append(f"- {len(differ)} unit(s) finished on other inputs than this commit's ({', '.join(parts)} "
                     f"differ): {', '.join(sorted(differ))}" if differ
                     else "- every unit's inputs are this commit's")
    if info.get("provenance_note"):
        lines.append(f"- {info['provenance_note']}")
    lines.append("")
    return "\n".join(lines)


def precondition_lines(pres: Sequence[Mapping]) -> list[str]:
    """The preconditions table: per precondition its rule, per-seed values (meets it: yes/no), and the outcome."""
    if not pres:
        return []
    lines = ["", "Preconditions (evaluated before the claims; a claim gated by a failed one is untestable):", "",
             "| precondition | value per seed | rule | seeds meeting it | holds | gates |", "|---|---|---|---|---|---|"]
    for p in pres:
        what = f"{p['variant']} {p['metric']}"
        if p.get("minus") or p.get("minus_metric"):
            what += f" - {p.get('minus') or p['variant']} {p.get('minus_metric') or p['metric']}"
        rule = f"{'>=' if p['direction'] == 'higher' else '<='} {p['threshold']:g} on >= {p['need']} of {p['n_seeds']}"
        per_seed = ", ".join(f"{s}: {_fmt(v)} {'yes' if p['met'][s] else 'no'}" for s, v in p["values"].items())
        name = p["name"] + (" (declared after the units ran)" if p.get("added_after_results") else "")
        gates = "; ".join(p["gates"]) or "the setting's eligibility (selection)"
        lines.append(f"| {name}: {what} | {per_seed or 'no seeds'} | {rule} | {p['n_met']}/{p['n_seeds']} | "
                     f"**{'holds' if p['holds'] else 'fails'}** | {gates} |")
    descr = [f"- {p['name']}: {p['description']}" for p in pres if p.get("description")]
    return lines + ([""] + descr if descr else [])


def claim_lines(claims: Sequence[Mapping], pct: int) -> list[str]:
    """The claims table: raw interval and p, the Holm-adjusted p over the family, the smallest detectable effect and
    the verdict at the adjusted level."""
    if not claims:
        return []
    m = next((c.get("family_size") for c in claims if c.get("family_size") is not None), 0)
    lines = [
        "",
        f"Claims: two-sided paired t; p (Holm) is Holm-adjusted over the {m} pre-registered testable claim(s); the "
        f"verdict is read at the adjusted level ({100 - pct}%); untestable and exploratory claims are outside the "
        "family (an exploratory claim keeps its raw verdict). MDE: the smallest true difference these seeds detect "
        "with 80% power (at the Bonferroni level for a claim in the family).",
        "",
        f"| claim | metric | direction | n pairs | difference | {pct}% CI | p | p (Holm) | MDE | verdict | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        ci = "n/a" if c["ci_low"] is None else f"[{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
        direction = c["direction"] + (f" (margin {c['margin']:g})" if c.get("margin") else "")
        verdict = c["verdict"]
        if verdict == "untestable":
            verdict = f"untestable (precondition {', '.join(c['untestable_because'])} failed)"
        label = c.get("name") or f"{c['a']} vs {c['b']}"
        metric = c["metric"] + (f" vs {c['b_metric']}" if c.get("b_metric") else "")
        lines.append(f"| {label} | {metric} | {direction} | {c['n_pairs']} | {_fmt(c['diff_mean'])} | {ci} | "
                     f"{_fmt(c.get('p_value'))} | {_fmt(c.get('p_adjusted'))} | {_fmt(c.get('mde'))} | "
                     f"**{verdict}** | {c['note']} |")
    return lines


def plot_interval(values: Sequence[float], confidence: float) -> tuple[float | None, float | None, str]:
    """The interval a figure draws for one variant's per-seed values, kept inside the metric's range: values that
    are all 0 or 1 (a proportion of seeds, e.g. ``switched``) get the Wilson score interval (scipy's
    ``binomtest(...).proportion_ci``); values inside [0, 1] (accuracies, rates) the t-interval clipped to [0, 1];
    others the t-interval. Returns (low, high, method)."""
    from scipy.stats import binomtest


    xs = [float(v) for v in values]
    if len(xs) < 2:
        return None, None, "none"
    if all(x in (0.0, 1.0) for x in xs):
        ci = binomtest(int(sum(xs)), len(xs)).proportion_ci(confidence_level=confidence, method="wilson")
        return float(ci.low), float(ci.high), "wilson"
    t = t_interval(xs, confidence)
    if all(0.0 <= x <= 1.0 for x in xs):
        return max(0.0, t["ci_low"]), min(1.0, t["ci_high"]), "t, clipped to [0, 1]"
    return t["ci_low"], t["ci_high"], "t"


def plot_study(name: str, agg: Mapping, path: Path) -> Path:
    """One panel per metric in a grid of at most four columns: per-variant means with intervals that stay inside
    the metric's range (:func:`plot_interval`; the caption names the methods used)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = agg["metrics"]
    variants = list(agg["variants"])
    ncols = min(4, max(1, len(metrics)))
    nrows = math.ceil(len(metrics) / ncols) if metrics else 1
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows + 0.9), squeeze=False)
    used: set[str] = set()
    for i, ax in enumerate(axes.flat):
        if i >= len(metrics):
            ax.set_visible(False)
            continue
        m = metrics[i]
        means, lows, highs = [], [], []
        for v in variants:
            cell = agg["variants"][v][m]
            mean = cell["mean"]
            lo, hi, how = plot_interval(list((cell.get("values") or {}).values()), agg["confidence"])
            if lo is not None:
                used.add(how)
            means.append(math.nan if mean is None else mean)
            lows.append(0.0 if lo is None or mean is None else max(0.0, mean - lo))
            highs.append(0.0 if hi is None or mean is None else max(0.0, hi - mean))
        xs = range(len(variants))
        ax.bar(xs, means, yerr=[lows, highs], capsize=3, color="#4c72b0")
        ax.set_xticks(list(xs), variants, rotation=40, ha="right", fontsize=8)
        ax.set_title(m, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    pct = round(100 * agg["confidence"])
    said = {"wilson": "Wilson for 0/1 values", "t, clipped to [0, 1]": "t clipped to [0, 1] for values in [0, 1]",
            "t": "t otherwise"}
    methods = "; ".join(said[k] for k in said if k in used) or "none: one seed"
    fig.suptitle(f"study {name}: mean over seeds, {pct}% intervals ({methods})", fontsize=10)
    save_figure(fig, path, dpi=100)
    return path


def write_report(name: str, spec: StudySpec, results: Sequence[Mapping], info: Mapping,
                 report_name: str | None = None, report_extras=None, pair_metric=None,
                 exploratory_claims: Mapping[str, str] | None = None) -> tuple[dict[str, Path], dict]:
    """Aggregate ``results`` and write ``<report_dir>/<report_name>.md``, ``.json`` and ``.png`` (``report_name``
    defaults to the study name; another name keeps, say, a second seed set's report beside the first;
    ``pair_metric``: the method's, for claims on ``spec.pair_metrics``; ``exploratory_claims``: claim key -> why it
    is exploratory, e.g. its seeds were used before with another engine). Returns the paths and the aggregate the
    report was written from."""
    agg = aggregate(results, spec.claims, spec.metrics, spec.confidence, spec.pair_metrics, pair_metric,
                    spec.preconditions, exploratory_claims)
    chosen = select(agg, spec.selection)
    out = Path(spec.report_dir)
    stem = report_name or name
    if not stem or "/" in stem or stem.startswith("."):
        raise ConfigError(f"study report name {stem!r}: expected a plain file name")
    paths = {"md": out / f"{stem}.md", "json": out / f"{stem}.json", "png": out / f"{stem}.png"}
    extras = report_extras(name, spec, results, out / stem) if report_extras else {}
    md = render_markdown(name, agg, info, chosen)
    if extras.get("markdown"):
        md = md.rstrip("\n") + "\n" + "\n".join(extras["markdown"]) + "\n"
    atomic_write_text(paths["md"], md)
    paths.update(extras.get("files") or {})
    units = [{k: r.get(k) for k in ("variant", "seed", "metrics", "duration_s", "inputs")} for r in results]
    write_json(paths["json"], json_safe({"study": name, **info, **agg, "selection": chosen, "units": units,
                                          **({"extras": extras["json"]} if extras.get("json") else {})}))
    plot_study(name, agg, paths["png"])
    return paths, agg


def json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x
