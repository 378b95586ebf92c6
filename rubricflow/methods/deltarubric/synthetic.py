"""Synthetic preference pairs over the synthetic images, with a known winner and known errors.

Each pair starts from one synthetic sample (rubricflow.data.synthetic: counting, barchart, geometry) and its
ground-truth ``facts``. Responses are reasoning traces (rubricflow.data.traces) rendered from *corrupted* facts:
the perception is changed by one visual error and every intermediate value and the boxed answer are recomputed
from the corrupted perception, so a wrong response is internally consistent and only the image can expose it
(no textual shortcut).

Visual errors (two kinds per task):

* counting  ``count``    one colour's count off by one (total kept within 1..4, as in real images);
            ``colour``   one shape attributed to the wrong colour (one count down, another up; total unchanged).
* barchart  ``value``    one bar read at a height no bar has;  ``relation``  two bars' heights swapped.
* geometry  ``value``    one coordinate of P or Q off by one;  ``relation``  P and Q swapped.

Pair kinds: ``decisive`` = the faithful trace vs a trace with one visual error; ``partial`` = two different
erroneous traces, the preferred one having the lower severity. Severity of a response = number of wrong
``key = value`` claims + 2 if its boxed answer is wrong (``severity``). A/B order is balanced exactly per split
(half the pairs of each split prefer A).

The wide form (``pairs.form: wide``; ``make_wide_pair``): images with ``keys`` perception keys (the wide generators
of rubricflow.data.synthetic: counting with ``keys`` colours, bar charts with ``keys`` bars), more than the planner's
4 checks, so an instance-independent checklist cannot cover them and a planned one must find the difference that
decides:

* decisive  the faithful trace vs a trace with one perception key misread (any key, any other value; the
            intermediate values and the answer follow it);
* partial   both traces misread the same ``confounds`` keys, each with a different wrong value (so those claims
            differ but favour neither response), and the worse one also misreads one more key, the *decisive* key,
            which the better one reads right. Only a check on the decisive key separates them. The decisive key
            never moves the answer (counting: not the asked colour; bar charts: the confounds and the decisive key
            are bars strictly between the shortest and the tallest, read again strictly between them), so the
            answer and the intermediates never decide either. ``meta["decisive"]`` names it.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

from rubricflow.data.pairs import PreferencePair, validate_pairs, write_pairs
from rubricflow.data.schema import Sample
from rubricflow.data.synthetic import BAR_MAX, WIDE_GRID, generate_samples
from rubricflow.data.traces import extract_boxed, fmt, parse_claims, render_trace, values_equal
from rubricflow.methods.deltarubric.config import PairsConfig
from rubricflow.util.io import staged_dir

ERROR_KINDS = {"counting": ("count", "colour"), "barchart": ("value", "relation"), "geometry": ("value", "relation")}


# ----------------------------------------------------------------------------------------------------------------
# Facts -> answer (the same arithmetic as the generators, applied to any perception)


def derive(facts: dict, perception: list) -> tuple[dict, str]:
    """Facts with ``perception`` replaced and intermediates recomputed, and the answer they imply."""
    task = facts["task"]
    out = {**facts, "perception": [[k, v] for k, v in perception]}
    vals = dict(out["perception"])
    if task == "counting":
        return out, str(vals[facts["target"]])
    if task == "barchart":
        hi, lo = max(vals.values()), min(vals.values())
        if facts["question_type"] == "tallest":
            out["intermediate"] = [["max", hi]]
            return out, [k for k, v in vals.items() if v == hi][0]
        if facts["question_type"] == "sum":
            part = vals["A"] + vals["B"]
            out["intermediate"] = [["s", part], ["total", part + vals["C"]]]
            return out, str(part + vals["C"])
        out["intermediate"] = [["max", hi], ["min", lo], ["diff", hi - lo]]
        return out, str(hi - lo)
    if task == "geometry":
        (px, py), (qx, qy) = vals["P"], vals["Q"]
        dx, dy = abs(qx - px), abs(qy - py)
        area = dx * dy / 2
        out["intermediate"] = [["dx", dx], ["dy", dy], ["area", area]]
        return out, fmt(float(area))
    raise ValueError(f"derive: unknown task {task!r}; expected one of {sorted(ERROR_KINDS)}")


def response_text(facts: dict, perception: list) -> str:
    f, ans = derive(facts, perception)
    return render_trace(f, ans)


def severity(response: str, facts: dict) -> int:
    """Wrong claims (position by position against the gold trace) + 2 if the boxed answer is wrong."""
    gold_facts, gold_answer = derive(facts, facts["perception"])
    gold = parse_claims(render_trace(gold_facts, gold_answer))
    got = parse_claims(response)
    wrong = abs(len(gold) - len(got))
    for (gk, gv), (k, v) in zip(gold, got):
        wrong += int(gk != k or not values_equal(gv, v))
    box = extract_boxed(response)
    return wrong + (0 if box is not None and values_equal(box, gold_answer) else 2)


# ----------------------------------------------------------------------------------------------------------------
# Visual errors: perception -> corrupted perception (or None when this error cannot apply)


def _counting_error(rng: random.Random, perc: list, kind: str) -> list | None:
    counts = {k: v for k, v in perc}
    total = sum(counts.values())
    if kind == "count":
        options = [
            (k, d)
            for k in counts
            for d in (-1, 1)
            if 0 <= counts[k] + d <= 4 and 1 <= total + d <= 4
        ]
        if not options:
            return None
        k, d = rng.choice(options)
        counts[k] += d
    else:  # colour: one shape of colour x reported as colour y
        options = [(x, y) for x in counts for y in counts if x != y and counts[x] > 0]
        if not options:
            return None
        x, y = rng.choice(options)
        counts[x] -= 1
        counts[y] += 1
    return [[k, counts[k]] for k, _ in perc]


def _barchart_error(rng: random.Random, perc: list, kind: str) -> list | None:
    vals = {k: v for k, v in perc}
    if kind == "value":
        k = rng.choice(list(vals))
        free = [v for v in range(1, BAR_MAX + 1) if v not in vals.values()]
        vals[k] = rng.choice(free)
    else:  # relation: two bars swapped
        a, b = rng.sample(list(vals), 2)
        vals[a], vals[b] = vals[b], vals[a]
    return [[k, vals[k]] for k, _ in perc]


def _geometry_error(rng: random.Random, perc: list, kind: str) -> list | None:
    pts = {k: list(v) for k, v in perc}
    if kind == "relation":
        pts["P"], pts["Q"] = pts["Q"], pts["P"]
        return [[k, pts[k]] for k, _ in perc]
    options = []
    for name, other in (("P", "Q"), ("Q", "P")):
        for axis in (0, 1):
            for d in (-1, 1):
                v = pts[name][axis] + d
                if 0 <= v <= 4 and v != pts[other][axis]:
                    options.append((name, axis, d))
    name, axis, d = rng.choice(options)
    pts[name][axis] += d
    return [[k, pts[k]] for k, _ in perc]


_ERRORS = {"counting": _counting_error, "barchart": _barchart_error, "geometry": _geometry_error}


def corrupt(rng: random.Random, facts: dict, perception: list, kind: str | None = None) -> tuple[list, str] | None:
    """Apply one visual error (random kind unless given) to ``perception``; None when none applies."""
    task = facts["task"]
    kinds = [kind] if kind else list(ERROR_KINDS[task])
    rng.shuffle(kinds)
    for k in kinds:
        out = _ERRORS[task](rng, perception, k)
        if out is not None and out != [[a, b] for a, b in perception]:
            return out, k
    return None


# ----------------------------------------------------------------------------------------------------------------
# Pairs


def _pair_rng(seed: int, sample_id: str) -> random.Random:
    h = hashlib.sha256(f"{seed}:deltarubric:{sample_id}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def make_pair(sample: Sample, rng: random.Random, partial: bool) -> PreferencePair | None:
    """One pair from a sample: (better, worse) with the better one first; ``preferred`` is set to "A"."""
    facts = sample.facts
    gold_perc = facts["perception"]
    gold = response_text(facts, gold_perc)
    if not partial:
        got = corrupt(rng, facts, gold_perc)
        if got is None:
            return None
        perc, kind = got
        worse = response_text(facts, perc)
        if worse == gold:
            return None
        meta = {"kind": "decisive", "errors": {"A": [], "B": [kind]}}
        better, category = gold, f"{sample.task}/{kind}"
    else:
        for _ in range(50):
            one = corrupt(rng, facts, gold_perc)
            two = corrupt(rng, facts, gold_perc)
            if one is None or two is None:
                return None
            kinds2 = [two[1]]
            if rng.random() < 0.5:  # the second response sometimes carries two errors
                more = corrupt(rng, facts, two[0])
                if more is not None:
                    two = (more[0], two[1])
                    kinds2.append(more[1])
            r1, r2 = response_text(facts, one[0]), response_text(facts, two[0])
            s1, s2 = severity(r1, facts), severity(r2, facts)
            if r1 != r2 and s1 != s2 and min(s1, s2) > 0:
                if s1 < s2:
                    better, worse, kb, kw = r1, r2, [one[1]], kinds2
                else:
                    better, worse, kb, kw = r2, r1, kinds2, [one[1]]
                meta = {"kind": "partial", "errors": {"A": kb, "B": kw}}
                break
        else:
            return None
        category = f"{sample.task}/partial"
    meta["severity"] = {"A": severity(better, facts), "B": severity(worse, facts)}
    meta["sample_id"] = sample.id
    meta["answer"] = sample.answer
    return PreferencePair(
        id=f"dr-{sample.id}",
        images=list(sample.images),
        question=sample.question,
        response_a=better,
        response_b=worse,
        preferred="A",
        split=sample.split,
        category=category,
        source=f"synthetic/{sample.task}",
        facts=facts,
        meta=meta,
    )


def _misreadings(facts: dict, key: str) -> list[int]:
    """Values a wide scene's perception ``key`` may be misread as (its true value left out)."""
    vals = dict(facts["perception"])
    hi = WIDE_GRID**2 if facts["task"] == "counting" else BAR_MAX
    low = 0 if facts["task"] == "counting" else 1
    return [v for v in range(low, hi + 1) if v != vals[key]]


def _between(facts: dict) -> tuple[list[str], list[int]]:
    """Bar charts: the bars strictly between the shortest and the tallest, and the heights strictly between."""
    vals = dict(facts["perception"])
    lo, hi = min(vals.values()), max(vals.values())
    return [k for k, v in vals.items() if lo < v < hi], list(range(lo + 1, hi))


def make_wide_pair(sample: Sample, rng: random.Random, partial: bool, confounds: int) -> PreferencePair | None:
    """One pair of the wide form (see the module doc), better response first; None when the scene admits no partial
    pair (too few keys between the extremes of a bar chart)."""
    facts = sample.facts
    gold_perc = [[k, v] for k, v in facts["perception"]]
    truth = dict(gold_perc)
    keys = list(truth)
    if not partial:
        k = rng.choice(keys)
        worse = dict(truth) | {k: rng.choice(_misreadings(facts, k))}
        better_perc, worse_perc = truth, worse
        meta: dict[str, Any] = {"kind": "decisive", "decisive": k, "confounds": [], "errors": {"A": [], "B": [k]}}
        category = f"{sample.task}/misread"
    else:
        if facts["task"] == "counting":
            pool = keys
            decisive_pool = [k for k in keys if k != facts["target"]]

            def values(k: str) -> list[int]:
                return _misreadings(facts, k)
        else:
            pool, between = _between(facts)
            decisive_pool = pool

            def values(k: str) -> list[int]:
                return [v for v in between if v != truth[k]]
        if not decisive_pool:
            return None
        d = rng.choice(decisive_pool)
        others = [k for k in pool if k != d]
        if len(others) < confounds:
            return None
        conf = rng.sample(others, confounds)
        better_perc, worse_perc = dict(truth), dict(truth)
        for k in conf:
            opts = values(k)
            if len(opts) < 2:
                return None
            better_perc[k], worse_perc[k] = rng.sample(opts, 2)
        worse_perc[d] = rng.choice(values(d))
        meta = {"kind": "partial", "decisive": d, "confounds": conf, "errors": {"A": conf, "B": [*conf, d]}}
        category = f"{sample.task}/partial"
    better = response_text(facts, [[k, better_perc[k]] for k in keys])
    worse = response_text(facts, [[k, worse_perc[k]] for k in keys])
    meta["severity"] = {"A": severity(better, facts), "B": severity(worse, facts)}
    meta["sample_id"] = sample.id
    meta["answer"] = sample.answer
    return PreferencePair(
        id=f"dr-{sample.id}", images=list(sample.images), question=sample.question, response_a=better,
        response_b=worse, preferred="A", split=sample.split, category=category, source=f"synthetic/{sample.task}",
        facts=facts, meta=meta,
    )


def balance_order(pairs: list[PreferencePair], seed: int) -> list[PreferencePair]:
    """Swap A/B so that exactly half (rounded down) of each split's pairs prefer A; seeded, order kept."""
    out = list(pairs)
    by_split: dict[str, list[int]] = {}
    for i, p in enumerate(out):
        by_split.setdefault(p.split, []).append(i)
    for split, idx in sorted(by_split.items()):
        rng = random.Random(f"{seed}:balance:{split}")
        order = list(idx)
        rng.shuffle(order)
        want_a = set(order[: len(order) // 2])
        for i in idx:
            if (out[i].preferred == "A") != (i in want_a):
                out[i] = out[i].swapped()
    return out


def build_pairs(
    out_dir: str | Path,
    tasks: list[str],
    sizes: dict[str, int],
    seed: int,
    image_size: int = 56,
    partial_frac: float = 0.3,
    form: str = "narrow",
    keys: int = 10,
    confounds: int = 3,
) -> list[PreferencePair]:
    """Render the synthetic images into ``out_dir/images`` and write ``out_dir/pairs.parquet``.

    ``sizes``: pairs per split and task. ``partial_frac``: fraction of pairs where both responses are wrong.
    ``form``: 'narrow' (the tasks' own images, ``make_pair``) or 'wide' (``keys`` perception keys per image and
    ``confounds`` shared misreadings per partial pair, ``make_wide_pair``).
    """
    if form not in ("narrow", "wide"):
        raise ValueError(f"deltarubric pairs: form must be 'narrow' or 'wide', got {form!r}")
    wide = form == "wide"
    samples = generate_samples(tasks, sizes, seed, image_size, out_dir, keys=keys if wide else None)
    pairs: list[PreferencePair] = []
    n_fallback = 0
    for s in samples:
        rng = _pair_rng(seed, s.id)
        partial = rng.random() < partial_frac
        p = make_wide_pair(s, rng, partial, confounds) if wide else make_pair(s, rng, partial)
        if p is None and partial:  # some samples admit no two errors of different severity
            p = make_wide_pair(s, rng, False, confounds) if wide else make_pair(s, rng, False)
            n_fallback += 1
        if p is None:
            raise RuntimeError(f"deltarubric pairs: sample {s.id} admits no visual error (facts {s.facts})")
        pairs.append(p)
    pairs = balance_order(pairs, seed)
    kinds: dict[str, int] = {}
    for p in pairs:
        kinds[p.category] = kinds.get(p.category, 0) + 1
    write_pairs(
        out_dir,
        pairs,
        manifest={
            "generator": "rubricflow.methods.deltarubric.synthetic",
            "seed": seed,
            "image_size": image_size,
            "tasks": list(tasks),
            "partial_frac": partial_frac,
            "partial_fallbacks": n_fallback,
            "categories": kinds,
            # the wide form only, so that the narrow pairs' manifest (and the DVC hash of the set) stays as it was
            **({"form": form, "keys": keys, "confounds": confounds} if wide else {}),
        },
    )
    return pairs


def gold_values(facts: dict) -> dict[str, Any]:
    """Every ground-truth ``key -> value`` (perception, intermediate) plus ``answer``."""
    f, ans = derive(facts, facts["perception"])
    out = {k: v for k, v in f["perception"]}
    out.update({k: v for k, v in f.get("intermediate", [])})
    out["answer"] = ans
    return out


def write_pair_set(p: PairsConfig) -> dict:
    """Generate the synthetic preference pairs into ``p.out_dir``, published only when they pass the data gate;
    returns their counts per split and category, the A fraction per split and the fraction of partial pairs."""
    sizes = {"train": p.train, "val": p.val, "test": p.test}
    with staged_dir(p.out_dir) as tmp:
        pairs = build_pairs(tmp, list(p.tasks), sizes, p.seed, p.image_size, p.partial_frac, p.form, p.n_keys,
                            p.confounds)
        stats = validate_pairs(tmp, balance_tol=p.balance_tol)
    cats: dict[str, int] = {}
    for x in pairs:
        cats[x.category] = cats.get(x.category, 0) + 1
    return {
        "n_pairs": len(pairs),
        "splits": {s: sum(x.split == s for x in pairs) for s in sizes},
        "frac_a": stats["frac_a"],
        "partial_frac": sum(x.meta.get("kind") == "partial" for x in pairs) / max(len(pairs), 1),
        "categories": cats,
    }
