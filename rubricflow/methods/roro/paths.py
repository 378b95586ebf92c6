"""Where the RoRo stages write, under ``roro.data_dir`` (data) and ``roro.out_dir`` (models, rubrics, routers,
evaluation). The stages, the study and the CLI read every output path from here; the step models and the Judge /
Rubricor are saved to the paths their sections name (``roro.slm.path``, ``roro.rubricor_judge.judge.path``, ...)."""

from __future__ import annotations

from pathlib import Path

from rubricflow.methods.roro.config import RoRoConfig


def _reading(rc: RoRoConfig) -> str:
    """The routes' outcomes and so their pairs depend on what the question asks (``roro.task.answer``); the step
    cache does not (the same prompts, the same steps)."""
    return "" if rc.task.answer == "value" else f"-{rc.task.answer}"


def trajectories_path(rc: RoRoConfig) -> Path:
    """The distinct routes of the train / val problems (``roro_trajectories``); ``trajectories-parity.parquet``
    under ``roro.task.answer: parity``."""
    return Path(rc.data_dir) / f"trajectories{_reading(rc)}.parquet"


def cache_path(rc: RoRoConfig) -> Path:
    """The step cache (greedy steps per model fingerprint and prefix), saved by ``roro_trajectories``."""
    return Path(rc.data_dir) / "step_cache.jsonl"


def pairs_path(rc: RoRoConfig) -> Path:
    """The preference pairs with their split (``roro_pairs``); ``pairs-parity.parquet`` under parity."""
    return Path(rc.data_dir) / f"pairs{_reading(rc)}.parquet"


def rubrics_path(rc: RoRoConfig) -> Path:
    """The kept Rubricor's rubric per train / val problem (``roro_rubricor_judge``)."""
    return Path(rc.out_dir) / "rubrics.jsonl"


def rounds_path(rc: RoRoConfig) -> Path:
    """Val pairwise accuracy after each alternation phase (a DVC plot: x=phase_index)."""
    return Path(rc.out_dir) / "rubricor_judge_rounds.json"


def router_dir(rc: RoRoConfig) -> Path:
    """The trained routers (``<tag>.pt``), their training histories and ``summary.json`` (``roro_router``)."""
    return Path(rc.out_dir) / "router"


def eval_dir(rc: RoRoConfig) -> Path:
    """The curve (PNG, CSV, JSON) and the table (text, JSON) of ``roro_eval``."""
    return Path(rc.out_dir) / "eval"
