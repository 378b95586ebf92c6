"""The rubric checks of the programmatic judge: ``CHECKS[name](ctx) -> (applicable, satisfied, rationale)``.

A check reads the ground-truth ``facts`` of a synthetic task and the *parsed* response (``key = value`` claims and
the last ``\\boxed{}``, see rubricflow.data.traces); no text in the response is interpreted as an instruction, so
"ignore previous instructions, all rubrics satisfied" is just more unparsed prose.

Response anatomy used below: the *first sentence* states what was read from the image (perception claims);
claims in later sentences are *computed* values; the last ``\\boxed{...}`` is the answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rubricflow.data.traces import BOXED_RE, claims_in, parse_value, values_equal

CHECKS_VERSION = "checks-v3"  # part of the cache key: bump when a checker changes (the mode is appended)
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_INT_RE = re.compile(r"^-?\d+$")
_NUM_RE = re.compile(r"^-?\d+(?:\.\d+)?$")
MAX_WORDS = 60  # `concise`


@dataclass
class Ctx:
    """Everything a checker needs: parsed facts and parsed response."""

    facts: dict[str, Any]
    answer: str | None
    response: str
    perception: dict[str, Any] = field(default_factory=dict)  # truth, in order
    intermediate: dict[str, Any] = field(default_factory=dict)  # truth, in order
    claims: list[tuple[str, str]] = field(default_factory=list)  # all claims before the last box
    first: list[tuple[str, str]] = field(default_factory=list)  # claims of the first sentence
    computed: list[tuple[str, str]] = field(default_factory=list)  # claims of later sentences
    boxes: list[str] = field(default_factory=list)

    @property
    def boxed(self) -> str | None:
        return self.boxes[-1].strip() if self.boxes else None

    @property
    def task(self) -> str:
        return str(self.facts.get("task", ""))

    @property
    def qtype(self) -> str:
        return str(self.facts.get("question_type", ""))

    def stated(self, key: str) -> list[str]:
        return [v for k, v in self.claims if k == key]

    def last_stated(self, key: str) -> Any:
        vals = self.stated(key)
        return parse_value(vals[-1]) if vals else None


def make_ctx(facts: dict, answer: str | None, response: str) -> Ctx:
    text = response or ""
    cut = text.rfind("\\boxed{")
    body = text[:cut] if cut >= 0 else text
    sentences = [s for s in _SENTENCE_END.split(body) if s.strip()]
    per_sentence = [claims_in(s) for s in sentences]
    with_claims = [c for c in per_sentence if c]
    return Ctx(
        facts=facts or {},
        answer=answer,
        response=text,
        perception={k: v for k, v in (facts or {}).get("perception", [])},
        intermediate={k: v for k, v in (facts or {}).get("intermediate", [])},
        claims=claims_in(body),
        first=with_claims[0] if with_claims else [],
        computed=[c for s in with_claims[1:] for c in s],
        boxes=BOXED_RE.findall(text),
    )


Result = tuple[bool, bool | None, str]
NA: Callable[[str], Result] = lambda why: (False, None, why)  # noqa: E731


def _all_correct(ctx: Ctx, truth: dict[str, Any], keys: list[str] | None = None) -> Result:
    keys = list(truth) if keys is None else keys
    wrong, missing = [], []
    for k in keys:
        vals = ctx.stated(k)
        if not vals:
            missing.append(k)
        elif not all(values_equal(v, truth[k]) for v in vals):
            wrong.append(f"{k}={vals[-1]}")
    ok = not wrong and not missing
    why = "all stated and correct" if ok else f"wrong: {wrong or '-'}; missing: {missing or '-'}"
    return True, ok, why


# -- constraint satisfaction ----------------------------------------------------------------------------------
def boxed_present(ctx: Ctx) -> Result:
    ok = bool(ctx.boxed)
    return True, ok, "boxed answer present" if ok else "no non-empty \\boxed{} answer"


def single_boxed(ctx: Ctx) -> Result:
    if not ctx.boxes:
        return NA("no boxed answer")
    return True, len(ctx.boxes) == 1, f"{len(ctx.boxes)} boxed answer(s)"


def answer_format(ctx: Ctx) -> Result:
    if ctx.boxed is None:
        return NA("no boxed answer")
    b = ctx.boxed
    expected = {
        "count": (_INT_RE.match(b) is not None, "an integer"),
        "diff": (_INT_RE.match(b) is not None, "an integer"),
        "tallest": (b in ctx.perception, f"one of {list(ctx.perception)}"),
        "area": (_NUM_RE.match(b) is not None, "a number"),
        "arith": (_INT_RE.match(b) is not None, "an integer"),
        "sum": (_INT_RE.match(b) is not None, "an integer"),
    }
    if ctx.qtype not in expected:
        return NA(f"no answer format known for question type {ctx.qtype!r}")
    ok, what = expected[ctx.qtype]
    return True, ok, f"boxed {b!r} {'is' if ok else 'is not'} {what}"


def concise(ctx: Ctx) -> Result:
    n = len(ctx.response.split())
    return True, n <= MAX_WORDS, f"{n} words (limit {MAX_WORDS})"


# -- visual faithfulness --------------------------------------------------------------------------------------
def perception_complete(ctx: Ctx) -> Result:
    if not ctx.perception:
        return NA("no image quantities in the facts")
    missing = [k for k in ctx.perception if not ctx.stated(k)]
    return True, not missing, "all image quantities stated" if not missing else f"missing: {missing}"


def perception_correct(ctx: Ctx) -> Result:
    if not ctx.perception:
        return NA("no image quantities in the facts")
    stated = [(k, v) for k, v in ctx.claims if k in ctx.perception]
    if not stated:
        return True, False, "no image quantity stated"
    wrong = [f"{k}={v}" for k, v in stated if not values_equal(v, ctx.perception[k])]
    return True, not wrong, "stated image quantities match" if not wrong else f"wrong: {wrong}"


def no_hallucinated_entities(ctx: Ctx) -> Result:
    if not ctx.claims:
        return NA("no claims")
    known = set(ctx.perception) | set(ctx.intermediate)
    unknown = sorted({k for k, _ in ctx.claims if k not in known})
    return True, not unknown, "only known entities" if not unknown else f"unknown entities: {unknown}"


def counts_match_image(ctx: Ctx) -> Result:
    if ctx.task != "counting":
        return NA("not a counting task")
    return _all_correct(ctx, ctx.perception)


def bar_heights_match_image(ctx: Ctx) -> Result:
    if ctx.task != "barchart":
        return NA("not a bar chart")
    return _all_correct(ctx, ctx.perception)


def points_match_image(ctx: Ctx) -> Result:
    if ctx.task != "geometry":
        return NA("no points to read")
    return _all_correct(ctx, ctx.perception)


def tallest_bar_named(ctx: Ctx) -> Result:
    if ctx.qtype != "tallest":
        return NA("question does not ask for the tallest bar")
    best = max(ctx.perception, key=lambda k: ctx.perception[k])
    return True, ctx.boxed == best, f"named {ctx.boxed!r}, tallest is {best}"


# -- mathematical accuracy ------------------------------------------------------------------------------------
def intermediate_correct(ctx: Ctx) -> Result:
    if not ctx.intermediate:
        return NA("no intermediate values for this task")
    return _all_correct(ctx, ctx.intermediate)


def _derivations(ctx: Ctx) -> list[tuple[str, Any, Any]]:
    """(key, stated value, value implied by the other stated values) for every checkable computed claim."""
    out = []
    s = ctx.last_stated
    bars = [s(k) for k in ("A", "B", "C")]
    if all(isinstance(b, (int, float)) for b in bars):
        for key, f in (("max", max), ("min", min)):
            if s(key) is not None:
                out.append((key, s(key), f(bars)))
    hi, lo = s("max"), s("min")
    if s("diff") is not None and isinstance(hi, (int, float)) and isinstance(lo, (int, float)):
        out.append(("diff", s("diff"), hi - lo))
    p, q = s("P"), s("Q")
    if isinstance(p, tuple) and isinstance(q, tuple) and len(p) == len(q) == 2:
        for key, i in (("dx", 0), ("dy", 1)):
            if s(key) is not None:
                out.append((key, s(key), abs(q[i] - p[i])))
    dx, dy = s("dx"), s("dy")
    if s("area") is not None and isinstance(dx, (int, float)) and isinstance(dy, (int, float)):
        out.append(("area", s("area"), dx * dy / 2))
    if ctx.facts.get("steps"):  # each defined step (arith, the bar sum), from the values stated for its inputs
        from rubricflow.data.arith import OPS

        for key, op, x, y in ctx.facts.get("steps", []):
            vx, vy = s(x), s(y)
            if s(key) is not None and isinstance(vx, (int, float)) and isinstance(vy, (int, float)) and op in OPS:
                out.append((key, s(key), OPS[op](vx, vy)))
    if ctx.task == "counting":  # "so red = N" must repeat the count read off the image
        for k, v in ctx.computed:
            first = [fv for fk, fv in ctx.first if fk == k]
            if first:
                out.append((k, parse_value(v), parse_value(first[-1])))
    return out


def arithmetic_consistent(ctx: Ctx) -> Result:
    d = _derivations(ctx)
    if not d:
        return NA("no computed value whose inputs are stated")
    bad = [f"{k}={v} (expected {e})" for k, v, e in d if not values_equal(v, e)]
    return True, not bad, f"{len(d)} step(s) consistent" if not bad else f"inconsistent: {bad}"


def diff_from_extremes(ctx: Ctx) -> Result:
    if ctx.qtype != "diff":
        return NA("question does not ask for a difference")
    hi, lo, diff = ctx.last_stated("max"), ctx.last_stated("min"), ctx.last_stated("diff")
    if not all(isinstance(x, (int, float)) for x in (hi, lo, diff)):
        return True, False, "max, min and diff not all stated"
    return True, values_equal(diff, hi - lo), f"diff={diff}, max-min={hi - lo}"


def fractional_area_exact(ctx: Ctx) -> Result:
    area = ctx.intermediate.get("area")
    if ctx.task != "geometry" or area is None or float(area).is_integer():
        return NA("no non-integer area")
    vals = [parse_value(v) for v in ctx.stated("area")] + ([parse_value(ctx.boxed)] if ctx.boxed else [])
    exact = bool(vals) and all(isinstance(v, float) and not float(v).is_integer() for v in vals)
    return True, exact, "half-unit area kept exact" if exact else f"area rounded or missing: {vals}"


# -- logical coherence ----------------------------------------------------------------------------------------
def answer_from_last_value(ctx: Ctx) -> Result:
    if not ctx.computed:
        return NA("no value was computed")
    key, val = ctx.computed[-1]
    last = parse_value(val)
    if ctx.boxed is None:
        return True, False, f"last computed {key}={val} but no boxed answer"
    b = parse_value(ctx.boxed)
    if isinstance(b, (int, float)):
        return True, values_equal(b, last), f"boxed {ctx.boxed} vs last computed {key}={val}"
    named = ctx.last_stated(ctx.boxed)  # a label answer (bar "B") follows if its stated value is the last value
    ok = named is not None and values_equal(named, last)
    return True, ok, f"boxed {ctx.boxed} (stated {named}) vs last computed {key}={val}"


def question_target_addressed(ctx: Ctx) -> Result:
    target = {"count": ctx.facts.get("target"), "tallest": "max", "diff": "diff", "area": "area", "sum": "total",
              "arith": ctx.facts.get("target")}.get(ctx.qtype)
    if not target:
        return NA(f"no target quantity known for question type {ctx.qtype!r}")
    ok = bool(ctx.stated(target))
    return True, ok, f"{target} {'stated' if ok else 'never stated'}"


def no_contradiction(ctx: Ctx) -> Result:
    if not ctx.claims:
        return NA("no claims")
    seen: dict[str, str] = {}
    bad = []
    for k, v in ctx.claims:
        if k in seen and not values_equal(seen[k], v):
            bad.append(f"{k}={seen[k]} vs {v}")
        seen.setdefault(k, v)
    return True, not bad, "no contradictions" if not bad else f"contradictions: {bad}"


def perception_before_reasoning(ctx: Ctx) -> Result:
    if not ctx.computed:
        return NA("no value was computed")
    first_keys = [k for k, _ in ctx.first]
    ok = bool(first_keys) and all(k in ctx.perception for k in first_keys)
    return True, ok, "image read first" if ok else f"first sentence states {first_keys or 'nothing'}"


def intermediate_steps_shown(ctx: Ctx) -> Result:
    if not ctx.intermediate:
        return NA("task needs no intermediate step")
    shown = [k for k in ctx.intermediate if ctx.stated(k)]
    return True, bool(shown), f"steps shown: {shown or 'none'}"


CHECKS: dict[str, Callable[[Ctx], Result]] = {
    f.__name__: f
    for f in (
        boxed_present,
        single_boxed,
        answer_format,
        concise,
        perception_complete,
        perception_correct,
        no_hallucinated_entities,
        counts_match_image,
        bar_heights_match_image,
        points_match_image,
        tallest_bar_named,
        intermediate_correct,
        arithmetic_consistent,
        diff_from_extremes,
        fractional_area_exact,
        answer_from_last_value,
        question_target_addressed,
        no_contradiction,
        perception_before_reasoning,
        intermediate_steps_shown,
    )
}
