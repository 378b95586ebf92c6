"""Re-render a study report written before preconditions and the Holm adjustment (``rubricflow study <name>
--rerender-from <json>``): the per-unit metrics the old JSON keeps, the current spec's preconditions, raw and adjusted
verdicts; nothing is trained or evaluated again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rubricflow.sections import ConfigError
from rubricflow.study import provenance
from rubricflow.study.harness import study_spec, write_ledgered
from rubricflow.study.spec import Claim


def rerender(
    cfg: Any, name: str, source: str | Path, report_name: str | None = None, exploratory: bool = False,
) -> dict[str, Any]:
    """Re-render a report written before preconditions and the Holm adjustment from the per-unit metrics its JSON
    keeps (``units``), without running or reading any unit: the claims as they were run (from the JSON), the
    current spec's preconditions that gate them (marked as declared after the units ran), raw and adjusted
    verdicts. A claim on a pair metric takes its per-seed values from the JSON (``pair_values``); the method's
    extra sections (curves, tables) are not rebuilt: the report points to the source for them."""
    source = Path(source)
    try:
        old = json.loads(source.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{source}: cannot be read as a study report JSON ({e})") from None
    if not isinstance(old, dict) or not isinstance(old.get("units"), list) or not isinstance(old.get("claims"), list):
        raise ConfigError(f"{source}: expected a study report JSON with `units` and `claims` lists")
    if old.get("study") != name:
        raise ConfigError(f"{source}: is a report of study {old.get('study')!r}, not {name!r}")
    spec = study_spec(cfg, name)
    claims = [Claim(**{k: c[k] for k in Claim.model_fields if k in c}) for c in old["claims"]]
    keys = {c.key for c in claims}
    pres = [p.model_copy(update={"added_after_results": True, "gates": [g for g in p.gates if g in keys]})
            for p in spec.preconditions if any(g in keys for g in p.gates)]
    pair_metrics = sorted({c.metric for c in claims} & (set(spec.pair_metrics) | {c["metric"] for c in old["claims"]
                                                                                   if "pair_values" in c}))
    stored = {(c["a"], c["b"], c["metric"]): {int(s): v for s, v in c.get("pair_values", {}).items()}
              for c in old["claims"] if "pair_values" in c}

    def pair_metric(metric: str, ra: Mapping, rb: Mapping):
        values = stored.get((ra["variant"], rb["variant"], metric), {}).get(int(ra["seed"]))
        return tuple(values) if values else (None, None)

    rspec = spec.model_copy(update={"claims": claims, "preconditions": pres, "pair_metrics": pair_metrics,
                                    "metrics": [m for m in old.get("metrics", spec.metrics) if m not in pair_metrics],
                                    "seeds": old.get("seeds", spec.seeds),
                                    "variants": {v: (old.get("overrides") or {}).get(v, {})
                                                 for v in old.get("variants") or spec.variants}})
    results = [{"variant": u["variant"], "seed": u["seed"], "metrics": u.get("metrics") or {},
                "duration_s": u.get("duration_s")} for u in old["units"]]
    state = provenance.code_state([spec.report_dir])
    provenance.require_clean(state, exploratory, f"study {name} --rerender-from {source}")
    stem = report_name or name
    info = {k: old.get(k) for k in ("seeds", "variants", "overrides", "untrained", "method", "shared", "seed_starts",
                                     "group_starts", "profile", "eval_split", "eval_samples", "machine")}
    info["seed_starts"] = {int(k): v for k, v in (info.get("seed_starts") or {}).items()}
    if info.get("group_starts"):
        info["group_starts"] = {g: {int(k): v for k, v in ss.items()} for g, ss in info["group_starts"].items()}
    else:
        info.pop("group_starts")
    info.update({
        "n_units": len(results), "git_commit": state.commit + ("-dirty" if state.dirty else ""),
        "params_hash": provenance.params_hash(cfg), "inputs": {"digest": None, "parts": {}},
        "rerendered_from": {"path": source.as_posix(), "git_commit": old.get("git_commit")},
        "provenance_note": f"re-rendered from `{source.as_posix()}` (its units ran at commit "
        f"{old.get('git_commit')}; the method's extra sections, e.g. curves and tables, are there), with the "
        "preconditions declared after the units ran and the Holm adjustment; nothing was trained or evaluated again",
    })
    if exploratory:
        info["exploratory"] = True
    engine = provenance.engine_hash(rspec, {"rerendered_from": old.get("git_commit")}, results)
    entries = provenance.ledger_entries(name, stem, claims, results, engine, old.get("git_commit") or "unknown")
    # the method's sections are not rebuilt: the source's JSON extras are kept as they were
    paths, agg = write_ledgered(name, stem, rspec, results, info, entries, exploratory,
                                pair_metric=pair_metric if pair_metrics else None, json_extras=old.get("extras"))
    return {"units": len(results), "reports": {k: str(p) for k, p in paths.items()},
            "preconditions": {p["name"]: "holds" if p["holds"] else "fails" for p in agg["preconditions"]},
            "claims": {c["key"]: {"raw": c["verdict_raw"], "adjusted": c["verdict"]} for c in agg["claims"]}}
