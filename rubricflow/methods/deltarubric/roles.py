"""Roles as data: a role is a prompt template, an output parser and a reward rule, all sharing one policy.

``ROLES`` holds DeltaRubric's two roles (``planner``, ``verifier``) and the four single-step judge modes
(``no_rubric``, ``static``, ``reading``: the verifier's worked reading of the image, then the verdict, with no
checklist; ``generative``: its own reading and comparison lines over keys it chooses, then the verdict). A DeltaRubric
run trains the planner and the verifier and samples no-rubric verdicts as the reward's baseline (see rewards); a
baseline run (``train.judge: no_rubric | static | reading | generative``) trains that judge mode alone, so the
baselines are as trained as DeltaRubric. Nothing here knows about models: rollout and
evaluation turn ``Role.prompt`` into chat prompts and feed the completions to ``Role.parse``.

The verifier's output is valid only when it executes the checklist: one evidence line (``... -> A|B|both|neither``)
per check, then the verdict. A bare verdict skips the work the role exists for, so it is a format failure (no
reward, and a wrong verdict in evaluation). Likewise the generative judge's output is valid only with at least one
comparison line (``... -> A|B|both|neither``) before its verdict: it chooses its keys, so their number is its own.

``GENERATIVE_TOOL`` is the generative judge under the lookup tool (``sft.evidence_form: quoted``; ``role_of``): a
two-turn role. Its first turn is the tool call (``lookup.parse_lookup``: 2-4 keys, the planner's budget);
``Role.turn`` writes the call and the tool's quotes after the generation prompt, and the second turn (marks, favours,
verdict) is valid only with one comparison line per key looked up (``parse_tool_answer``), as the verifier's is with
one evidence line per check. Both turns share the verdict's reward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rubricflow.data.pairs import PreferencePair
from rubricflow.judge.protocol import Parsed
from rubricflow.methods.deltarubric.lookup import lookup_call, lookup_quotes, parse_lookup, tool_result
from rubricflow.methods.deltarubric.parsing import parse_checklist, parse_verdict
from rubricflow.methods.deltarubric.prompts import (
    generative_prompt,
    generative_tool_prompt,
    no_rubric_prompt,
    planner_prompt,
    reading_prompt,
    static_prompt,
    tool_turn,
    verifier_prompt,
)
from rubricflow.methods.deltarubric.rewards import judge_reward, planner_reward, verifier_reward


@dataclass(frozen=True)
class Role:
    name: str
    template: Callable[..., str]  # (question, a, b[, checks]) -> user text
    # (text[, checks]) -> the kernel's Parsed: the checks (planner, list[str]) or "A" | "B" (judges); failed with the
    # reason when the output breaks the role's contract
    parse: Callable[..., Parsed]
    reward: Callable[..., float]
    needs_checklist: bool = False
    # a tool-using role: (pair, keys, reading) -> the text after the generation prompt (its call and the tool's
    # answer), where its second turn starts; the first turn's output is parsed by ``call``
    turn: Callable[..., str] | None = None
    call: Callable[[str], Parsed] | None = None

    def prompt(self, pair: PreferencePair, checks: list[str] | None = None, reading: str | None = None) -> str:
        """The role's user text; a checklist role given the policy's ``reading`` of the image shows each check with
        the lookup tool's quote (``lookup.lookup_quotes``); the other roles do not use a reading."""
        if self.needs_checklist:
            if not checks:
                raise ValueError(f"role {self.name}: a checklist is required")
            quotes = None if reading is None else lookup_quotes(checks, reading, pair.response_a, pair.response_b)
            return self.template(pair.question, pair.response_a, pair.response_b, checks, quotes)
        return self.template(pair.question, pair.response_a, pair.response_b)


def generative_turn(pair: PreferencePair, keys: list[str], reading: str | None) -> str:
    """The generative judge's tool call on ``keys`` and the tool's quotes of ``reading`` and both responses."""
    if reading is None:
        raise ValueError("generative judge with the lookup tool: the policy's reading of the image is needed")
    return tool_turn(lookup_call(keys), tool_result(keys, reading, pair.response_a, pair.response_b))


def parse_plan(text: str) -> Parsed:
    try:
        return Parsed("ok", parse_checklist(text), raw=text)
    except ValueError as e:
        return Parsed("failed", reason=str(e), raw=text)


def parse_judgement(text: str, checks: list[str] | None = None) -> Parsed:
    v = parse_verdict(text)
    return Parsed("ok" if v.ok else "failed", v.verdict, v.reason, text)


def _one_line_each(text: str, items: list[str] | None, who: str, line: str, item: str, done: str = "") -> Parsed:
    """A verdict valid only with one ``line`` (evidence / comparison) line per ``item`` of ``items`` (the checks it
    executed, the keys it looked up: ``done``): the verifier and the generative judge's second turn share this
    contract."""
    v = parse_verdict(text)
    if not v.ok:
        return Parsed("failed", reason=v.reason, raw=text)
    if items is None:
        raise ValueError(f"{who}: the {item}s {done or 'it was given'} are needed to check its {line} lines")
    if len(v.checks) != len(items):
        return Parsed("failed", reason=f"{len(v.checks)} {line} line(s) for {len(items)} {item}(s)"
                      f"{' ' + done if done else ''}; expected one per {item}", raw=text)
    return Parsed("ok", v.verdict, raw=text)


def parse_execution(text: str, checks: list[str] | None = None) -> Parsed:
    """The verifier's verdict, valid only with one evidence line per check of ``checks``."""
    return _one_line_each(text, checks, "verifier output", "evidence", "check")


def parse_generation(text: str, checks: list[str] | None = None) -> Parsed:
    """The generative judge's verdict, valid only after at least one comparison line."""
    v = parse_verdict(text)
    if not v.ok:
        return Parsed("failed", reason=v.reason, raw=text)
    if not v.checks:
        return Parsed("failed", reason="no comparison line ('<i>. A <key> = ... -> A|B|both|neither') before the "
                      "verdict", raw=text)
    return Parsed("ok", v.verdict, raw=text)


def parse_tool_answer(text: str, keys: list[str] | None = None) -> Parsed:
    """The generative judge's verdict after the lookup tool's answer, valid only with one comparison line per key of
    its call (``keys``)."""
    return _one_line_each(text, keys, "generative judge's second turn", "comparison", "key", "looked up")


PLANNER = Role("planner", planner_prompt, parse_plan, planner_reward)
VERIFIER = Role("verifier", verifier_prompt, parse_execution, verifier_reward, needs_checklist=True)
NO_RUBRIC = Role("no_rubric", no_rubric_prompt, parse_judgement, judge_reward)
STATIC = Role("static", static_prompt, parse_judgement, judge_reward)
# the reading judge's verdict is read as the no-rubric one's: its reading is taught, not required by the parser
READING = Role("reading", reading_prompt, parse_judgement, judge_reward)
GENERATIVE = Role("generative", generative_prompt, parse_generation, judge_reward)
GENERATIVE_TOOL = Role("generative_tool", generative_tool_prompt, parse_tool_answer, judge_reward,
                       turn=generative_turn, call=parse_lookup)

ROLES: dict[str, Role] = {r.name: r for r in (PLANNER, VERIFIER, NO_RUBRIC, STATIC, READING, GENERATIVE,
                                              GENERATIVE_TOOL)}


def role_of(mode: str, quoted: bool = False) -> Role:
    """The role a single-step judge mode runs in: the generative judge has the lookup tool where the verifier has it
    (``quoted``), so the two differ in the planner role only."""
    return GENERATIVE_TOOL if mode == "generative" and quoted else ROLES[mode]
