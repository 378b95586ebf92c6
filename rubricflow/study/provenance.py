"""Where a study report comes from, and whether its claims are confirmations: the code state, the hashes a report
records, and the seed ledger.

* :func:`code_state`: the commit and the paths that differ from it (tracked changes and untracked files git does
  not ignore), leaving out the study's own report folder (its outputs). A study refuses to write a report from a
  tree that differs unless it is run as exploratory (``rubricflow study NAME --exploratory``), which stamps every
  page of the report.
* :func:`params_hash` / :func:`inputs_record` / :func:`engine_hash`: what a report records beside the commit: a
  hash of the effective params, the units' input hashes (data, starts, code) and the identity of the "engine" (the
  method's code, its config sections before per-unit overrides, the variants) that the seed ledger compares.
* The seed ledger (``<report_dir>/seed_ledger.json``, committed with the reports): every report written as a
  confirmation appends, per claim, the seeds it used with the claim's and the engine's hashes. A claim whose seeds
  were used before with another version of the claim or another engine is marked exploratory (its seeds have seen
  the data that motivated the change); confirmations run on seed sets never used before. Only entries recorded
  before the report's own first entry count, so a report regenerated later reads the same.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubricflow.sections import ConfigError
from rubricflow.util.io import write_json

LEDGER_FILE = "seed_ledger.json"
EXPLORATORY_STAMP = ("**Exploratory report** (written with `--exploratory`{why}): not a record; its verdicts "
                     "are not confirmations.")


def _sha(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CodeState:
    commit: str
    changed: tuple[str, ...] = field(default_factory=tuple)

    @property
    def dirty(self) -> bool:
        return bool(self.changed)


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def code_state(outputs: Sequence[str | Path] = (), root: Path | None = None) -> CodeState:
    """The commit of the project's code and the paths that differ from it, outputs (``outputs``: folders, e.g. the
    study's report folder) left out of both: the commit is the last one that changed anything outside them. A tree that
    is not a git checkout is ``unknown`` with no changes listed: the report says so."""
    root = Path(root or project_root())
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "-z"], cwd=root, capture_output=True, text=True,
                                timeout=30, check=True).stdout
    except (subprocess.SubprocessError, FileNotFoundError):
        return CodeState("unknown")
    skip = []
    for o in outputs:
        p = Path(o)
        p = p if p.is_absolute() else (Path.cwd() / p)
        try:
            skip.append(p.resolve().relative_to(root.resolve()).as_posix().rstrip("/") + "/")
        except ValueError:
            continue  # outside the tree: git does not see it
    if skip:  # the code's commit: the last one that changed anything but the outputs (a report committed after the
        # code it was written with still names that code's commit, and regenerates at any later commit)
        try:
            last = subprocess.run(["git", "log", "-1", "--format=%H", "--", ".",
                                   *(f":(exclude){s.rstrip('/')}" for s in skip)], cwd=root, capture_output=True,
                                  text=True, timeout=30, check=True).stdout.strip()
            commit = last or commit
        except subprocess.SubprocessError:
            pass
    changed = []
    entries = iter(status.split("\0"))
    for entry in entries:
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            next(entries, None)  # a rename's second field is its old path
        if not any((path.rstrip("/") + "/").startswith(s) or path.startswith(s) for s in skip):
            changed.append(path)
    return CodeState(commit, tuple(sorted(changed)))


def require_clean(state: CodeState, exploratory: bool, what: str) -> None:
    """Refuse ``what`` from a tree that differs from its commit unless exploratory."""
    if state.dirty and not exploratory:
        shown = ", ".join(state.changed[:8]) + (f" and {len(state.changed) - 8} more" if len(state.changed) > 8 else "")
        raise ConfigError(
            f"{what}: the working tree differs from commit {state.commit[:12]} ({shown}); a report of record must "
            "regenerate from its commit. Commit first, or pass --exploratory for a report stamped as exploratory")


def params_hash(cfg: Any) -> str:
    """A hash of the effective configuration (every section, as validated)."""
    return _sha(cfg.model_dump(mode="json"))


def inputs_record(results: Sequence[Mapping]) -> dict[str, Any]:
    """The units' input hashes: per part, the hash when every unit shares it, else how many distinct values there
    are (per-seed parts: the seed's start, the seed itself); and one digest over every unit's inputs."""
    per_unit = {f"{r.get('variant')}/seed{r.get('seed')}": r.get("inputs") for r in results}
    if not any(per_unit.values()):
        return {"digest": None, "parts": {}}
    parts: dict[str, set] = {}
    for inputs in per_unit.values():
        for k, v in (inputs or {}).items():
            parts.setdefault(k, set()).add(v)
    return {"digest": _sha(per_unit),
            "parts": {k: (next(iter(v)) if len(v) == 1 else f"{len(v)} distinct (per unit)")
                      for k, v in sorted(parts.items())}}


def engine_hash(spec: Any, base_sections: Mapping[str, Any], results: Sequence[Mapping]) -> str:
    """What "the same engine" means for the seed ledger: the method's code (the units' ``code`` input hashes), its
    config sections before per-unit overrides, and the variants."""
    code = sorted({(r.get("inputs") or {}).get("code") for r in results} - {None})
    return _sha({"code": code, "sections": base_sections, "variants": spec.variants, "untrained": spec.untrained,
                 "per_seed_start": spec.per_seed_start, "method": spec.method,
                 **({"start_groups": spec.start_groups} if spec.start_groups else {})})


def claim_hash(claim: Any) -> str:
    # b_metric only where a claim has one, so the hashes of the claims before it stay as they were
    extra = {"b_metric": claim.b_metric} if getattr(claim, "b_metric", None) else {}
    return _sha({**{k: getattr(claim, k) for k in ("a", "b", "metric", "direction", "margin")}, **extra})


# ------------------------------------------------------------------------------------------------------------
# the seed ledger


def read_ledger(report_dir: str | Path) -> list[dict]:
    p = Path(report_dir) / LEDGER_FILE
    if not p.exists():
        return []
    try:
        entries = json.loads(p.read_text())
    except ValueError as e:
        raise ConfigError(f"{p}: not valid JSON ({e}); expected a list of seed-ledger entries") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{p}: expected a JSON list of seed-ledger entries (objects)")
    return entries


def ledger_entries(study: str, report: str, claims: Sequence[Any], results: Sequence[Mapping], engine: str,
                   commit: str) -> list[dict]:
    """One entry per pre-registered claim that the results test: the seeds where both its variants ran, with the
    claim's and the engine's hash."""
    seeds: dict[str, set] = {}
    for r in results:
        seeds.setdefault(r.get("variant"), set()).add(r.get("seed"))
    out = []
    for c in claims:
        both = sorted(seeds.get(c.a, set()) & seeds.get(c.b, set()))
        if both and not c.exploratory:
            out.append({"study": study, "report": report, "claim": c.key, "claim_hash": claim_hash(c),
                        "engine": engine, "seeds": both, "commit": commit})
    return out


def reused_seeds(ledger: Sequence[Mapping], entries: Sequence[Mapping]) -> dict[str, str]:
    """Claim key -> why it is exploratory: its seeds were used before (an entry recorded before this report's own
    first entry, if it has one) with another version of the claim or another engine."""
    out: dict[str, str] = {}
    for new in entries:
        own = next((i for i, e in enumerate(ledger) if _same(e, new)), len(ledger))
        for old in ledger[:own]:
            if old.get("study") != new["study"] or old.get("claim") != new["claim"]:
                continue
            both = sorted(set(old.get("seeds") or ()) & set(new["seeds"]))
            if not both:
                continue
            what = ("another version of the claim" if old.get("claim_hash") != new["claim_hash"] else
                    "another engine (code, config or variants)" if old.get("engine") != new["engine"] else None)
            if what:
                out[new["claim"]] = (f"seeds {', '.join(map(str, both))} were used before with {what} "
                                     f"(report {old.get('report')}, commit {str(old.get('commit'))[:12]})")
                break
    return out


def _same(a: Mapping, b: Mapping) -> bool:
    keys = ("study", "report", "claim", "claim_hash", "engine", "seeds")
    return all(a.get(k) == b.get(k) for k in keys)


def record_ledger(report_dir: str | Path, entries: Sequence[Mapping]) -> None:
    """Append the entries not recorded yet (a regenerated report adds nothing)."""
    ledger = read_ledger(report_dir)
    new = [e for e in entries if not any(_same(e, old) for old in ledger)]
    if new:
        write_json(Path(report_dir) / LEDGER_FILE, [*ledger, *new])
