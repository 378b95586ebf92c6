"""What the Rubricor and the Judge read, and the templated warm-start targets.

Rubricor input: the problem and a label-free view of its trajectory pool (the SLM's uncertainty at each step of
the all-SLM route, one digit each: what makes a rubric query-specific without revealing outcomes)::

    Write a routing rubric.
    Problem: Start with 7. Add 5. Multiply by 2.
    SLM uncertainty: 1 7 0

Judge input: the rubric (criterion names with their query-specific score guidance) and the trajectory in text:
each step with who wrote it and the SLM's uncertainty at that step (one digit, 0-9), never the ground truth. Under
``rubricor_judge.judge_reads: steps`` (the tiny profile's first reading) the problem is not repeated: the steps carry
its numbers and operations. Under ``judge_reads: problem`` (the paper's Judge reads the query) a ``Problem:`` line
follows the task line, and the two "right" families are read against it (``literal_satisfied``): a step that
misreads the problem's operand is right arithmetic, invisible to a reader of the steps alone. Under ``judge_reads:
checked`` the Judge also has a calculator: each step line ends with its check against the problem (``CHECK_MARKS``,
``[right]`` / ``[wrong]``, as ``_step_checks`` reads it), the output of a tool call a real Judge would make, so the
two "right" families are a lookup of marks as the uncertainty families are. Writer and uncertainty are one token
(``S0``-``S9`` for a step the SLM wrote, ``L0``-``L9`` for one the LRM wrote, the digit being the SLM's uncertainty
at that step; ``STEP_MARKS``)::

    Judge the routing.
    Rubric:
    - risky step to LRM: 1.0 if step 2 is by the LRM
    - uncertain steps to LRM: 1.0 if no SLM step has u above 5
    - few LRM steps: 1.0 if at most 1 LRM steps
    - steps are right: 1.0 if every step is right
    Steps:
    1 S1: 7 + 5 = 12
    2 L7: 12 * 2 = 24
    3 S0: #### 24
    LRM steps: 1 of 3

A tiny Judge did not learn to read ``SLM u=7`` spelled over several tokens within the CPU budget (docs/operations.md,
"Measurements behind defaults"): one token per step makes "is there an SLM step above u 5" a lookup of marks.

Criterion families. On the tiny profile a rubric weighs a fixed list of four criterion families (``FAMILIES``;
``rubricor_judge.families: six`` adds ``EXTRA_FAMILIES``), always in the same order; what makes it query-specific is
the weights (0 drops a family) and the parameters of the score guidance: the step to escalate, the uncertainty digit
that counts as risky, the LRM-call budget. A tiny Judge then never has to copy free text into
``criterion_judgments`` (it failed to within the CPU budget), and all of its learning goes into the judgments
themselves. The parsing and the process score are generic: any criteria (a real Rubricor's) work the same way.

Round-0 warm start: both LMs learn the output *format* with deliberately noisy or uninformative content, so
the alternation has room to learn: the Rubricor gets random weights and parameters; the Judge gets each
criterion's literal reading of the visible trajectory (``literal_satisfied``) flipped with probability
``label_noise`` (0.5 = pure noise) and a random ``score``.
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING

from rubricflow.data.arith import OPS, parse_step
from rubricflow.judge.protocol import Rubric, Verdict
from rubricflow.methods.roro.env.task import Problem, check_step, parse_question
from rubricflow.methods.roro.judge.rubric import criterion

if TYPE_CHECKING:  # types only: importing routing (torch) here would load torch with the config
    from rubricflow.methods.roro.env.routing import Trajectory

RUBRICOR_TASK = "Write a routing rubric."
JUDGE_TASK = "Judge the routing."

# (criterion name, score guidance); {k} a step number, {d} / {s} an uncertainty digit, {m} a number of LRM steps
FAMILIES = (
    ("risky step to LRM", "1.0 if step {k} is by the LRM"),
    ("uncertain steps to LRM", "1.0 if no SLM step has u above {d}"),
    ("few LRM steps", "1.0 if at most {m} LRM steps"),
    ("steps are right", "1.0 if every step is right"),
)
# Two more families (``rubricor_judge.families: six``): a wasted call (an LRM call where the SLM was right) shows as
# an LRM step where the SLM was sure; an accepted SLM error shows (when it is an arithmetic slip, not a misread
# operand) as a wrong SLM step. What they add to the exact-reader ceiling: ``study/family_ceiling.py``.
EXTRA_FAMILIES = (
    ("no call on a sure step", "1.0 if no LRM step has u at most {s}"),
    ("SLM steps are right", "1.0 if every SLM step is right"),
)
FAMILY_SETS = {"four": FAMILIES, "six": FAMILIES + EXTRA_FAMILIES}


# JSON boilerplate of the canonical renderings and the criterion names, added to the rubric LMs' tokenizer as whole
# tokens: a judgment is then a fraction of its length in word pieces, and copying a criterion name into
# ``criterion_judgments`` is copying one token. The text (and its parsing) is unchanged.
STEP_MARKS = [f"{w}{d}" for w in ("S", "L") for d in range(10)]
CHECK_MARKS = ("[right]", "[wrong]")  # a step's check against the problem (judge_reads: checked)
JUDGE_READS = ("steps", "problem", "checked")


def reads_the_problem(reads: str) -> bool:
    """A Judge whose input is ``reads`` (``judge_reads``) sees the problem, so the literal readings of the "right"
    families (its warm-start targets, the exact reader) check the steps against it."""
    return reads != "steps"


def added_tokens(families=FAMILIES, checked: bool = False) -> list[str]:
    """The JSON boilerplate, the names of ``families`` and the step marks (and the check marks when ``checked``), as
    whole tokens."""
    return [
        '{"criterion_judgments": [{"criterion": "', '", "score": ', ', "satisfied": ', '}, {"criterion": "', "}]}",
        '{"criteria": [{"criterion": "', '", "weight": ', ', "score_guidance": "', '"}, {"criterion": "', '"}]}',
    ] + [name for name, _ in families] + STEP_MARKS + (list(CHECK_MARKS) if checked else [])


ADDED_TOKENS = added_tokens()


def u_digit(u: float) -> int:
    """Uncertainty in [0, 1] as one digit 0-9 (tenths, floored)."""
    return max(0, min(9, int(u * 10)))


def rubricor_input(question: str, slm_uncertainties: list[float]) -> str:
    us = " ".join(str(u_digit(u)) for u in slm_uncertainties)
    return f"{RUBRICOR_TASK}\nProblem: {question}\nSLM uncertainty: {us}"


def step_mark(writer: str, u: float) -> str:
    """``S<d>`` / ``L<d>``: who wrote the step (SLM / LRM) and the SLM's uncertainty digit there."""
    return f"{'L' if writer == 'LRM' else 'S'}{u_digit(u)}"


def trajectory_text(t: Trajectory, checked: bool = False) -> str:
    """The route, one line per step; with ``checked`` each line ends with the step's check mark (``CHECK_MARKS``; a
    step after the final ``#### N`` is marked wrong)."""
    marks = {}
    if checked:
        marks = {s.index: CHECK_MARKS[0] if ok else CHECK_MARKS[1] for s, ok, _ in _step_checks(t, True)}
    lines = [f"{s.index + 1} {step_mark(s.writer, s.slm_uncertainty)}: {s.text}"
             + (f" {marks.get(s.index, CHECK_MARKS[1])}" if checked else "") for s in t.steps]
    return "\n".join(lines + [f"LRM steps: {t.lrm_calls} of {len(t.steps)}"])


def judge_input(question: str, rubric: list[Rubric], t: Trajectory, reads: str = "steps") -> str:
    """The Judge's user message as ``reads`` (``rubricor_judge.judge_reads``) says: the rubric and the steps; the
    problem too under ``problem``; the problem and each step's check mark under ``checked``."""
    if reads not in JUDGE_READS:
        raise ValueError(f"roro.rubricor_judge.judge_reads: unknown reading {reads!r}; expected one of {JUDGE_READS}")
    crit = "\n".join(f"- {c.id}: {c.guidance}".rstrip(": ") for c in rubric)
    problem = f"\nProblem: {question}" if reads_the_problem(reads) else ""
    return f"{JUDGE_TASK}{problem}\nRubric:\n{crit}\nSteps:\n{trajectory_text(t, reads == 'checked')}"


def chat(tokenizer, content: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)


# ----------------------------------------------------------------------------------------------------------------
# Warm-start templates


def random_rubric(rng: random.Random, n_steps: int, families=FAMILIES) -> list[Rubric]:
    """Every family, random weights (0.1-0.9) and random parameters: uninformative by construction (the parameters
    are read back from the guidance by :func:`guidance_params`).

    No warm-start weight is 0: the Rubricor's greedy rubric takes the most likely digit of each weight, and with 0.0
    among ten equally frequent targets a warm-started Rubricor wrote 0.0 for every family of every problem (a rubric
    with no weight fails to parse: every score missing). A rubric learns to drop a family by weight 0 from kept
    candidates later."""
    weights = [rng.randint(1, 9) / 10 for _ in families]
    params = {"k": rng.randint(1, max(1, n_steps)), "d": rng.randint(1, 8), "m": rng.randint(0, 2)}
    if any("{s}" in guide for _, guide in families):  # drawn only then: the four families' draws stay as they were
        params["s"] = rng.randint(0, 8)
    return [criterion(name, w, guide.format(**params)) for (name, guide), w in zip(families, weights)]


def guidance_params(name: str, guidance: str) -> dict | None:
    """The parameters (``k``, ``d``, ``m``, ``s``) a criterion family's score guidance names, read back from its
    text; None when the text is not the family's template."""
    guide = dict(FAMILY_SETS["six"]).get(name)
    if guide is None:
        return None
    pattern = re.escape(guide)
    for key in "kdms":
        pattern = pattern.replace(re.escape("{" + key + "}"), f"(?P<{key}>-?\\d+)")
    m = re.fullmatch(pattern, guidance.strip())
    return {k: int(v) for k, v in m.groupdict().items()} if m else None


def _problem_of(t: Trajectory) -> Problem:
    """The problem ``t`` routes, read off its synthetic question (start value and operations; the answer is never
    read: the final step is checked as its text); ValueError naming the problem when the question is not synthetic (a
    GSM8K row's operations cannot be read off its text)."""
    try:
        start, ops = parse_question(t.question)
    except ValueError as e:
        raise ValueError(f"problem {t.problem_id}: a reader of the problem (roro.rubricor_judge.judge_reads: "
                         f"problem) needs a synthetic question: {e}") from None
    return Problem(id=t.problem_id, question=t.question, answer="", start=start, ops=ops)


def _step_checks(t: Trajectory, reads_problem: bool = False):
    """Per step, up to the final ``#### N``: ``(step, looks right, is the final)``. From the text alone, a step looks
    right when its ``a op b = c`` is right and starts from the previous result; the final when it restates it. After
    a step that is not of that form the next one has no previous result to start from. A reader of the problem
    (``reads_problem``) checks each step as the environment does (``env.task.check_step``: the first step starts
    from the problem's start value, step k applies the problem's k-th operation to its operand, so a misread operand
    is wrong, and no operation is left out or added), and the final step as its text."""
    problem = _problem_of(t) if reads_problem else None
    prev = problem.start if problem else None
    for k, s in enumerate(t.steps):
        text = s.text.strip()
        if text.startswith("####"):
            done = problem is None or k == len(problem.ops)
            yield s, prev is not None and done and text == f"#### {prev}", True
            return
        step = parse_step(text)
        if step is None:
            yield s, False, False
            prev = None
            continue
        a, op, b, c = step
        if problem is None:
            ok = (prev is None or a == prev) and c == OPS[op](a, b)
        else:
            ok = prev is not None and check_step(problem, k, text, prev).correct
        yield s, ok, False
        prev = c


def steps_look_right(t: Trajectory, reads_problem: bool = False) -> bool:
    """What a reader can verify: each ``a op b = c`` is right, each step starts from the previous result and the
    final ``#### N`` restates it (the problem's reference answer is not used); with ``reads_problem``, also each
    step's operation and operand against the problem (``_step_checks``)."""
    checks = list(_step_checks(t, reads_problem))
    return bool(checks) and checks[-1][2] and all(ok for _, ok, _ in checks)


def visible_slm_errors(t: Trajectory, reads_problem: bool = False) -> int:
    """SLM steps a reader finds wrong (``_step_checks``): wrong arithmetic, not starting from the previous result,
    or a final answer that does not restate it; an SLM step that misreads an operand is right arithmetic, found only
    by a reader of the problem (``reads_problem``)."""
    return sum(s.writer == "SLM" and not ok for s, ok, _ in _step_checks(t, reads_problem))


def sure_calls(t: Trajectory, s: int) -> int:
    """LRM steps where the SLM's uncertainty digit was at most ``s`` (the visible trace of a wasted call)."""
    return sum(x.writer == "LRM" and u_digit(x.slm_uncertainty) <= s for x in t.steps)


def literal_satisfied(name: str, params: dict, t: Trajectory, reads_problem: bool = False) -> bool:
    """The literal reading of a criterion family on the visible trajectory (and the problem, for the two "right"
    families, when the reader reads it)."""
    if name == "risky step to LRM":
        k = params["k"]
        return 1 <= k <= len(t.steps) and t.steps[k - 1].writer == "LRM"
    if name == "uncertain steps to LRM":
        return all(not (s.writer == "SLM" and u_digit(s.slm_uncertainty) > params["d"]) for s in t.steps)
    if name == "few LRM steps":
        return t.lrm_calls <= params["m"]
    if name == "steps are right":
        return steps_look_right(t, reads_problem)
    if name == "no call on a sure step":
        return sure_calls(t, params["s"]) == 0
    if name == "SLM steps are right":
        return visible_slm_errors(t, reads_problem) == 0
    raise ValueError(f"unknown criterion family {name!r}")


def family_satisfied(c: Rubric, t: Trajectory, reads_problem: bool = False) -> bool | None:
    """The literal reading of criterion ``c`` on ``t`` with the parameters its guidance names; None when ``c`` is not
    a family template."""
    params = guidance_params(c.id, c.guidance)
    if params is None:
        return None
    return literal_satisfied(c.id, {"k": 0, "d": 0, "m": 0, "s": 0, **params}, t, reads_problem)


def noisy_judgments(rng: random.Random, rubric: list[Rubric], t: Trajectory, label_noise: float,
                    reads_problem: bool = False) -> dict[str, Verdict]:
    """Warm-start Judge targets: the literal reading (of a reader of the problem when ``reads_problem``) flipped with
    probability ``label_noise``; random score."""
    out = {}
    for c in rubric:
        sat = family_satisfied(c, t, reads_problem)
        if rng.random() < label_noise:
            sat = not sat
        out[c.id] = Verdict(True, sat, score=rng.choice([0.5, 1.0]))
    return out


def random_judgments(rng: random.Random, rubric: list[Rubric]) -> dict[str, Verdict]:
    """Random ``satisfied`` and ``score`` per criterion (uninformative by construction)."""
    out = {}
    for c in rubric:
        score = rng.choice([0.5, 1.0])
        out[c.id] = Verdict(True, rng.random() < 0.5, score=score)
    return out
