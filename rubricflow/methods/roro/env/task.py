"""Multi-step arithmetic problems whose every step can be checked, and a GSM8K-style adapter for real data.

A synthetic problem is a start value and a chain of operations::

    question: "Start with 7. Add 5. Multiply by 3. Subtract 4."
    steps:    "7 + 5 = 12" / "12 * 3 = 36" / "36 - 4 = 32" / "#### 32"

A step ``a op b = c`` is *locally correct* when ``a`` is the value carried from the previous step (the previous
step's written result, or the start value), ``op b`` is the problem's k-th operation and ``c = a op b``. Errors
propagate: step k's written result is step k+1's left operand, so one wrong result makes every later step
*off track* (its written result differs from the true intermediate value) even when each later step is locally
correct, and the final answer wrong. The final step ``#### N`` is correct when N is the carried value.

GSM8K-style rows (``question``, ``answer`` ending ``#### N``; read by ``problems.read_gsm8k``) become problems whose
outcome is checkable (the final number) but whose steps are not (``ops`` is None; step checks report
``checkable=False``).

What the question asks (``Problem.answer_kind``, ``roro.task.answer``): ``value`` (the final number) or ``parity``
(whether it is even or odd). The step models write the same value chain either way (same prompts, same steps, same
routes); only the outcome is read differently. Under ``parity`` a route whose accepted error changed the final value
still scores outcome 1 when the wrong value has the right parity (about half the time), so the outcome is a noisy
signal of routing quality; ``chain_exact`` (every step right) is not.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field

from rubricflow.data.arith import OPS as ARITHMETIC
from rubricflow.data.arith import parse_step
from rubricflow.data.traces import values_equal

OPS = {"add": ("Add", "+"), "sub": ("Subtract", "-"), "mul": ("Multiply by", "*")}  # name -> (word, symbol)
_SYMBOL_TO_OP = {sym: name for name, (_, sym) in OPS.items()}
FINAL_PREFIX = "####"
FINAL_NUMBER = r"####\s*(-?[\d,]*\.?\d+)\s*$"  # ``#### N`` at the end of a text; group 1 is N (commas allowed)
_FINAL_RE = re.compile(r"^\s*" + FINAL_NUMBER)
ANSWER_KINDS = ("value", "parity")


def apply_op(op: str, a: int, b: int) -> int:
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}; expected one of {sorted(OPS)}")
    return ARITHMETIC[OPS[op][1]](a, b)


@dataclass
class Problem:
    """One routing problem. ``ops`` = [(op, arg), ...] for synthetic problems, None for real (GSM8K) data."""

    id: str
    question: str
    answer: str  # the final number as text
    split: str = "train"
    source: str = "synthetic"
    start: int | None = None
    ops: list[tuple[str, int]] | None = None
    reference_steps: list[str] = field(default_factory=list)
    answer_kind: str = "value"  # what the question asks: "value" (the final number) or "parity" (even / odd)

    @property
    def checkable(self) -> bool:
        return self.ops is not None and self.start is not None

    @property
    def n_steps(self) -> int:
        """Steps of a complete solution, the final ``#### N`` step included."""
        return len(self.ops) + 1 if self.ops is not None else len(self.reference_steps)

    def true_values(self) -> list[int]:
        """True intermediate value after each operation."""
        if not self.checkable:
            raise ValueError(f"problem {self.id}: no step structure (source={self.source})")
        vals, v = [], self.start
        for op, arg in self.ops:
            v = apply_op(op, v, arg)
            vals.append(v)
        return vals


# ----------------------------------------------------------------------------------------------------------------
# Synthetic generator


def render_question(start: int, ops: list[tuple[str, int]]) -> str:
    return " ".join([f"Start with {start}."] + [f"{OPS[op][0]} {arg}." for op, arg in ops])


_WORD_TO_OP = {word: name for name, (word, _) in OPS.items()}
_QUESTION_RE = re.compile(r"^Start with (-?\d+)\.((?: (?:Add|Subtract|Multiply by) -?\d+\.)*)$")
_OP_RE = re.compile(r" (Add|Subtract|Multiply by) (-?\d+)\.")


def parse_question(question: str) -> tuple[int, list[tuple[str, int]]]:
    """The start value and operations of a synthetic question (the inverse of :func:`render_question`); ValueError
    naming the text when it is not one."""
    m = _QUESTION_RE.match(question.strip())
    if not m:
        raise ValueError(f"not a synthetic question ('Start with N. Add k. ...'): {question[:80]!r}")
    return int(m.group(1)), [(_WORD_TO_OP[w], int(a)) for w, a in _OP_RE.findall(m.group(2))]


def solution_steps(start: int, ops: list[tuple[str, int]]) -> list[str]:
    steps, v = [], start
    for op, arg in ops:
        nv = apply_op(op, v, arg)
        steps.append(f"{v} {OPS[op][1]} {arg} = {nv}")
        v = nv
    return steps + [f"{FINAL_PREFIX} {v}"]


def _rng(seed: int, split: str, index: int) -> random.Random:
    h = hashlib.sha256(f"roro:{seed}:{split}:{index}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def sample_problem(
    rng: random.Random, min_ops: int, max_ops: int, max_value: int, mul_max: int = 3, arg_max: int = 9
) -> tuple[int, list[tuple[str, int]]]:
    """A start value in [2, 9] and ops (add/subtract 1..arg_max, multiply by 2..mul_max) keeping every
    intermediate value in ``[0, max_value]``."""
    start = rng.randint(2, 9)
    v, ops = start, []
    for _ in range(rng.randint(min_ops, max_ops)):
        choices = []
        if v + 1 <= max_value:
            choices.append(("add", rng.randint(1, min(arg_max, max_value - v))))
        if v >= 1:
            choices.append(("sub", rng.randint(1, min(arg_max, v))))
        if 2 <= v and 2 * v <= max_value and mul_max >= 2:
            choices.append(("mul", rng.randint(2, max(2, min(mul_max, max_value // v)))))
        op, arg = rng.choice(choices)
        v = apply_op(op, v, arg)
        ops.append((op, arg))
    return start, ops


def make_problems(
    n: int, split: str, seed: int, min_ops: int = 2, max_ops: int = 3, max_value: int = 20, mul_max: int = 2,
    arg_max: int = 5, answer: str = "value",
) -> list[Problem]:
    """``n`` synthetic problems, a pure function of (seed, split, index, sizes); ``answer`` is what they ask
    (``ANSWER_KINDS``)."""
    if min_ops < 1 or max_ops < min_ops:
        raise ValueError(f"need 1 <= min_ops <= max_ops, got min_ops={min_ops}, max_ops={max_ops}")
    if answer not in ANSWER_KINDS:
        raise ValueError(f"answer: unknown kind {answer!r}; expected one of {ANSWER_KINDS}")
    out = []
    for i in range(n):
        start, ops = sample_problem(_rng(seed, split, i), min_ops, max_ops, max_value, mul_max, arg_max)
        steps = solution_steps(start, ops)
        out.append(
            Problem(
                id=f"{split}-{i:05d}", question=render_question(start, ops), answer=steps[-1].split()[-1],
                split=split, start=start, ops=ops, reference_steps=steps, answer_kind=answer,
            )
        )
    return out


# ----------------------------------------------------------------------------------------------------------------
# Step checking


@dataclass
class StepCheck:
    """What a step says and whether it is right. ``value`` is the value carried to the next step."""

    kind: str  # "op" | "final" | "unparsed"
    checkable: bool
    correct: bool | None  # locally correct (None when not checkable)
    on_track: bool | None  # the written result equals the true value (None when not checkable)
    value: int | None  # the written result (carried forward); None when unparsed
    reason: str = ""


def parse_final(text: str) -> str | None:
    """The number after ``####`` (commas stripped), or None."""
    m = _FINAL_RE.match(text.strip())
    return m.group(1).replace(",", "") if m else None


def is_final(text: str) -> bool:
    return text.strip().startswith(FINAL_PREFIX)


def check_step(problem: Problem, index: int, text: str, carried: int | None) -> StepCheck:
    """Check step ``index`` (0-based) of ``problem`` given the value ``carried`` from the previous step.

    ``carried`` is the previous step's written result (``problem.start`` for the first step). Not checkable
    problems only get ``kind`` and ``value``.
    """
    if is_final(text):
        fin = parse_final(text)
        value = int(float(fin)) if fin is not None and float(fin).is_integer() else None
        if not problem.checkable:
            return StepCheck("final", False, None, None, value)
        if fin is None:
            return StepCheck("final", True, False, False, None, "unparsed final answer")
        expected_index = len(problem.ops)
        if index != expected_index:
            return StepCheck("final", True, False, False, value,
                             f"final answer at step {index + 1}, expected {expected_index + 1}")
        ok = value == carried
        return StepCheck("final", True, ok, value == int(problem.answer), value,
                         "" if ok else "does not restate the carried value")
    parsed = parse_step(text)
    if parsed is None:
        return StepCheck("unparsed", problem.checkable, False if problem.checkable else None,
                         False if problem.checkable else None, None, "not of the form 'a op b = c'")
    a, sym, b, c = parsed
    if not problem.checkable:
        return StepCheck("op", False, None, None, c)
    if index >= len(problem.ops):
        return StepCheck("op", True, False, False, c, f"step {index + 1} beyond the {len(problem.ops)} operations")
    op, arg = problem.ops[index]
    reasons = []
    if a != carried:
        reasons.append(f"left operand {a} != carried value {carried}")
    if _SYMBOL_TO_OP[sym] != op or b != arg:
        reasons.append(f"operation '{sym} {b}' != '{OPS[op][1]} {arg}'")
    if c != apply_op(_SYMBOL_TO_OP[sym], a, b):
        reasons.append(f"arithmetic: {a} {sym} {b} != {c}")
    on_track = c == problem.true_values()[index]
    return StepCheck("op", True, not reasons, on_track, c, "; ".join(reasons))


def answer_correct(problem: Problem, final_text: str | None) -> bool:
    """Outcome check: the ``#### N`` number equals the reference answer (numerically); for ``answer_kind ==
    "parity"``, an integer with the reference answer's parity."""
    if final_text is None:
        return False
    fin = parse_final(final_text)
    if fin is None:
        return False
    if problem.answer_kind == "parity":
        f, ref = float(fin), float(problem.answer)
        return f.is_integer() and ref.is_integer() and int(f) % 2 == int(ref) % 2
    return values_equal(fin, problem.answer)
