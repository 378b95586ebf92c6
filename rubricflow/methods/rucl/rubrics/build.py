"""RuCL Phase I: write the candidate pool; calibrate, filter and stratify it.

Plain functions over their sections (no tracking, no Prefect); the stages in ``rubricflow.methods.rucl.rubrics.stages``
call them and log what they return (``{"metrics": {...}, "paths": {...}}``).

* ``write_pool``: the default pool shipped in the repo (provenance "default pool v1") or, with
  ``rubrics.teacher`` set, K candidates from a teacher backend in O(1) calls -> ``rubrics.pool_path``.
* ``stratify_pool``: sample ``samples_per_prompt`` responses per calibration prompt from the policy
  (``models.loader.load_policy`` + ``TransformersGenerator``; prompts via ``processor.chat_prompt``), judge every
  candidate on every response, compute coverage and pass rates, select and stratify
  (rubricflow.methods.rucl.rubrics.stratify), write the table (JSON list of rows + CSV), the summary (flat JSON) and the
  tiers file (``rubrics.tiers_path``, read by RuCL Phase II). More than ``judge.max_failed_frac`` failed
  judgments raise ``JudgeFailureBudgetExceeded`` before anything is written (earlier outputs stay intact).
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Callable
from pathlib import Path

from rubricflow.data.schema import read_dataset
from rubricflow.judge.budget import check_failure_budget
from rubricflow.judge.config import JudgeConfig
from rubricflow.judge.factory import make_backend, make_judge
from rubricflow.judge.programmatic import require_checks
from rubricflow.judge.protocol import JudgeBackend, JudgeRequest, Judgment, Rubric
from rubricflow.methods.rucl.rubrics.config import RubricsConfig
from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, load_pool, save_pool
from rubricflow.methods.rucl.rubrics.teacher import generate_pool
from rubricflow.util.io import atomic_write_text, write_json
from rubricflow.methods.rucl.rubrics.stratify import (TABLE_COLUMNS, coverage_and_pass_rates, pass_order,
                                                      select_and_stratify, summarize)

log = logging.getLogger("rubricflow.methods.rucl.rubrics")

Responder = Callable[[list], list[list[str]]]  # samples -> responses per sample


# ------------------------------------------------------------------------------------------------------------
# pool


# the ranking each `rank_by` applies (stratify.py), recorded in the tiers' provenance
_RANKING = {
    "coverage": "coverage, then pass rate, then id",
    "informativeness": "coverage * 4 * p * (1 - p), then coverage, then id",
}


def make_teacher(rcfg: RubricsConfig, jcfg: JudgeConfig, secret_resolver: Callable[[str], str] | None = None):
    """The teacher backend named by ``rubrics.teacher`` (with ``teacher_model`` overriding the judge's model)."""
    if rcfg.teacher is None:
        raise ValueError("rubrics.teacher is None: no teacher configured")
    overrides: dict = {"backend": rcfg.teacher}
    if rcfg.teacher_model:
        if rcfg.teacher == "openai":
            overrides["openai"] = jcfg.openai.model_copy(update={"model": rcfg.teacher_model})
        else:
            overrides["local"] = jcfg.local.model_copy(update={"model_path": rcfg.teacher_model})
    teacher = make_backend(jcfg.model_copy(update=overrides), secret_resolver)
    if jcfg.preflight:
        teacher.preflight()  # a dead teacher stops the stage before any prompt is built
    return teacher


def write_pool(
    rcfg: RubricsConfig,
    jcfg: JudgeConfig | None = None,
    data_dir: str | Path | None = None,
    teacher=None,
    secret_resolver: Callable[[str], str] | None = None,
) -> dict:
    """Write the candidate pool to ``rcfg.pool_path``. ``teacher`` overrides the configured one (tests)."""
    if teacher is None and rcfg.teacher is not None:
        teacher = make_teacher(rcfg, jcfg or JudgeConfig(), secret_resolver)
    if teacher is None:
        pool = load_default_pool(rcfg.default_pool_path)
        if len(pool.rubrics) < rcfg.n_candidates:
            raise ValueError(
                f"rubrics.n_candidates={rcfg.n_candidates} but the default pool "
                f"({rcfg.default_pool_path or 'shipped'}) has {len(pool.rubrics)} candidates"
            )
        pool = RubricPool(pool.rubrics[: rcfg.n_candidates], pool.provenance, pool.version)
    else:
        examples: list[str] = []
        if data_dir is not None:
            seen: dict[str, str] = {}
            for s in read_dataset(data_dir, split="calib"):
                seen.setdefault(f"{s.task}:{s.facts.get('question_type', '')}", s.question)
            examples = list(seen.values())
        pool = generate_pool(teacher, rcfg.n_candidates, examples, rcfg.teacher_max_calls)
    path = save_pool(pool, rcfg.pool_path)
    by_cat: dict[str, int] = {}
    for r in pool.rubrics:
        by_cat[r.category] = by_cat.get(r.category, 0) + 1
    return {
        "metrics": {"n_candidates": len(pool.rubrics), **{f"n_{k}": v for k, v in sorted(by_cat.items())}},
        "paths": {"pool": str(path)},
        "source": pool.provenance.get("source", ""),
    }


# ------------------------------------------------------------------------------------------------------------
# calibration


def sample_policy_responses(
    policy_path: str | Path,
    data_dir: str | Path,
    samples: list,
    n: int,
    temperature: float,
    max_new_tokens: int,
    batch_size: int = 64,
    seed: int = 0,
) -> list[list[str]]:
    """``n`` sampled responses per sample from the policy checkpoint (prompts as in training/evaluation)."""
    # torch: only calibration samples a policy; writing the pool (default or teacher) stays light
    from models.generation.hf import TransformersGenerator
    from models.loader import load_policy
    from rubricflow.evaluation.heldout import policy_requests

    model, processor = load_policy(policy_path)
    gen = TransformersGenerator(model, processor, batch_size=batch_size)
    outs = gen.generate(
        policy_requests(processor, data_dir, samples),
        n=n,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
    )
    return [[c.text for c in cs] for cs in outs]


def calibration_requests(data_dir: str | Path, samples: list, responses: list[list[str]], rubrics: list[Rubric]):
    """One JudgeRequest per (sample, response); images as absolute paths, facts and answer attached."""
    if len(samples) != len(responses):
        raise ValueError(f"{len(samples)} samples but {len(responses)} response lists")
    root = Path(data_dir).resolve()
    return [
        JudgeRequest(
            sample_id=f"{s.id}#{k}",
            question=s.question,
            response=resp,
            rubrics=list(rubrics),
            images=[str(root / p) for p in s.images],
            facts=s.facts,
            answer=s.answer,
        )
        for s, resps in zip(samples, responses)
        for k, resp in enumerate(resps)
    ]


def write_table(rows: list[dict], summary: dict, table_dir: str | Path) -> dict[str, str]:
    d = Path(table_dir)
    out = {
        "table_json": d / "stratification.json",
        "table_csv": d / "stratification.csv",
        "summary": d / "stratification_summary.json",
    }
    ordered = [{c: r.get(c) for c in TABLE_COLUMNS} for r in rows]
    write_json(out["table_json"], ordered, sort_keys=False, default=None, ensure_ascii=False, trailing_newline=True)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(TABLE_COLUMNS))
    w.writeheader()
    w.writerows(ordered)
    atomic_write_text(out["table_csv"], buf.getvalue())
    write_json(out["summary"], summary, sort_keys=False, default=None, trailing_newline=True)
    return {k: str(v) for k, v in out.items()}


def tiers_pool(pool: RubricPool, rows: list[dict], rule: dict) -> RubricPool:
    """The kept rubrics with tiers and their calibration numbers, in foundational-then-advanced order."""
    by_id = {r.id: r for r in pool.rubrics}
    kept = sorted((r for r in rows if r["kept"]), key=lambda r: (r["tier"] != "foundational", r["rank"]))
    rubrics = [Rubric(**{**by_id[r["id"]].to_dict(), "tier": r["tier"]}) for r in kept]
    extra = {
        r["id"]: {k: r[k] for k in ("coverage", "pass_rate", "n_judged", "n_applicable", "rank", "score")} for r in kept
    }
    return RubricPool(
        rubrics,
        # the start's pass order (perception before deduction?), read by studies as a precondition
        provenance={**pool.provenance, "stratification": rule, "calibration": pass_order(rows)},
        version=f"{pool.version}+stratified",
        extra=extra,
    )


def stratify_pool(
    rcfg: RubricsConfig,
    jcfg: JudgeConfig,
    data_dir: str | Path,
    judge: JudgeBackend | None = None,
    responder: Responder | None = None,
    secret_resolver: Callable[[str], str] | None = None,
    seed: int = 0,
) -> dict:
    """Sample, judge, compute the table, select and stratify, write the outputs; returns metrics and paths.

    ``judge`` defaults to ``make_judge(jcfg)``; ``responder(samples) -> [[response, ...], ...]`` defaults to
    sampling ``rcfg.samples_per_prompt`` responses per prompt from ``rcfg.policy_path``.
    """
    pool = load_pool(rcfg.pool_path)
    samples = read_dataset(data_dir, split="calib")
    if not samples:
        raise ValueError(f"{data_dir}: the calib split is empty (data.splits.calib must be > 0)")
    if rcfg.calib_max_prompts:
        samples = samples[: rcfg.calib_max_prompts]
    if judge is None:
        judge = make_judge(jcfg, secret_resolver, image_root=data_dir)
    if getattr(judge, "name", "") == "programmatic":
        require_checks(pool.rubrics)  # fail before sampling, naming the rubrics without a checker
    if responder is None:
        responses = sample_policy_responses(
            rcfg.policy_path,
            data_dir,
            samples,
            n=rcfg.samples_per_prompt,
            temperature=rcfg.temperature,
            max_new_tokens=rcfg.max_new_tokens,
            batch_size=rcfg.gen_batch_size,
            seed=seed,
        )
    else:
        responses = responder(samples)
    requests = calibration_requests(data_dir, samples, responses, pool.rubrics)
    judgments: list[Judgment] = judge.judge(requests)
    table = coverage_and_pass_rates(judgments, pool.rubrics)
    rule = {
        "coverage_min": rcfg.coverage_min,
        "keep_k": rcfg.keep_k,
        "tier_rule": rcfg.tier_rule,
        "foundational_min_pass": rcfg.foundational_min_pass,
        "n_foundational": rcfg.n_foundational,
        "rank_by": rcfg.rank_by,
        "saturation_max": rcfg.saturation_max,
        "ranking": _RANKING[rcfg.rank_by],
        "judge": ":".join(str(getattr(judge, a, "?")) for a in ("name", "model_id", "prompt_version")),
        "n_prompts": len(samples),
        "samples_per_prompt": len(responses[0]) if responses else 0,
    }
    rows = select_and_stratify(
        table,
        keep_k=rcfg.keep_k,
        coverage_min=rcfg.coverage_min,
        tier_rule=rcfg.tier_rule,
        foundational_min_pass=rcfg.foundational_min_pass,
        n_foundational=rcfg.n_foundational,
        rank_by=rcfg.rank_by,
        saturation_max=rcfg.saturation_max,
    )
    # A calibration whose judgments mostly failed must not become tiers: raise before writing anything, so the
    # previous tables and tiers file stay as they were.
    check_failure_budget(judgments, jcfg.max_failed_frac, f"stratify ({rule['judge']})")
    summary = summarize(rows, judgments)
    if summary["n_judge_failed"]:
        log.warning(
            "stratify: %d of %d judgments failed (missing, not scored)", summary["n_judge_failed"], len(judgments)
        )
    paths = write_table(rows, summary, rcfg.table_dir)
    paths["tiers"] = str(save_pool(tiers_pool(pool, rows, rule), rcfg.tiers_path))
    return {"metrics": summary, "paths": paths, "rule": rule, "rows": rows}
