"""``judge:`` section of params.yaml (pydantic only; composed into rubricflow.config.Config).

The API key itself never appears here: only the *name* of an environment variable or of a Prefect Secret block
that holds it. It is resolved by the openai backend at the preflight call, or else at the first call (see
factory.make_judge).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rubricflow.sections import MAX_BATCH, MAX_TOKENS, Section


class OpenAIJudgeConfig(Section):
    operational = frozenset({"base_url", "api_key_env", "secret_block", "concurrency", "timeout_s",
                             "request_deadline_s", "max_retries", "backoff_initial_s", "backoff_max_s",
                             "backoff_jitter_s", "retry_after_max_s", "http_client", "max_response_bytes"})

    base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        description="OpenAI-compatible endpoint ending in /v1 (`vllm serve`, a hosted API).",
    )
    model: str = Field("judge", description="Model name sent in requests (vLLM: --served-model-name).")
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding the API key (the key is never stored in params). "
        "None and no secret_block: no key (a local vLLM server without --api-key).",
    )
    secret_block: str | None = Field(
        None,
        description="Name of a Prefect Secret block holding the API key; resolved by the tasks layer "
        "(rubricflow never imports prefect). Used when api_key_env is unset or not exported.",
    )
    concurrency: int = Field(16, ge=1, le=1024, description="Requests in flight at once (semaphore).")
    timeout_s: float = Field(60.0, gt=0, description="Deadline per attempt (whole request, slow streams included).")
    request_deadline_s: float = Field(
        180.0,
        gt=0,
        description="Deadline per judge request including its retries and backoff waits (time queued for a "
        "concurrency slot not counted): a hanging server fails each request within this bound. A retry whose "
        "wait (backoff or Retry-After) would pass it is not made; the request fails at once with the reason.",
    )
    max_retries: int = Field(
        4,
        ge=0,
        le=20,
        description="Retries after the first attempt (timeouts, connection errors, 408/409/429, 5xx, bad bodies); "
        "400/401/403/404/422 and other 4xx are never retried.",
    )
    backoff_initial_s: float = Field(0.5, ge=0, description="First exponential backoff delay (doubles per retry).")
    backoff_max_s: float = Field(20.0, ge=0, description="Cap on one exponential backoff delay.")
    backoff_jitter_s: float = Field(0.5, ge=0, description="Uniform random jitter added to each backoff delay.")
    retry_after_max_s: float = Field(
        120.0, ge=0, description="Longest Retry-After (429/503) honoured; a longer one ends the retries (failed)."
    )
    max_response_bytes: int = Field(
        4 * 1024**2,
        ge=1024,
        description="Largest answer body read from the server, in bytes (a judgment or a teacher's completion is a "
        "few KB): a body announced or streamed beyond it is not read further and the request fails at once with "
        "the reason, not retried.",
    )
    temperature: float = Field(0.0, ge=0, description="Judge sampling temperature (0 = greedy, reproducible).")
    max_tokens: int = Field(
        512, ge=16, le=MAX_TOKENS,
        description="Completion token cap per judge call (compact verdicts of many rubrics fit well inside the "
        "default).",
    )
    send_images: bool = Field(
        True, description="Send the sample images as base64 data URLs (False for text-only judges)."
    )
    http_client: Literal["aiohttp", "httpx"] = Field(
        "aiohttp",
        description="HTTP layer under AsyncOpenAI: openai's aiohttp client (less CPU per request) or its httpx "
        "default.",
    )
    json_schema: bool = Field(True, description="Ask for schema-constrained output (response_format=json_schema).")
    verdict_format: Literal["compact", "object"] = Field(
        "compact",
        description="What the judge writes per rubric. compact (default): \"pass\" | \"fail\" | \"n/a\", a few tokens, "
        "what a small judge (SmolLM2-135M) answers reliably (docs/smol.md); object: {rationale, applicable, "
        "satisfied} with a one-sentence rationale (capped by rationale_max_chars). Part of the cache key.",
    )
    rationale_max_chars: int | None = Field(
        64,
        ge=1,
        description="object format: maxLength of the rationale in the schema (vLLM honours it; a small model "
        "without a cap never closes the string and every call ends at max_tokens). None for hosted APIs whose "
        "strict mode rejects maxLength.",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra JSON fields merged into every request body (server-specific options)."
    )


class LocalJudgeConfig(Section):
    model_path: str = Field(
        "artifacts/models/judge", description="Local model directory (or cached HF id) loaded with models.loader."
    )
    max_new_tokens: int = Field(512, ge=8, le=MAX_TOKENS, description="Completion token cap per judge call.")
    batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="Prompts per generate() call.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype.")
    device: str = Field("cpu", description="torch device for the judge model.")


class JudgeConfig(Section):
    operational = frozenset({"cache_enabled", "cache_programmatic", "cache_path", "preflight", "max_failed_frac",
                             "failure_window", "stage_deadline_s"})

    backend: Literal["programmatic", "openai", "local"] = Field(
        "programmatic",
        description="programmatic: exact checks against synthetic facts (CPU default); openai: any "
        "OpenAI-compatible server; local: an in-process transformers model.",
    )
    applicability: Literal["problem", "response"] = Field(
        "problem",
        description="When a rubric counts for a response. problem (default): it applies if the question calls for "
        "it (decided from the question and its facts: the rubric applies to the problem's reference reasoning), "
        "and a response that omits the reasoning it checks fails it, so skipping the reasoning never pays. "
        "response: the earlier reading, where a rubric whose quantity the response never mentions is "
        "'not applicable' (a bare answer then falls back to the outcome reward; kept for the ablation). "
        "Implemented by the programmatic backend; the LLM judges' prompt (judge-v3) still asks whether a rubric "
        "applies to the question and response.",
    )
    prompt_version: Literal["judge-v3"] = Field(
        "judge-v3", description="LLM judge prompt template version (part of the cache key; judge-v3 delimits the "
        "response with a per-call boundary, so no verdict cached under judge-v2's tolerant parsing is reused)."
    )
    cache_enabled: bool = Field(
        True, description="Cache verdicts in SQLite (a rerun makes no calls for cached verdicts)."
    )
    cache_programmatic: bool = Field(
        False, description="Also cache programmatic verdicts (they are cheap to recompute; off by default)."
    )
    cache_path: str = Field(".rubricflow/judge_cache.sqlite", description="SQLite file of the judge cache.")
    preflight: bool = Field(
        True,
        description="One cheap call when the judge is built (stage start, before models are loaded or sampled): "
        "resolves the API key and fails the stage naming backend, URL, model and the server's answer (closed port, "
        "401/403, 404 unknown model, 5xx). openai: a 1-token chat completion; programmatic and local: no call.",
    )
    max_failed_frac: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Failure budget: when more than this fraction of judgments fail (over one call, or the last "
        "failure_window judgments in training), the stage stops with JudgeFailureBudgetExceeded (counts and top "
        "reasons) instead of writing tiers or training on missing rewards. Below it a failed judgment stays "
        "missing. 1 disables the budget. Not applied to the programmatic judge.",
    )
    failure_window: int = Field(
        64,
        ge=1,
        description="Judgments in the rolling window the failure budget is checked on (a call larger than the "
        "window counts whole); checked once min(failure_window, 8) judgments were seen.",
    )
    stage_deadline_s: float | None = Field(
        None,
        gt=0,
        description="openai backend: the longest a stage may spend in judge calls in all (the time queued for a "
        "concurrency slot included); past it the calls in flight are cancelled and the stage stops with "
        "JudgeDeadlineExceeded, naming the URL. None: no stage-level bound (request_deadline_s still bounds each "
        "request, and the failure budget acts while a batch runs).",
    )
    openai: OpenAIJudgeConfig = Field(default_factory=OpenAIJudgeConfig, description="backend=openai settings.")
    local: LocalJudgeConfig = Field(default_factory=LocalJudgeConfig, description="backend=local settings.")
