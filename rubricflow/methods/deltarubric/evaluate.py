"""Judge evaluation: verifier accuracy per judge mode, the planner probe, format-violation rates.

Judge modes (greedy decoding, one verdict per pair; a format failure counts as a wrong verdict and is reported):

* ``no_rubric``    the single-step verdict;
* ``static``       the five fixed criteria;
* ``reading``      the reading judge: the verifier's worked reading of the image, then the verdict, no checklist
                   (the no-rubric control of the same reading: does the checklist add to it?);
* ``generative``   the generative no-rubric judge (issue 39, item 3b; the paper's no-rubric baseline): its own reading
                   and comparison lines over keys it chooses, then the verdict; no planner, no checklist handed to it
                   (a bare verdict is a format failure; taught only with ``sft.generative``); under the lookup tool
                   (``quoted``) it first calls the tool on keys it names, then marks the quotes (``GENERATIVE_TOOL``);
* ``deltarubric``  the policy's own greedy checklist (planner), then the checklist-guided verdict (verifier);
                   a malformed checklist is a planner format violation and a wrong verdict;
* ``exhaustive``   the static-exhaustive control (synthetic pairs only): every claim key of the pair's task as a check,
                   in the facts' fixed order, the first 4 (``eval.exhaustive: budget``) or all (``all``), executed by
                   the same verifier: the same checklist for every pair of a task, so DeltaRubric minus exhaustive is
                   what the planner adds (issue 39, item 3a);
* ``oracle``       the reference checklist from ground-truth facts, then the verifier (synthetic pairs only):
                   how well the verifier executes a good checklist, independent of the planner;
* ``agreed``       a control (synthetic pairs only): a checklist of 2-4 checks on claims both responses agree on, so
                   no check separates them. A verifier that decides from its reading alone stays accurate here; one
                   that follows its checklist falls to chance. Pairs with fewer than two agreed claims are left out
                   (``n`` of the mode says how many were judged).

On synthetic pairs the table also carries ``checklist_room`` (``planning.checklist_room``: how often the exhaustive,
reference and a random checklist separate the pairs when executed against the facts, a property of the pairs).
``deltarubric`` on synthetic pairs also reports ``separating``: the share of the planner's checklists with a check
on a claim the responses disagree on (a malformed checklist separates nothing), and ``deciding``: the share that
separate the pair when executed against the facts (``planning.decides``; on wide partial pairs a check on a claim both
responses misread differs between them and decides nothing).

``generative`` on synthetic pairs reports ``deciding`` too: the share of its tool calls whose looked-up keys separate
the pair against the facts (``planning.keys_decide``; a failed call decides nothing), the counterpart of the
planner's. ``judge`` decodes greedily, or with ``Sampling`` draws several trajectories per pair at the rollout
temperature (the sampled readout of a study unit).

Planner probe (the paper's training-dynamics proxy): sample N checklists per pair at the rollout temperature and
give each to a cheap verdict (the greedy verifier); the probe accuracy is the fraction of sampled checklists that
lead it to the right winner (malformed checklists count as failures).

``evaluate_judge`` returns a json-able dict; ``format_table`` renders several of them as one text table
(``rubricflow eval-judge`` prints it). ``judge_tables`` evaluates policy folders on pair sets, and
``evaluate_policies`` is the ``deltarubric_eval`` stage: the warm start and the trained policy on the held-out
synthetic pairs and every configured benchmark, in every mode of ``MODES``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from models.loader import load_policy
from rubricflow.data.pairs import PreferencePair, load_pair_images, read_pairs, validate_pairs
from rubricflow.methods.deltarubric.config import DeltaRubricConfig, role_max_tokens
from rubricflow.methods.deltarubric.modes import MODES, SINGLE_STEP
from rubricflow.methods.deltarubric.parsing import MAX_CHECKS
from rubricflow.methods.deltarubric.planning import checklist_room, decides, keys_decide
from rubricflow.methods.deltarubric.roles import PLANNER, VERIFIER, role_of
from rubricflow.methods.deltarubric.rollout import Item, request, with_readings
from rubricflow.methods.deltarubric.targets import agreed_checks as agreed_check_list
from rubricflow.methods.deltarubric.targets import exhaustive_checks, reference_checks, separates
from rubricflow.sections import GenerationConfig, ModelsConfig
from rubricflow.training.generation import generator_for
from rubricflow.util.io import write_json

_FACT_MODES = ("exhaustive", "oracle", "agreed")  # need ground-truth facts (synthetic pairs)


def load_items(data_dir: str | Path, pairs: list[PreferencePair]) -> list[Item]:
    return [Item(p, load_pair_images(data_dir, p)) for p in pairs]


@dataclass
class Judged:
    pair_id: str
    category: str
    verdict: str | None
    correct: bool
    format_ok: bool
    planner_ok: bool | None = None  # deltarubric only
    separating: bool | None = None  # deltarubric on synthetic pairs: the planner's checklist separates the responses
    deciding: bool | None = None  # ... and decides the pair when executed against the facts (planning.decides)
    checklist: list[str] | None = None
    text: str = ""
    reason: str | None = None


def agreed_checks(pair: PreferencePair, max_checks: int = 4) -> list[str] | None:
    """The control checklist's texts (``targets.agreed_checks``): checks on the claims both responses agree on
    (2-4), or None when fewer agree."""
    checks = agreed_check_list(pair, max_checks)
    return None if checks is None else [c.text for c in checks]


def fact_checklist(pair: PreferencePair, mode: str, exhaustive: str = "budget") -> list[str] | None:
    """The checklist texts of a facts-built mode: ``oracle`` (the reference checklist), ``exhaustive`` (every claim
    key in the facts' order; ``exhaustive``: 'budget' = the first 4, 'all' = every one) or ``agreed`` (None when
    the pair has fewer than two agreed claims)."""
    if mode == "oracle":
        return [c.text for c in reference_checks(pair)]
    if mode == "exhaustive":
        if exhaustive not in ("budget", "all"):
            raise ValueError(f"eval.exhaustive: expected 'budget' or 'all', got {exhaustive!r}")
        return [c.text for c in exhaustive_checks(pair, MAX_CHECKS if exhaustive == "budget" else None)]
    if mode == "agreed":
        return agreed_checks(pair)
    raise ValueError(f"fact_checklist: {mode!r} is not one of {_FACT_MODES}")


@dataclass(frozen=True)
class Sampling:
    """Sampled judging (the sampled readout): ``n`` trajectories per pair at the rollout's ``temperature`` /
    ``top_p``: the first call of a mode draws ``n`` samples (seeded by ``seed``) and each goes on with one sampled
    second turn, as a rollout does; the reading the lookup tool quotes stays greedy, as in training."""

    n: int
    temperature: float
    top_p: float = 1.0
    seed: int | None = None


_GREEDY = Sampling(1, 0.0)


def judge(gen, processor, items: list[Item], mode: str, max_tokens: dict[str, int],
          exhaustive: str = "budget", quoted: bool = False, sampling: Sampling = _GREEDY) -> list[Judged]:
    """One verdict per item in ``mode`` (``exhaustive``: the exhaustive mode's reading, ``fact_checklist``;
    ``quoted``: the verifier gets the lookup tool's quotes of the policy's own reading, read first where an item has
    none): greedy, or with ``sampling`` ``sampling.n`` sampled verdicts per item, item by item (an item's samples
    are consecutive)."""
    if mode not in MODES:
        raise ValueError(f"judge mode: expected one of {MODES}, got {mode!r}")
    vt = max_tokens["verifier"]
    n, t, tp = sampling.n, sampling.temperature, sampling.top_p
    if mode in SINGLE_STEP:
        role = role_of(mode, quoted)
        if role.turn is not None:
            return _judge_with_tool(gen, processor, with_readings(gen, processor, items, vt), role, max_tokens,
                                    sampling)
        outs = gen.generate([request(processor, role, it) for it in items], n=n, max_new_tokens=vt, temperature=t,
                            top_p=tp, seed=sampling.seed)
        res = []
        for it, comps in zip(items, outs):
            for o in comps:
                p = role.parse(o.text)
                res.append(Judged(it.pair.id, it.pair.category, p.value, p.ok and p.value == it.pair.preferred, p.ok,
                                  text=o.text, reason=p.reason))
        return res
    if quoted:
        items = with_readings(gen, processor, items, vt)
    if mode in _FACT_MODES:  # checklists built from the facts: no planner call; the verifier's is the first
        # agreed: only the pairs that have a control checklist
        kept = [(it, checks) for it in items if (checks := fact_checklist(it.pair, mode, exhaustive)) is not None]
        items, plans = [it for it, _ in kept], [checks for _, checks in kept]
        vouts = gen.generate([request(processor, VERIFIER, it, c) for it, c in kept], n=n, max_new_tokens=vt,
                             temperature=t, top_p=tp, seed=sampling.seed)
        # one entry per (item, sample): the sample's verdict
        rows = [(i, plans[i], True, None, o) for i, comps in enumerate(vouts) for o in comps]
    else:
        outs = gen.generate([request(processor, PLANNER, it) for it in items], n=n,
                            max_new_tokens=max_tokens["planner"], temperature=t, top_p=tp, seed=sampling.seed)
        drafts = [(i, PLANNER.parse(o.text)) for i, comps in enumerate(outs) for o in comps]
        ok = [k for k, (_, p) in enumerate(drafts) if p.ok]
        # one verdict per valid checklist ([] -> [])
        vouts = gen.generate([request(processor, VERIFIER, items[drafts[k][0]], drafts[k][1].value) for k in ok],
                             n=1, max_new_tokens=vt, temperature=t, top_p=tp)
        by_k = {k: v[0] for k, v in zip(ok, vouts)}
        rows = [(i, p.value, p.ok, p.reason, by_k.get(k)) for k, (i, p) in enumerate(drafts)]
    res = []
    for i, plan, plan_ok, reason, o in rows:
        it = items[i]
        sep = dec = None
        if mode == "deltarubric" and it.pair.facts:
            sep = plan_ok and separates(it.pair, plan)
            dec = plan_ok and decides(it.pair, plan)
        if o is None:  # a malformed checklist is never executed
            res.append(Judged(it.pair.id, it.pair.category, None, False, False, False, sep, dec, None, "", reason))
            continue
        p = VERIFIER.parse(o.text, plan)
        res.append(Judged(it.pair.id, it.pair.category, p.value, p.ok and p.value == it.pair.preferred, p.ok, True,
                          sep, dec, plan, o.text, p.reason))
    return res


def _judge_with_tool(gen, processor, items: list[Item], role, max_tokens: dict[str, int],
                     sampling: Sampling = _GREEDY) -> list[Judged]:
    """A tool-using single-step judge (the generative judge with the lookup tool): its tool call (a call that breaks
    the contract is a format failure), then, after the tool's answer, its marks and verdict; greedy, or
    ``sampling.n`` sampled calls per item, each with one sampled second turn. On synthetic pairs ``deciding``: the
    looked-up keys separate the pair against the facts (``planning.keys_decide``; a failed call decides nothing)."""
    n, t, tp = sampling.n, sampling.temperature, sampling.top_p
    outs = gen.generate([request(processor, role, it) for it in items], n=n, max_new_tokens=max_tokens["planner"],
                        temperature=t, top_p=tp, seed=sampling.seed)
    calls = [(i, o.text, role.call(o.text)) for i, comps in enumerate(outs) for o in comps]
    ok = [k for k, (_, _, c) in enumerate(calls) if c.ok]
    seconds = gen.generate([request(processor, role, items[calls[k][0]], calls[k][2].value) for k in ok], n=1,
                           max_new_tokens=max_tokens["verifier"], temperature=t, top_p=tp)  # [] -> []
    by_k = {k: o[0].text for k, o in zip(ok, seconds)}
    res = []
    for k, (i, call_text, call) in enumerate(calls):
        it = items[i]
        dec = (call.ok and keys_decide(it.pair, call.value)) if it.pair.facts else None
        if k not in by_k:
            res.append(Judged(it.pair.id, it.pair.category, None, False, False, deciding=dec, text=call_text,
                              reason=call.reason))
            continue
        keys, text = call.value, by_k[k]
        p = role.parse(text, keys)
        res.append(Judged(it.pair.id, it.pair.category, p.value, p.ok and p.value == it.pair.preferred, p.ok,
                          deciding=dec, checklist=keys, text=role.turn(it.pair, keys, it.reading) + text,
                          reason=p.reason))
    return res


def summarize(results: list[Judged]) -> dict:
    n = len(results)
    out = {
        "n": n,
        "accuracy": sum(r.correct for r in results) / n if n else float("nan"),
        "format_violation": sum(not r.format_ok for r in results) / n if n else float("nan"),
    }
    if any(r.planner_ok is not None for r in results):
        out["planner_format_violation"] = sum(r.planner_ok is False for r in results) / n
    seps = [r.separating for r in results if r.separating is not None]
    if seps:  # a malformed checklist separates nothing
        out["separating"] = sum(seps) / len(seps)
    decs = [r.deciding for r in results if r.deciding is not None]
    if decs:
        out["deciding"] = sum(decs) / len(decs)
    cats: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        cats[r.category or "all"].append(r.correct)
    out["by_category"] = {c: sum(v) / len(v) for c, v in sorted(cats.items())}
    return out


def evaluate_judge(
    gen, processor, items: list[Item], modes: tuple[str, ...], max_tokens: dict[str, int] | None = None,
    examples: int = 0, exhaustive: str = "budget", quoted: bool = False,
) -> dict:
    """``{"n": ..., "modes": {mode: {accuracy, format_violation, [planner_format_violation], by_category}}}``, and
    ``checklist_room`` when every pair has facts; the facts-built modes are skipped (and reported as skipped) for
    pairs without facts. ``exhaustive``: the exhaustive mode's reading (``eval.exhaustive``); ``quoted``: the lookup
    tool (the policy reads each image once, greedily, and every verifier mode quotes that reading)."""
    max_tokens = max_tokens or {"planner": 40, "verifier": 48}
    if quoted and any(m not in SINGLE_STEP or role_of(m, quoted).turn is not None for m in modes):
        items = with_readings(gen, processor, items, max_tokens["verifier"])
    out: dict = {"n": len(items), "modes": {}}
    if items and all(it.pair.facts for it in items):
        out["checklist_room"] = checklist_room([it.pair for it in items])
    for mode in modes:
        if mode in _FACT_MODES and not all(it.pair.facts for it in items):
            out.setdefault("skipped", {})[mode] = "pairs have no ground-truth facts"
            continue
        if mode == "agreed" and not any(agreed_checks(it.pair) is not None for it in items):
            out.setdefault("skipped", {})[mode] = "no pair has two claims both responses agree on"
            continue
        res = judge(gen, processor, items, mode, max_tokens, exhaustive, quoted)
        out["modes"][mode] = summarize(res)
        if examples:
            out["modes"][mode]["examples"] = [
                {"id": r.pair_id, "checklist": r.checklist, "output": r.text, "verdict": r.verdict,
                 "correct": r.correct, "reason": r.reason}
                for r in res[:examples]
            ]
    return out


def planner_probe(gen, processor, items: list[Item], n_checklists: int, max_tokens: dict[str, int],
                  temperature: float = 1.0, seed: int | None = None, quoted: bool = False) -> dict[str, float]:
    """Fraction of sampled checklists whose greedy verifier verdict is right; their format-violation rate; and, on
    synthetic pairs, the share of sampled checklists that separate the responses (``targets.separates``);
    ``quoted``: the verifier gets the lookup tool's quotes (the policy reads each image first)."""
    if quoted:
        items = with_readings(gen, processor, items, max_tokens["verifier"])
    outs = gen.generate([request(processor, PLANNER, it) for it in items], n=n_checklists,
                        max_new_tokens=max_tokens["planner"], temperature=temperature, seed=seed)
    reqs, owners, total, bad, seps = [], [], 0, 0, []
    for it, comps in zip(items, outs):
        for c in comps:
            total += 1
            p = PLANNER.parse(c.text)
            if it.pair.facts:
                seps.append(p.ok and separates(it.pair, p.value))
            if p.ok:
                reqs.append(request(processor, VERIFIER, it, p.value))
                owners.append((it.pair.preferred, p.value))
            else:
                bad += 1
    # called even with no valid checklist: under ZeRO-3 the other ranks' generation needs this rank's forwards
    vouts = gen.generate(reqs, n=1, max_new_tokens=max_tokens["verifier"], temperature=0.0)
    right = 0
    for o, (pref, checks) in zip(vouts, owners):
        v = VERIFIER.parse(o[0].text, checks)
        right += v.ok and v.value == pref
    out = {"probe/accuracy": right / max(total, 1), "probe/format_violation": bad / max(total, 1)}
    if seps:
        out["probe/separating"] = sum(seps) / len(seps)
    return out


def format_table(tables: dict[str, dict]) -> str:
    """Rows = evaluated sets (``name -> evaluate_judge output``), columns = judge modes; accuracy % with the
    format-violation % in parentheses, plus ``n``."""
    modes = [m for m in MODES if any(m in t.get("modes", {}) for t in tables.values())]
    head = ["set", "n", *modes]
    rows = [head]
    for name, t in tables.items():
        row = [name, str(t.get("n", ""))]
        for m in modes:
            s = t.get("modes", {}).get(m)
            # a mode that judged fewer pairs
            n = "" if s is None or s.get("n", t.get("n")) == t.get("n") else f" n={s['n']}"
            row.append("-" if s is None else f"{100 * s['accuracy']:.1f} ({100 * s['format_violation']:.0f}% fmt){n}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# Policies x pair sets (the ``deltarubric_eval`` stage and ``rubricflow eval-judge``)


def judge_tables(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig,
                 model_dirs: dict[str, str], pair_sets: dict[str, tuple[str, str | None, int]],
                 modes: tuple[str, ...], examples: int = 0) -> dict[str, dict]:
    """``{"<model>/<set>": evaluate_judge(...)}`` for every model directory and pair set
    (``name -> (dir, split or None, limit)``); every benchmark directory passes the data gate first."""
    sets = {}
    for name, (d, split, limit) in pair_sets.items():
        validate_pairs(d, balance_tol=None)  # benchmarks need not be A/B balanced; everything else must hold
        sets[name] = load_items(d, read_pairs(d, split, limit=limit or None))
    out: dict[str, dict] = {}
    for mname, mdir in model_dirs.items():
        model, proc = load_policy(mdir, dtype=models.policy.dtype)
        gen = generator_for(generation, model, proc, model_path=mdir, batch_size=dr.eval.batch_size)
        for sname, items in sets.items():
            out[f"{mname}/{sname}"] = evaluate_judge(gen, proc, items, modes, role_max_tokens(dr.train),
                                                     examples=examples, exhaustive=dr.eval.exhaustive,
                                                     quoted=dr.verifier_quotes)
    return out


def eval_pair_sets(dr: DeltaRubricConfig) -> dict[str, tuple[str, str | None, int]]:
    """The pair sets of the evaluation, ``name -> (dir, split or None, limit)``: the held-out synthetic pairs and
    every ``eval.benchmarks`` folder (a missing one is an error naming it)."""
    sets = {"synthetic-test": (str(Path(dr.pairs.out_dir)), "test", dr.eval.test_pairs)}
    for b in dr.eval.benchmarks:
        if not Path(b).is_dir():
            raise FileNotFoundError(f"deltarubric.eval.benchmarks: {b} is not a directory (ingest it first)")
        sets[Path(b).name] = (b, None, dr.eval.benchmark_limit)
    return sets


def evaluate_policies(dr: DeltaRubricConfig, models: ModelsConfig, generation: GenerationConfig) -> dict:
    """The warm start (``sft``) and the trained policy (``grpo``) on the held-out synthetic pairs and every
    ``eval.benchmarks`` folder, in every mode: writes ``eval.out_dir/eval.json`` and ``eval.txt``, prints the table
    and returns ``{"<policy>/<set>": {mode: accuracy, "<mode>_format_violation": ...}}``."""
    sets = eval_pair_sets(dr)
    policies = {"sft": dr.sft.out_dir, "grpo": dr.train.out_dir}
    tables = judge_tables(dr, models, generation, policies, sets, MODES, examples=3)
    write_json(Path(dr.eval.out_dir) / "eval.json", tables)
    text = format_table(tables)
    (Path(dr.eval.out_dir) / "eval.txt").write_text(text + "\n")
    print(text)
    metrics: dict = {}
    for name, t in tables.items():
        for mode, s in t["modes"].items():
            metrics.setdefault(name, {})[mode] = s["accuracy"]
            metrics.setdefault(name, {})[f"{mode}_format_violation"] = s["format_violation"]
            for k in ("separating", "deciding"):
                if k in s:
                    metrics[name][f"{mode}_{k}"] = s[k]
    return metrics
