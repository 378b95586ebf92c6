"""Judge layer: protocol, tolerant JSON loader and judgment parser, backends (programmatic with its rubric checks,
openai over its HTTP transport, local), SQLite cache, failure budget.

Backends are imported lazily where they pull heavy dependencies (openai client, transformers); the names below
are the public API.
"""

from rubricflow.judge.budget import BudgetedJudge, check_failure_budget
from rubricflow.judge.cache import CachedJudge, JudgeCache, cache_key
from rubricflow.judge.checks import CHECKS, CHECKS_VERSION
from rubricflow.judge.config import JudgeConfig, LocalJudgeConfig, OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeConfigError, JudgeError, JudgeFailureBudgetExceeded, JudgeUnavailable
from rubricflow.judge.factory import api_key_resolver, make_backend, make_judge
from rubricflow.judge.parse import parse_judgment
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.judge.prompt import PROMPT_VERSION
from rubricflow.judge.protocol import (
    CATEGORIES,
    JudgeBackend,
    JudgeRequest,
    Judgment,
    Rubric,
    Verdict,
    status_counts,
)


def __getattr__(name: str):
    if name == "OpenAIJudge":
        from rubricflow.judge.openai_backend import OpenAIJudge

        return OpenAIJudge
    if name == "LocalJudge":
        from rubricflow.judge.local_backend import LocalJudge

        return LocalJudge
    raise AttributeError(f"module 'rubricflow.judge' has no attribute {name!r}")


__all__ = [
    "CATEGORIES",
    "CHECKS",
    "CHECKS_VERSION",
    "PROMPT_VERSION",
    "BudgetedJudge",
    "CachedJudge",
    "JudgeBackend",
    "JudgeCache",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgeError",
    "JudgeFailureBudgetExceeded",
    "JudgeRequest",
    "JudgeUnavailable",
    "Judgment",
    "LocalJudge",
    "LocalJudgeConfig",
    "OpenAIJudge",
    "OpenAIJudgeConfig",
    "ProgrammaticJudge",
    "Rubric",
    "Verdict",
    "api_key_resolver",
    "cache_key",
    "check_failure_budget",
    "make_backend",
    "make_judge",
    "parse_judgment",
    "status_counts",
]
