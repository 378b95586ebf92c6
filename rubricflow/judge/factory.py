"""``make_judge(cfg)``: the configured backend, wrapped in the SQLite cache when enabled.

API key resolution (openai backend), at the preflight call (``judge.preflight``, on by default) or else at the
first call, never stored in params:

1. ``judge.openai.api_key_env`` names an environment variable that is set -> its value;
2. else ``judge.openai.secret_block`` names a Prefect Secret block -> ``secret_resolver(block_name)``, a callable
   the tasks layer injects (rubricflow never imports prefect);
3. neither configured -> no key (a local vLLM server without ``--api-key``);
4. configured but not resolvable -> ``JudgeConfigError`` naming the variable / block (not the value).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from rubricflow.judge.budget import BudgetedJudge
from rubricflow.judge.cache import CachedJudge, JudgeCache
from rubricflow.judge.config import JudgeConfig, OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeConfigError
from rubricflow.judge.protocol import JudgeBackend

__all__ = ["JudgeConfigError", "api_key_resolver", "make_backend", "make_judge"]


def api_key_resolver(
    cfg: OpenAIJudgeConfig, secret_resolver: Callable[[str], str] | None = None
) -> Callable[[], str | None]:
    """A callable returning the API key (see the module docstring), evaluated when first called."""

    def resolve() -> str | None:
        if cfg.api_key_env and os.environ.get(cfg.api_key_env):
            return os.environ[cfg.api_key_env]
        if cfg.secret_block:
            if secret_resolver is None:
                raise JudgeConfigError(
                    f"judge.openai.secret_block={cfg.secret_block!r} is set but no secret resolver was given "
                    "(the tasks layer passes one that loads the Prefect Secret block)"
                    + (f"; environment variable {cfg.api_key_env} is not set either" if cfg.api_key_env else "")
                )
            try:
                value = secret_resolver(cfg.secret_block)
            except Exception as e:  # report the block name and error type only: the message could echo a value
                raise JudgeConfigError(
                    f"judge.openai.secret_block: could not load secret block {cfg.secret_block!r} ({type(e).__name__})"
                ) from None
            if not value:
                raise JudgeConfigError(f"judge.openai.secret_block: secret block {cfg.secret_block!r} is empty")
            return str(value)
        if cfg.api_key_env:
            raise JudgeConfigError(
                f"judge.openai.api_key_env: environment variable {cfg.api_key_env} is not set "
                "(export it, or configure judge.openai.secret_block)"
            )
        return None

    return resolve


def make_backend(
    cfg: JudgeConfig,
    secret_resolver: Callable[[str], str] | None = None,
    image_root: str | Path | None = None,
) -> JudgeBackend:
    """The bare backend named by ``cfg.backend`` (no cache)."""
    if cfg.backend == "programmatic":
        from rubricflow.judge.programmatic import ProgrammaticJudge

        return ProgrammaticJudge(applicability=cfg.applicability)
    if cfg.backend == "openai":
        from rubricflow.judge.openai_backend import OpenAIJudge

        return OpenAIJudge(
            cfg.openai,
            api_key=api_key_resolver(cfg.openai, secret_resolver),
            image_root=image_root,
            prompt_version=cfg.prompt_version,
            bounds=cfg,
        )
    if cfg.backend == "local":
        from rubricflow.judge.local_backend import LocalJudge

        return LocalJudge(cfg.local, image_root=image_root, prompt_version=cfg.prompt_version)
    raise JudgeConfigError(f"judge.backend: unknown backend {cfg.backend!r}; expected programmatic, openai or local")


def make_judge(
    cfg: JudgeConfig,
    secret_resolver: Callable[[str], str] | None = None,
    image_root: str | Path | None = None,
    cache: JudgeCache | None = None,
    preflight: bool | None = None,
) -> JudgeBackend:
    """The configured judge; cached unless ``cache_enabled`` is off (or backend=programmatic without
    ``cache_programmatic``). A relative ``cache_path`` is relative to the current directory (the project root
    under the CLI and DVC).

    ``preflight`` (default ``cfg.preflight``): call ``backend.preflight()`` now, so a dead server, a rejected key
    or an unknown model stops the stage before it loads models or samples (``JudgeConfigError`` /
    ``JudgeUnavailable``). LLM backends (openai, local) are wrapped in the failure budget
    (``judge.max_failed_frac``, ``BudgetedJudge``)."""
    backend = make_backend(cfg, secret_resolver, image_root)
    if cfg.preflight if preflight is None else preflight:
        backend.preflight()
    use_cache = cfg.cache_enabled and (cfg.backend != "programmatic" or cfg.cache_programmatic)
    judge: JudgeBackend = CachedJudge(backend, cache or JudgeCache(cfg.cache_path)) if use_cache else backend
    if cfg.backend == "programmatic":  # exact checks: a judgment fails only for a sample without facts
        return judge
    return BudgetedJudge(judge, cfg.max_failed_frac, cfg.failure_window)
