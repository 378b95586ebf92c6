"""Does the planner have something to choose? Checklists executed against the image facts (issue 39).

A checklist is a list of claim keys (``red``, ``B``, ``max``, ``answer``). Executing it against the facts gives, per
check, the response it favours (``targets.favours``: the one whose claim matches the image, ``both`` or
``neither``); the checklist *separates* the pair when more checks favour one response than the other, and is
*right* when that response is the preferred one. These are functions of the pair generator alone (a verifier that
executes every check perfectly), so they say, before any training, how much a planner can gain over a fixed list:

* ``exhaustive``  the static checklist of every claim key of the task in the facts' fixed order (perception,
                  intermediate, answer), cut to the 4-check budget (``targets.exhaustive_checks``);
* ``oracle``      the reference checklist built from the facts (``targets.reference_checks``: the claims the
                  responses disagree on, the decisive ones first where the perception alone overflows the budget);
* ``random``      a random budget-sized subset of the claim keys (seeded per pair).

On the narrow pairs a counting pair has 4 claim keys, so the exhaustive checklist fits the budget and separates
every pair; on the wide form (``pairs.form: wide``) it cannot (docs/deltarubric_planning.md has the numbers).
``checklist_room`` is reported by the pairs stage and the evaluation.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from rubricflow.data.pairs import PreferencePair
from rubricflow.methods.deltarubric.parsing import MAX_CHECKS
from rubricflow.methods.deltarubric.synthetic import gold_values
from rubricflow.methods.deltarubric.targets import check_keys, exhaustive_checks, favours, lead, reference_checks

CHECKLISTS = ("exhaustive", "oracle", "random")


def execute(pair: PreferencePair, keys: Sequence[str]) -> list[str]:
    """Per key, the response its check favours against the facts: ``A``, ``B``, ``both`` or ``neither``."""
    truth = gold_values(pair.facts)
    return [favours(pair, k, truth[k]) for k in keys]


def facts_verdict(pair: PreferencePair, keys: Sequence[str]) -> str | None:
    """The response more executed checks favour, or None on a tie (the checklist does not separate the pair)."""
    return lead(execute(pair, keys))


def decides(pair: PreferencePair, checks: Sequence[str]) -> bool:
    """Whether a written checklist (check texts, matched to claim keys by the check templates, ``targets.check_keys``)
    separates the pair when executed against the facts: more checks favour one response. Stricter than
    ``targets.separates`` (a check on a claim the responses disagree on): on a wide partial pair a check on a key both
    responses misread differs between them and decides nothing."""
    return facts_verdict(pair, check_keys(pair, checks)) is not None


def keys_decide(pair: PreferencePair, keys: Sequence[str]) -> bool:
    """``decides`` for claim keys named directly (the generative judge's tool call, ``lookup.parse_lookup``): the
    named keys of the pair's facts, once each, separate the pair when executed against the facts; a key the facts do
    not have decides nothing."""
    truth = gold_values(pair.facts)
    return facts_verdict(pair, list(dict.fromkeys(k for k in keys if k in truth))) is not None


def checklist_keys(pair: PreferencePair, kind: str, budget: int = MAX_CHECKS, seed: int = 0) -> list[str]:
    """The keys of checklist ``kind`` (``CHECKLISTS``) for ``pair``."""
    if kind == "exhaustive":
        return [c.id for c in exhaustive_checks(pair, budget)]
    if kind == "oracle":
        return [c.id for c in reference_checks(pair, budget)]
    if kind == "random":
        keys = list(gold_values(pair.facts))
        h = hashlib.sha256(f"{seed}:random-checklist:{pair.id}".encode()).digest()
        return random.Random(int.from_bytes(h[:8], "big")).sample(keys, min(budget, len(keys)))
    raise ValueError(f"checklist kind: expected one of {CHECKLISTS}, got {kind!r}")


def separating_shares(pairs: Sequence[PreferencePair], kind: str, budget: int = MAX_CHECKS,
                      seed: int = 0) -> dict[str, float]:
    """``{"separating": share of pairs the checklist separates, "right": share it separates toward the preferred
    response}`` over ``pairs`` (NaN for none)."""
    n = len(pairs)
    verdicts = [(facts_verdict(p, checklist_keys(p, kind, budget, seed)), p.preferred) for p in pairs]
    return {"separating": sum(v is not None for v, _ in verdicts) / n if n else float("nan"),
            "right": sum(v == pref for v, pref in verdicts) / n if n else float("nan")}


def checklist_room(pairs: Sequence[PreferencePair], budget: int = MAX_CHECKS, seed: int = 0) -> dict:
    """The separating shares of every checklist kind per pair kind (``all``, ``decisive``, ``partial``), with the
    pairs counted and the mean number of claim keys per pair; pairs without facts are left out."""
    pairs = [p for p in pairs if p.facts]
    groups = {"all": pairs}
    for p in pairs:
        groups.setdefault(str(p.meta.get("kind", "unknown")), []).append(p)
    out: dict = {"budget": budget, "n": len(pairs),
                 "mean_keys": sum(len(gold_values(p.facts)) for p in pairs) / len(pairs) if pairs else float("nan")}
    for name, ps in groups.items():
        out[name] = {"n": len(ps), **{k: separating_shares(ps, k, budget, seed) for k in CHECKLISTS}}
    return out


def format_room(room: dict) -> str:
    """A text table of ``checklist_room``: rows = pair kinds, columns = checklists (separating / right, %)."""
    rows = [["pairs", "n", *(f"{k} sep/right" for k in CHECKLISTS)]]
    for name, r in room.items():
        if isinstance(r, dict):
            rows.append([name, str(r["n"]), *(f"{100 * r[k]['separating']:.1f} / {100 * r[k]['right']:.1f}"
                                              for k in CHECKLISTS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [f"budget {room['budget']} checks, {room['mean_keys']:.1f} claim keys per pair"])
