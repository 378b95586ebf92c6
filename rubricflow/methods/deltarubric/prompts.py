"""Prompt templates of DeltaRubric's roles and of the paper's two baselines (after the paper's appendix A.6).

Eight templates, kept short for the tiny CPU model but with the paper's structure:

* ``NO_RUBRIC``  judge the two responses directly, end with the verdict (the "lazy" single-step baseline);
* ``STATIC``     judge them on five fixed criteria (relevance, factual consistency, key visual information,
                 reasoning, clarity/completeness), ignoring irrelevant / vague / contradicted criteria;
* ``READING``    the reading judge, the no-rubric control of the same reading: read the image (the verifier's
                 worked trace), then the verdict, with no checklist;
* ``GENERATIVE`` the generative no-rubric judge (the paper's no-rubric baseline, issue 39 item 3b): read the values
                 where the responses differ, compare each response's claims with them, then the verdict; no checklist
                 and no planner role;
* ``GENERATIVE_TOOL`` the generative judge with the verifier's lookup tool (``sft.evidence_form: quoted``): name 2-4
                 keys to look up (``look up: C, F``), then, after the tool's quotes (appended to its own output,
                 ``tool_turn``), mark each claim yes / no, the favoured response per key, then the verdict;
* ``PLANNER``    the Disagreement Planner: 2-4 neutral, evidence-seeking checks on where the responses
                 disagree, one concrete fact / relation / constraint each, never naming a response or a winner,
                 no preamble;
* ``READ``       a warm-up task of the shared policy, not a judge mode: read the image as a worked trace of the
                 question (the verifier's first line, without the responses and the checks);
* ``VERIFIER``   the Checklist Verifier: read the image (a worked trace of the question), then execute each check
                 (checks are things to verify, not evidence; ignore irrelevant / vague ones): the image's value,
                 each response's claim and whether it agrees, the response it favours; then the verdict.
* ``VERIFIER_QUOTED`` the verifier with the lookup tool (``lookup``, ``sft.evidence_form: quoted``): each check
                 carries the quoted values (the policy's own reading, each response's claim); per check it marks the
                 claims yes / no and the favoured response, then the verdict.

All outputs end with ``verdict: A`` or ``verdict: B`` (the verdict parser also accepts ``[[A]]`` and a few
spellings). The image placeholders are added by the processor's chat template (``chat_prompt``), not here.
"""

from __future__ import annotations

STATIC_CRITERIA = (
    ("relevance", "relevance"),
    ("consistency", "factual consistency"),
    ("visual", "key visual information"),
    ("reasoning", "reasoning"),
    ("clarity", "clarity and completeness"),
)

_CASE = "Question: {question}\nResponse A: {a}\nResponse B: {b}\n"

NO_RUBRIC = "Judge the two responses against the image.\n" + _CASE + "End with verdict: A or verdict: B."

STATIC = (
    "Judge the two responses on each criterion; skip irrelevant, vague or contradicted ones. Give the favoured "
    "response per criterion, then the verdict.\n" + _CASE + "Criteria:\n{criteria}"
)

READING = "Read the image, then judge the two responses against it.\n" + _CASE + "End with verdict: A or verdict: B."

GENERATIVE = (
    "Read the image where the two responses differ, compare each response's claims with it, then judge.\n" + _CASE
    + "End with verdict: A or verdict: B."
)

# The generative judge with the lookup tool: its tool call and the tool's answer continue its own output (tool_turn).
GENERATIVE_TOOL = (
    "Name 2-4 keys to look up where the two responses differ (look up: <keys>); the tool quotes each key's value "
    "in your reading of the image and in each response. Then per key mark each response's claim yes or no against "
    "the image's value, and give the favoured response; then judge.\n" + _CASE + "End with verdict: A or verdict: B."
)

PLANNER = (
    "List 2-4 neutral checks where the two responses disagree, one concrete fact, relation or constraint each. "
    "Name no response and no winner. No preamble.\n" + _CASE + "Checks:"
)

READ = "Read the image.\nQuestion: {question}"

VERIFIER = (
    "Read the image, then run each check; checks are not evidence, skip irrelevant or vague ones. Per check give "
    "the image's value, each response's claim, and the favoured response; then the verdict.\n" + _CASE
    + "Checks:\n{checklist}"
)

# The verifier with the lookup tool (sft.evidence_form: quoted): each check comes with the tool's quote of the image's
# value (the policy's own reading) and of each response's claim; no reading of its own in the output.
VERIFIER_QUOTED = (
    "Run each check on its quoted values; checks are not evidence, skip irrelevant or vague ones. Per check mark each "
    "response's claim yes or no against the image's value, and give the favoured response; then the verdict.\n"
    + _CASE + "Checks:\n{checklist}"
)


def numbered(items: list[str]) -> str:
    return "\n".join(f"{i}. {t}" for i, t in enumerate(items, 1))


def no_rubric_prompt(question: str, a: str, b: str) -> str:
    return NO_RUBRIC.format(question=question, a=a, b=b)


def static_prompt(question: str, a: str, b: str) -> str:
    return STATIC.format(question=question, a=a, b=b, criteria=numbered([c for _, c in STATIC_CRITERIA]))


def reading_prompt(question: str, a: str, b: str) -> str:
    return READING.format(question=question, a=a, b=b)


def generative_prompt(question: str, a: str, b: str) -> str:
    return GENERATIVE.format(question=question, a=a, b=b)


def generative_tool_prompt(question: str, a: str, b: str) -> str:
    return GENERATIVE_TOOL.format(question=question, a=a, b=b)


def tool_turn(call: str, result: str) -> str:
    """What follows the generation prompt once the judge has called the tool: its call line, the tool's answer, and
    a new line where the judge goes on (the SFT prompt of the second turn, and a rollout's second request)."""
    return f"{call}\n{result}\n"


def planner_prompt(question: str, a: str, b: str) -> str:
    return PLANNER.format(question=question, a=a, b=b)


def read_prompt(question: str) -> str:
    return READ.format(question=question)


def verifier_prompt(question: str, a: str, b: str, checks: list[str], quotes: list[str] | None = None) -> str:
    """The verifier's prompt; with ``quotes`` (the lookup tool's, one per check) each check line ends with its
    quote."""
    if quotes is None:
        return VERIFIER.format(question=question, a=a, b=b, checklist=numbered(checks))
    if len(quotes) != len(checks):
        raise ValueError(f"verifier prompt: {len(quotes)} quote(s) for {len(checks)} check(s)")
    lines = [f"{c} {q}" for c, q in zip(checks, quotes)]
    return VERIFIER_QUOTED.format(question=question, a=a, b=b, checklist=numbered(lines))
