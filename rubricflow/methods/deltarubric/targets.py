"""Templated outputs derived from ground-truth facts: SFT targets for every role, and reference checklists.

* ``reference_checks(pair)``: the planner's target, neutral checks on the claims where the two responses
  *disagree* (perception first, then the final answer, then intermediate values; 2-4 checks; if only one claim
  differs the final-answer check is added). The check text names what to verify, never a value, a response or
  a winner (it passes ``parse_checklist``).
* ``verifier_target(pair, checks)``: the verifier's own reading of the image as a worked trace (the gold trace, in
  the responses' own form), then per check ``image <key> = <value>, A <key> = <claim> yes|no, B <key> = <claim>
  yes|no -> A|B|both|neither``, then ``verdict: <preferred>`` (see ``evidence_lines`` for why this form); under the
  lookup tool (form 'quoted') the evidence lines and the verdict only. With ``sft.evidence_tally`` each evidence line
  (the generative judge's too) ends with the running verdict, ``, so far A|B|even`` (``tallied``).
* ``exhaustive_checks(pair, budget)``: the static-exhaustive checklist, every claim key of the pair's task in the
  facts' fixed order (perception, intermediate, answer), the first ``budget`` of them (None: all): the same for every
  pair of a task, the control that isolates the planner (issue 39, item 3a).
* ``agreed_checks(pair)``: a non-separating checklist, 2-4 checks on claims both responses agree on (None when
  fewer agree): the agreed-claims control of the evaluation and the planner's noisy target of a warm start with
  room (``sft.planner_target_noise``); ``separates(pair, checks)`` says whether a checklist has a check on a claim
  the responses disagree on.
* ``static_target(pair)``: per fixed criterion the response it favours (factual consistency: fewer wrong claims;
  key visual information: fewer wrong perception claims; relevance, reasoning and clarity: both, since the
  synthetic responses are on topic, consistent and complete), then the verdict.
* ``no_rubric_target(pair)``: the verdict alone (the single-step judge).
* ``reading_target(pair)``: the reading judge, the no-rubric control of the same reading: the verifier's worked
  reading (``worked_reading``, the one builder both use), then the verdict; no checklist, no evidence lines.
* ``generative_target(pair, keys)``: the generative no-rubric judge (issue 39, item 3b): its own reading lines of the
  keys it chooses (``image <key> = <value>``), one comparison line per key (``<i>. A <key> = <claim> yes|no, B <key> =
  <claim> yes|no -> A|B|both|neither``), then the verdict; no planner role, no checklist handed to it.
  ``generative_keys(pair, order, rng)`` are the keys it is taught to choose: the keys where the responses disagree
  (the reference checklist's keys), in the facts' order (``fixed``) or shuffled (``shuffled``). With the lookup tool
  (``generative_tool_target``) it names the keys in a tool call first (``lookup.lookup_call``) and, after the tool's
  quotes, marks them as the quoted verifier does, then the verdict.

Only synthetic pairs (with ``facts``) have targets; benchmark pairs are evaluation-only.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rubricflow.data.pairs import PreferencePair
from rubricflow.data.traces import extract_boxed, fmt, parse_claims, values_equal
from rubricflow.judge.protocol import Rubric
from rubricflow.methods.deltarubric.prompts import STATIC_CRITERIA
from rubricflow.methods.deltarubric.synthetic import gold_values, response_text

_FIXED = {
    "max": "find the height of the tallest bar.",
    "min": "find the height of the shortest bar.",
    "diff": "subtract the shortest height from the tallest.",
    "P": "locate the red point P.",
    "Q": "locate the blue point Q.",
    "dx": "measure the horizontal gap dx.",
    "dy": "measure the vertical gap dy.",
    "area": "compute the area dx * dy / 2.",
    "answer": "check the final answer.",
}


def check(task: str, key: str) -> Rubric:
    """A check of the checklist contract: a kernel ``Rubric`` whose id is the claim key it reads ("red", "B", "dx",
    ... or "answer") and whose text is the key's template (``check_text``)."""
    return Rubric(key, check_text(task, key), provenance="facts")


TEMPLATE_TASKS = ("counting", "barchart")  # the tasks with per-key check templates (the others: _FIXED only)


def check_text(task: str, key: str) -> str:
    if key in _FIXED:
        return _FIXED[key]
    if task == "counting":
        return f"count the {key} shapes."
    if task == "barchart":
        return f"read the height of bar {key}."
    raise ValueError(f"no check template for key {key!r} of task {task!r}")


def claim_values(response: str) -> dict[str, str]:
    """First claimed value per key, plus ``answer`` (the boxed content)."""
    out: dict[str, str] = {}
    for k, v in parse_claims(response):
        out.setdefault(k, v)
    box = extract_boxed(response)
    if box is not None:
        out["answer"] = box
    return out


def disagreement_keys(pair: PreferencePair) -> list[str]:
    a, b = claim_values(pair.response_a), claim_values(pair.response_b)
    keys = list(dict.fromkeys([*a, *b]))
    return [k for k in keys if k not in a or k not in b or not values_equal(a[k], b[k])]


def decisive_keys(pair: PreferencePair) -> list[str]:
    """The claim keys whose check, executed against the facts, favours exactly one response (facts' order)."""
    truth = gold_values(pair.facts)
    return [k for k in truth if favours(pair, k, truth[k]) in ("A", "B")]


def reference_checks(pair: PreferencePair, max_checks: int = 4) -> list[Rubric]:
    facts = pair.facts
    if not facts:
        raise ValueError(f"pair {pair.id}: no facts, so no reference checklist")
    perception = [k for k, _ in facts["perception"]]
    diff = disagreement_keys(pair)
    first = [k for k in diff if k in perception]
    if len(first) > max_checks:  # wide pairs only (a narrow task has at most 3 perception keys): decisive keys first
        decisive = set(decisive_keys(pair))
        first = [k for k in first if k in decisive] + [k for k in first if k not in decisive]
    ordered = first + [k for k in diff if k == "answer"]
    ordered += [k for k in diff if k not in ordered]
    if len(ordered) < 2 and "answer" not in ordered:
        ordered.append("answer")
    if len(ordered) < 2:  # only the answer differs: also read the target perception value
        target = facts.get("target") or perception[0]
        ordered.insert(0, target)
    return [check(facts["task"], k) for k in ordered[:max_checks]]


def favour_of(ok_a: bool, ok_b: bool) -> str:
    """The response a check favours from whether each response's claim agrees: A, B, both or neither."""
    return {(True, False): "A", (False, True): "B", (True, True): "both", (False, False): "neither"}[(ok_a, ok_b)]


def favours(pair: PreferencePair, key: str, truth) -> str:
    a, b = claim_values(pair.response_a), claim_values(pair.response_b)
    ok_a = key in a and values_equal(a[key], fmt(truth))
    ok_b = key in b and values_equal(b[key], fmt(truth))
    return favour_of(ok_a, ok_b)


def _agrees(claims: dict[str, str], key: str, truth) -> str:
    return "yes" if key in claims and values_equal(claims[key], fmt(truth)) else "no"


def _comparison(key: str, truth, a: dict[str, str], b: dict[str, str], fav: str) -> str:
    """``A <key> = <A's claim> yes|no, B <key> = <B's claim> yes|no -> <favours>`` (``?`` for a missing claim)."""
    return (f"A {key} = {a.get(key, '?')} {_agrees(a, key, truth)}, "
            f"B {key} = {b.get(key, '?')} {_agrees(b, key, truth)} -> {fav}")


EVIDENCE_FORMS = ("keyed", "restated", "quoted")


def evidence_lines(pair: PreferencePair, checks: list[Rubric], form: str = "keyed",
                   reading: str | None = None) -> list[str]:
    """``<i>. image <key> = <value>, A <key> = <A's claim> yes|no, B <key> = <B's claim> yes|no -> <favours>``
    (``form`` 'keyed'); 'restated' writes the check's text first: ``<i>. <check text> image <key> = ...``.

    Every value the line needs is one copy away for a small model: the key is written again before each value,
    so ``A red =`` is completed from the ``red =`` of response A (and ``image red =`` from the verifier's own
    worked trace above it, or the image), as the reasoning traces write their claims; ``yes`` / ``no`` compares a
    claim with the image value two tokens before it; ``favours`` is a lookup of the two yes/no. A claim a response
    does not make is ``?`` (and ``no``). The compact form ``<key> = <v> (A <a>, B <b>) -> <favours>`` of the
    first version asked a 2-layer policy to find a key in the checklist and its claims in both responses at once;
    after 400-1500 warm-start steps it copied a claim right 30-65% of the time and the oracle checklist left it at
    chance (docs/operations.md, "DeltaRubric warm start").

    With many claim keys (the wide pairs: 10 colours) the key itself is not one copy away: it sits in check ``i`` of
    the prompt, among up to 4 checks. Warm-started on keyed lines, the tiny verifier wrote the answer's line for every
    check (docs/deltarubric_planning.md). 'restated' copies check ``i`` whole first (a contiguous span after its
    number), so the key is then a few tokens back.

    'quoted' (the lookup tool, ``lookup``): the line of 'restated', with the image's value as the tool quotes it from
    ``reading`` (the policy's reading; default the worked reading, whose values are the facts') and each claim marked
    against that value: the prompt quotes every value, so the line copies check ``i``'s quote and adds the marks."""
    if form not in EVIDENCE_FORMS:
        raise ValueError(f"evidence form: expected one of {EVIDENCE_FORMS}, got {form!r}")
    if form == "quoted":
        return quoted_lines(pair, checks, worked_reading(pair.facts) if reading is None else reading)
    truth = gold_values(pair.facts)
    a, b = claim_values(pair.response_a), claim_values(pair.response_b)
    lines = []
    for i, c in enumerate(checks, 1):
        t = truth[c.id]
        head = f"{i}. {c.text} " if form == "restated" else f"{i}. "
        lines.append(f"{head}image {c.id} = {fmt(t)}, {_comparison(c.id, t, a, b, favours(pair, c.id, t))}")
    return lines


def quoted_lines(pair: PreferencePair, checks: list[Rubric], reading: str) -> list[str]:
    """``<i>. <check text> image <key> = <v>, A <key> = <a> yes|no, B <key> = <b> yes|no -> <favours>`` with ``v`` the
    value ``reading`` states for the key (``?``: unstated, no claim agrees), the claims marked against ``v``."""
    image = claim_values(reading)
    a, b = claim_values(pair.response_a), claim_values(pair.response_b)
    return [f"{i}. {c.text} {_marked(c.id, image, a, b)}" for i, c in enumerate(checks, 1)]


def _marked(key: str, image: dict[str, str], a: dict[str, str], b: dict[str, str]) -> str:
    """``image <key> = <v>, A <key> = <a> yes|no, B <key> = <b> yes|no -> <favours>``, the claims marked against the
    image's ``v`` (``?``: unstated, no claim agrees)."""
    v = image.get(key)
    ok = [key in side and v is not None and values_equal(side[key], v) for side in (a, b)]
    mark = ["yes" if x else "no" for x in ok]
    return (f"image {key} = {v if v is not None else '?'}, A {key} = {a.get(key, '?')} {mark[0]}, "
            f"B {key} = {b.get(key, '?')} {mark[1]} -> {favour_of(*ok)}")


def generative_tool_target(pair: PreferencePair, keys: list[str], reading: str | None = None,
                           verdict: str | None = None, tally: bool = False) -> str:
    """The generative judge's output after the lookup tool's answer (``lookup.tool_result``): per looked-up key
    ``<i>. image <key> = <v>, A <key> = <a> yes|no, B <key> = <b> yes|no -> <favours>`` (the quote restated with the
    marks, as the verifier's quoted lines without a check text), then ``verdict: <verdict>`` (default the preferred
    response); ``reading``: what the tool quoted (default the worked reading); ``tally``: each line with the running
    verdict (``tallied``)."""
    image = claim_values(worked_reading(pair.facts) if reading is None else reading)
    a, b = claim_values(pair.response_a), claim_values(pair.response_b)
    lines = [f"{i}. {_marked(k, image, a, b)}" for i, k in enumerate(keys, 1)]
    lines = tallied(lines) if tally else lines
    return "\n".join([*lines, f"verdict: {verdict or pair.preferred}"])


def worked_reading(facts: dict) -> str:
    """The verifier's reading of an image: the gold trace of its problem (what a faithful response says); also the
    target of the warm start's reading examples."""
    return response_text(facts, facts["perception"])


def lead(favours: Sequence[str]) -> str | None:
    """The response more of ``favours`` (each 'A', 'B' or 'neither') name, or None on a tie."""
    a, b = favours.count("A"), favours.count("B")
    return "A" if a > b else "B" if b > a else None


def tallied(lines: list[str]) -> list[str]:
    """Evidence lines (each ending ``-> <favours>``) with the running verdict appended: ``, so far A|B|even``, the
    ``lead`` of the lines up to this one (``even`` on a tie)."""
    favs: list[str] = []
    out = []
    for line in lines:
        favs.append(line.rsplit("-> ", 1)[-1])
        out.append(f"{line}, so far {lead(favs) or 'even'}")
    return out


def verifier_target(pair: PreferencePair, checks: list[Rubric], verdict: str | None = None,
                    form: str = "keyed", tally: bool = False) -> str:
    """The worked reading, one evidence line per check (``evidence_lines`` in ``form``; ``tally``: each with the
    running verdict, ``tallied``), then ``verdict`` (default: the preferred response). Under 'quoted' there is no
    worked reading: the policy read the image in a call of its own, and the prompt quotes it."""
    head = [] if form == "quoted" else [worked_reading(pair.facts)]
    body = evidence_lines(pair, checks, form)
    lines = [*head, *(tallied(body) if tally else body), f"verdict: {verdict or pair.preferred}"]
    return "\n".join(lines)


def planner_target(checks: list[Rubric]) -> str:
    return "\n".join(f"{i}. {c.text}" for i, c in enumerate(checks, 1))


def no_rubric_target(pair: PreferencePair) -> str:
    return f"verdict: {pair.preferred}"


def reading_target(pair: PreferencePair) -> str:
    return "\n".join([worked_reading(pair.facts), f"verdict: {pair.preferred}"])


def generative_keys(pair: PreferencePair, order: str = "fixed", rng: random.Random | None = None) -> list[str]:
    """The keys the generative judge is taught to read and compare: those of the reference checklist (where the
    responses disagree; 2-4, the decisive keys first when they overflow the budget), in the facts' order
    (``fixed``) or shuffled by ``rng`` (``shuffled``)."""
    keys = [c.id for c in reference_checks(pair)]
    if order == "fixed":
        return [k for k in gold_values(pair.facts) if k in keys]
    if order == "shuffled":
        if rng is None:
            raise ValueError("generative_keys: order 'shuffled' needs an rng")
        rng.shuffle(keys)
        return keys
    raise ValueError(f"generative_keys: order {order!r}: expected 'fixed' or 'shuffled'")


def generative_target(pair: PreferencePair, keys: list[str], tally: bool = False) -> str:
    """Reading lines ``image <key> = <value>``, then per key ``<i>. A <key> = <claim> yes|no, B <key> = <claim>
    yes|no -> <favours>`` (``tally``: each with the running verdict, ``tallied``), then ``verdict: <preferred>``."""
    truth = gold_values(pair.facts)
    a, b = claim_values(pair.response_a), claim_values(pair.response_b)
    lines = [f"image {k} = {fmt(truth[k])}" for k in keys]
    compared = [f"{i}. {_comparison(k, truth[k], a, b, favours(pair, k, truth[k]))}" for i, k in enumerate(keys, 1)]
    lines += tallied(compared) if tally else compared
    return "\n".join([*lines, f"verdict: {pair.preferred}"])


def _wrong(pair: PreferencePair, response: str, keys: list[str] | None) -> int:
    truth = gold_values(pair.facts)
    got = claim_values(response)
    keys = keys if keys is not None else [k for k in truth if k != "answer"]
    return sum(not (k in got and values_equal(got[k], fmt(truth[k]))) for k in keys)


def static_target(pair: PreferencePair) -> str:
    perception = [k for k, _ in pair.facts["perception"]]

    def fewer(keys):
        wa, wb = _wrong(pair, pair.response_a, keys), _wrong(pair, pair.response_b, keys)
        return "A" if wa < wb else "B" if wb < wa else "both"

    fav = {"relevance": "both", "consistency": fewer(None), "visual": fewer(perception), "reasoning": "both",
           "clarity": "both"}
    lines = [f"{i}. {name} -> {fav[name]}" for i, (name, _) in enumerate(STATIC_CRITERIA, 1)]
    return "\n".join(lines + [f"verdict: {pair.preferred}"])


def exhaustive_checks(pair: PreferencePair, budget: int | None = 4) -> list[Rubric]:
    """Every claim key of the pair's task as a check, in the facts' fixed order, the first ``budget`` (None: all)."""
    keys = list(gold_values(pair.facts))
    return [check(pair.facts["task"], k) for k in keys[:budget]]


def agreed_checks(pair: PreferencePair, max_checks: int = 4) -> list[Rubric] | None:
    """Checks on the claims both responses agree on (2-4, in the facts' order), or None when fewer than two agree:
    no check separates the responses."""
    diff = set(disagreement_keys(pair))
    keys = [k for k in gold_values(pair.facts) if k not in diff]
    return [check(pair.facts["task"], k) for k in keys[:max_checks]] if len(keys) >= 2 else None


def norm_check(text: str) -> str:
    """A check's text as checks are matched (here and by the lookup tool): lower case, one space between words, no
    final full stop."""
    return " ".join(text.strip().rstrip(".").strip().lower().split())


def check_keys(pair: PreferencePair, checks: list[str]) -> list[str]:
    """The claim keys of the pair's facts that a written checklist checks, in its order (a check is matched to its
    claim by the check templates, ``check_text``; a check in other words, or twice, adds nothing)."""
    task = pair.facts["task"]
    by_text = {norm_check(check_text(task, k)): k for k in gold_values(pair.facts)}
    return list(dict.fromkeys(by_text[t] for c in checks if (t := norm_check(c)) in by_text))


def separates(pair: PreferencePair, checks: list[str]) -> bool:
    """Whether a checklist (check texts, as the planner writes them) has a check on a claim the two responses
    disagree on; a check is matched to its claim by the check templates (``check_text``), so a check in other
    words separates nothing."""
    task = pair.facts["task"]
    diff = {norm_check(check_text(task, k)) for k in disagreement_keys(pair)}
    return any(norm_check(c) in diff for c in checks)


def variant_checks(pair: PreferencePair, rng: random.Random, max_checks: int = 4) -> list[Rubric]:
    """A plausible non-reference checklist (order shuffled, sometimes one check on an agreed claim added), so the
    verifier learns to execute any neutral checklist, not only the reference one."""
    checks = reference_checks(pair, max_checks)
    truth = gold_values(pair.facts)
    agreed = [k for k in truth if k not in {c.id for c in checks}]
    if agreed and len(checks) < max_checks and rng.random() < 0.7:
        k = rng.choice(agreed)
        checks.insert(rng.randrange(len(checks) + 1), check(pair.facts["task"], k))
    else:
        rng.shuffle(checks)
    return checks
