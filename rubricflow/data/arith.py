"""``arith``: a text-only synthetic task of multi-step arithmetic word problems with checkable intermediate facts.

A problem gives three named quantities and defines two computed ones, each by one operation::

    Sam has a = 4 apples. He buys b = 3 bags with c = 2 apples each, so s = b * c apples more, and t = a + s
    apples in all. How many apples does Sam have in all? ...
    gold trace:  a = 4, b = 3, c = 2. s = 3 * 2 = 6, t = 4 + 6 = 10. \\boxed{10}

The names are given, the operations are stated, the numbers must be computed: every step of the solution is a
``name = value`` claim that the programmatic judge and the strict verifier (``rubricflow.evaluation.trace_check``) check
exactly. ``facts`` follow the synthetic tasks' layout (``rubricflow.data.traces``): the given quantities are the
``perception`` (what the problem states; for an image task what the image shows), the computed ones the
``intermediate`` values, plus ``steps``: ``[[key, op, x, y], ...]`` so a computed value can be checked against the
values a response stated for its inputs (``arithmetic_consistent``).

The answer is the last computed value (a non-negative integer). Operands are 1-9 (products of two operands at most
81), so a small real model can compute the steps; no image, so ``Sample.images`` is empty. Prompts carry one
solved example (:data:`DEMO`, :func:`task_demo`).
"""

from __future__ import annotations

import random
import re

# The task's one-shot demonstration: every prompt starts with this solved problem as an earlier user/assistant
# exchange (rubricflow.evaluation.heldout.policy_requests), which shows the response format the checks read. Measured on
# SmolLM2-135M-Instruct (greedy): with only a written format instruction it answered in free prose (0 of 16 restated
# a, b, c); with this exchange it restated them in most answers. With the working written out (s = 2 + 3 = 5) the
# untrained model's val accuracy was 4 of 32 (12.5%), against 1 of 32 with bare values (s = 5): it computes better
# when it writes the operands out, and it boxes its answer more often.
DEMO = (
    "A box has a = 2 red and b = 3 blue balls, so s = a + b balls. c = 4 boxes like it hold t = s * c balls. "
    "How many balls do the boxes hold?",
    "a = 2, b = 3, c = 4. s = 2 + 3 = 5, t = 5 * 4 = 20. \\boxed{20}",
)

# The arithmetic both multi-step tasks check, by operator symbol: this word-problem task (named quantities, a
# boxed answer) and RoRo's operation chains (``rubricflow.methods.roro.env.task``: "Start with 7. Add 5. ...", one
# step per line, ``#### N``). A written step is ``x op y = z`` in both (:func:`parse_step`).
OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}
STEP = re.compile(r"^\s*(-?\d+)\s*([+\-*])\s*(-?\d+)\s*=\s*(-?\d+)\s*$")


def parse_step(text: str) -> tuple[int, str, int, int] | None:
    """``"12 * 2 = 24"`` -> ``(12, "*", 2, 24)``; None when the text is not one integer step ``x op y = z``."""
    m = STEP.match(text)
    return (int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))) if m else None

# (story, op of s, op of t): {a} {b} {c} are the given values; s combines two of them, t combines s with the third.
# Each template names its operands so that the result of "-" is never negative (the generator re-draws otherwise).
TEMPLATES = [
    ("{n} has a = {a} apples. {p} buys b = {b} bags with c = {c} apples each, so s = b * c apples more, and "
     "t = a + s apples in all. How many apples does {n} have in all?", ("s", "*", "b", "c"), ("t", "+", "a", "s")),
    ("A shelf holds a = {a} books. {n} puts b = {b} more books on it, so s = a + b, and then takes c = {c} books "
     "away, so t = s - c books are left. How many books are left?", ("s", "+", "a", "b"), ("t", "-", "s", "c")),
    ("{n} has a = {a} boxes with b = {b} pens each, so s = a * b pens. {p} gives away c = {c} pens, so t = s - c "
     "pens are left. How many pens are left?", ("s", "*", "a", "b"), ("t", "-", "s", "c")),
    ("A bus carries a = {a} people. At a stop b = {b} get off, so s = a - b, and c = {c} get on, so t = s + c "
     "people are on the bus. How many people are on the bus?", ("s", "-", "a", "b"), ("t", "+", "s", "c")),
    ("{n} reads a = {a} pages a day for b = {b} days, so s = a * b pages, and then c = {c} pages more, so "
     "t = s + c pages in all. How many pages does {n} read in all?", ("s", "*", "a", "b"), ("t", "+", "s", "c")),
    ("A class has a = {a} tables with b = {b} chairs each, so s = a * b chairs, and c = {c} extra chairs, so "
     "t = s + c chairs in all. How many chairs are there in all?", ("s", "*", "a", "b"), ("t", "+", "s", "c")),
]
NAMES = [("Sam", "He"), ("Ana", "She"), ("Lee", "He"), ("Mia", "She"), ("Tom", "He"), ("Zoe", "She")]


def gen_arith(rng: random.Random, size: int = 0) -> tuple[None, str, str, str, dict]:
    """One problem: ``(None, question, answer, "int", facts)`` (no image; ``size`` is unused)."""
    story, step_s, step_t = TEMPLATES[rng.randrange(len(TEMPLATES))]
    name, pronoun = NAMES[rng.randrange(len(NAMES))]
    while True:
        given = {"a": rng.randint(1, 9), "b": rng.randint(1, 9), "c": rng.randint(1, 9)}
        values = dict(given)
        for key, op, x, y in (step_s, step_t):
            values[key] = OPS[op](values[x], values[y])
        if values["s"] >= 0 and values["t"] >= 0:
            break
    question = story.format(n=name, p=pronoun, **given)
    facts = {
        "task": "arith",
        "perception": [[k, given[k]] for k in ("a", "b", "c")],
        "intermediate": [["s", values["s"]], ["t", values["t"]]],
        "steps": [list(step_s), list(step_t)],
        "target": "t",
        "question_type": "arith",
    }
    return None, question, str(values["t"]), "int", facts


def task_demo(task: str) -> tuple[str, str] | None:
    """The one-shot demonstration of a text task's prompts (None for the image tasks, which are learnt by SFT)."""
    return DEMO if task == "arith" else None
