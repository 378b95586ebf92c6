"""Roles as data: a role is a prompt template, an output parser and a reward rule, all sharing one policy.

``ROLES`` holds the two trained roles (``planner``, ``verifier``) and the two baseline judge modes
(``no_rubric``, ``static``), which are also sampled during training (``no_rubric`` estimates acc0, see rewards).
Nothing here knows about models: rollout and evaluation turn ``Role.prompt`` into chat prompts and feed the
completions to ``Role.parse``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rubricflow.deltarubric.data import PreferencePair
from rubricflow.deltarubric.parsing import parse_checklist, parse_verdict
from rubricflow.deltarubric.prompts import no_rubric_prompt, planner_prompt, static_prompt, verifier_prompt
from rubricflow.deltarubric.rewards import planner_reward, verifier_reward


@dataclass(frozen=True)
class Parsed:
    ok: bool
    value: Any  # list[str] of checks (planner) or "A" | "B" (judges); None when not ok
    reason: str | None = None


@dataclass(frozen=True)
class Role:
    name: str
    template: Callable[..., str]  # (question, a, b[, checks]) -> user text
    parse: Callable[[str], Parsed]
    reward: Callable[..., float] | None  # None: the role is sampled but not trained
    needs_checklist: bool = False

    def prompt(self, pair: PreferencePair, checks: list[str] | None = None) -> str:
        if self.needs_checklist:
            if not checks:
                raise ValueError(f"role {self.name}: a checklist is required")
            return self.template(pair.question, pair.response_a, pair.response_b, checks)
        return self.template(pair.question, pair.response_a, pair.response_b)


def parse_plan(text: str) -> Parsed:
    try:
        return Parsed(True, parse_checklist(text))
    except ValueError as e:
        return Parsed(False, None, str(e))


def parse_judgement(text: str) -> Parsed:
    v = parse_verdict(text)
    return Parsed(v.ok, v.verdict, v.reason)


PLANNER = Role("planner", planner_prompt, parse_plan, planner_reward)
VERIFIER = Role("verifier", verifier_prompt, parse_judgement, verifier_reward, needs_checklist=True)
NO_RUBRIC = Role("no_rubric", no_rubric_prompt, parse_judgement, None)
STATIC = Role("static", static_prompt, parse_judgement, None)

ROLES: dict[str, Role] = {r.name: r for r in (PLANNER, VERIFIER, NO_RUBRIC, STATIC)}
