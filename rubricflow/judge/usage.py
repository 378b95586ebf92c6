"""Judge tokens: what a judge spent, in prompt and completion tokens, for per-step reporting.

A backend that counts keeps a ``usage: TokenUsage`` attribute with running totals:

* ``openai``: the ``usage`` object of every chat completion the server answered (retried attempts that got an
  answer included: the server spent those tokens too); a server that sends no ``usage`` adds nothing;
* ``programmatic``: no model runs, so nothing is spent; it keeps an *estimate* (``estimated = True``) of what an LLM
  judge would spend on the same requests: 4 characters per token of the prompt it would be sent
  (``rubricflow.judge.prompt``) and of the verdict JSON it would write.

Answers from the judge cache cost nothing and are not counted. :func:`usage_of` finds the counter behind the
wrappers (``BudgetedJudge``, ``CachedJudge``); a caller reports the difference of two readings per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CHARS_PER_TOKEN = 4  # the estimate's rate (a common rule of thumb for English text and JSON)


@dataclass
class TokenUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0  # answered calls counted
    estimated: bool = False  # True: an estimate of what an LLM judge would spend, not tokens spent

    def add(self, prompt: int, completion: int) -> None:
        self.prompt_tokens += int(prompt)
        self.completion_tokens += int(completion)
        self.calls += 1

    def add_response(self, resp: object) -> None:
        """Count the ``usage`` of one chat-completion body (a dict); a body without one adds nothing."""
        u = resp.get("usage") if isinstance(resp, dict) else None
        if not isinstance(u, dict):
            return
        p, c = u.get("prompt_tokens"), u.get("completion_tokens")
        if isinstance(p, int) and isinstance(c, int) and not isinstance(p, bool) and not isinstance(c, bool):
            self.add(max(p, 0), max(c, 0))

    def snapshot(self) -> tuple[int, int]:
        return self.prompt_tokens, self.completion_tokens


def usage_of(judge) -> TokenUsage | None:
    """The ``TokenUsage`` of ``judge`` or of the backend it wraps (``inner``, ``backend``); None: not counted."""
    seen = 0
    while judge is not None and seen < 8:
        u = vars(judge).get("usage") if hasattr(judge, "__dict__") else None
        if isinstance(u, TokenUsage):
            return u
        nxt = None
        for attr in ("inner", "backend"):
            if attr in getattr(judge, "__dict__", {}):
                nxt = vars(judge)[attr]
                break
        judge, seen = nxt, seen + 1
    return None


def estimate_tokens(text: str) -> int:
    return -(-len(text) // CHARS_PER_TOKEN)


def estimate_request(request, verdicts: dict | None = None) -> tuple[int, int]:
    """``(prompt, completion)`` tokens an LLM judge would spend on ``request`` (the system and user prompt; the
    verdict JSON of ``verdicts``, ``{rubric_id: Verdict}``), at :data:`CHARS_PER_TOKEN`."""
    from rubricflow.judge.prompt import SYSTEM_PROMPT, user_prompt

    prompt = estimate_tokens(SYSTEM_PROMPT) + estimate_tokens(user_prompt(request))
    answer = {"verdicts": {rid: {"rationale": v.rationale, "applicable": v.applicable, "satisfied": v.satisfied}
                           for rid, v in (verdicts or {}).items()}}
    return prompt, estimate_tokens(json.dumps(answer))
