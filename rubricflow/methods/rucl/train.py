"""RuCL Phase II: GRPO from the SFT checkpoint with the hybrid reward and the performance-triggered curriculum.

``train_rucl(...)`` does the work from its sections; the pipeline stage (``rubricflow.methods.rucl.stages``:
``rubricflow rucl``, DVC, Prefect) resolves the judge and the tiers and calls it.

Outputs:

* ``rcfg.out_dir``: the trained policy (HF format, loadable by models.loader.load_policy);
* ``<reports>/rucl/steps.jsonl``: one metrics line per step (the reward-hacking monitor's ``monitor/*`` included;
  the run's ``hacking`` summary warns when the rubric reward rose while the independent readout fell);
  ``curriculum.json`` (lambda_t, S_F, S_A per step, for ``dvc plots``), ``curriculum.png`` (with the monitor
  panel), ``transition.json`` (this run's curriculum switch: ``switched``, the step and the event, or
  none; rewritten by every run),
  ``samples_last_step.json`` (responses and reward breakdowns of the last batch);
* MLflow (through ``run``): per-step metrics, the transition as an event, the plot as an artifact.

Checkpoints go to ``rcfg.checkpoint_dir/<rcfg.name>-seed<seed>/`` and an interrupted run resumes from the latest
one (model, optimizer, RNG, data cursor, curriculum state and the metrics history so far), but only if it was
trained on the same inputs (:func:`resume_parts`: the sections, the contents of the SFT policy, tiers file and data
set, and the training code); otherwise the run starts fresh and reports ``resume_refused: "<parts> changed"``.
"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

from rubricflow.data.schema import read_dataset
from rubricflow.evaluation.heldout import evaluate_policy, evaluate_sampled
from rubricflow.grpo.lora import apply_lora, merge_lora
from rubricflow.judge.factory import make_judge
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
from rubricflow.methods.rucl.evaluate import per_task
from rubricflow.methods.rucl.monitor import hacking_warning
from rubricflow.methods.rucl.plots import plot_curriculum
from rubricflow.methods.rucl.rubrics.pool import load_tiers
from rubricflow.pipeline.progress import progress
from rubricflow.pipeline.stage import NullRun
from rubricflow.sections import GenerationConfig
from rubricflow.training.generation import generator_for
from rubricflow.util.hashing import code_hash, content_hash
from rubricflow.util.io import write_json

# The training code whose edits change a trajectory: the method (its rewards and curriculum included), the GRPO core
# and the answer matching.
TRAINING_CODE = ("rubricflow.methods.rucl", "rubricflow.grpo", "rubricflow.evaluation.answers")


def _judge_part(rcfg: RuCLConfig, judge, judge_cfg) -> dict | None:
    if rcfg.reward.mode == "outcome":
        return None  # no judge call
    section = judge_cfg.essential_dump() if judge_cfg is not None else None
    backend = [getattr(judge, a, None) for a in ("name", "model_id", "prompt_version")] if judge is not None else None
    return {"section": section, "backend": backend}


def resume_parts(rcfg: RuCLConfig, seed: int, data_dir: str | Path, gen_cfg: GenerationConfig | None = None,
                 judge=None, judge_cfg=None, rubrics: list | None = None) -> dict[str, Any]:
    """Everything that decides the trajectory, one entry per part (``rubricflow.grpo.checkpoint.resume_key``):
    the ``rucl`` section (without its operational, output and resumable fields: ``Section``), the seed, the
    ``generation`` and ``judge`` sections (no judge in outcome mode; operational judge settings such as concurrency,
    timeouts and the cache are left out), the contents of the initial policy folder, the tiers file (and the rubrics
    handed in) and the data set folder, and the hash of the training code."""
    gen = (gen_cfg or GenerationConfig()).essential_dump()
    return {
        "rucl": rcfg.resume_dump(),
        "seed": seed,
        "generation": gen,
        "judge": _judge_part(rcfg, judge, judge_cfg),
        "init_policy": content_hash(rcfg.init_from),
        "tiers": {"file": content_hash(rcfg.tiers_path),
                  "rubrics": [r.to_dict() if hasattr(r, "to_dict") else str(r) for r in (rubrics or [])]},
        "data": content_hash(data_dir),
        "code": code_hash(*TRAINING_CODE),
    }


def _json_safe(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


def train_rucl(
    rcfg: RuCLConfig,
    data_dir: str | Path,
    judge,
    rubrics: list,
    reports_dir: str | Path,
    gen_cfg=None,
    run=None,
    seed: int = 1234,
    steps: int | None = None,
    judge_cfg=None,
) -> dict[str, Any]:
    """Train, save the policy, write reports; returns summary metrics. See the module docstring. ``judge_cfg``:
    the judge section ``judge`` was made from (part of the resume key)."""
    # torch: the policy, the GRPO engine and the rollout (this module is loaded at CLI start by the study adapter)
    from models.loader import load_policy
    from rubricflow.grpo.checkpoint import MetricsHistory
    from rubricflow.grpo.causal_lm import CausalLMAdapter
    from rubricflow.grpo.engine import make_engine
    from rubricflow.grpo.export import save_policy
    from rubricflow.grpo.trainer import GRPOTrainer
    from rubricflow.grpo.updater import GRPOUpdater
    from rubricflow.methods.rucl.rollout import RuCLRollout

    run = run or NullRun()
    gen_cfg = gen_cfg or GenerationConfig()
    g = rcfg.grpo
    reports = Path(reports_dir)
    data_dir = Path(data_dir)
    t_start = time.perf_counter()

    model, proc = load_policy(rcfg.init_from)
    model = apply_lora(model, rcfg.lora)  # rank 0: unchanged (full fine-tuning)
    train = read_dataset(data_dir, split=rcfg.train_split)
    if rcfg.train_limit:
        train = per_task(train, rcfg.train_limit)
    if not train:
        raise ValueError(f"{data_dir}: split {rcfg.train_split!r} is empty (rucl.train_split)")
    val = []  # the accuracy tracked during training is on val (choose on val; rucl_eval reports test)
    if rcfg.eval_samples:
        all_val = read_dataset(data_dir, split="val")
        for task in sorted({s.task for s in all_val}):
            val += [s for s in all_val if s.task == task][: rcfg.eval_samples]
    ref = copy.deepcopy(model).eval() if g.beta > 0 else None
    engine = make_engine(model, g)
    main = engine.rank == 0
    module = engine.module
    before = evaluate_policy(module, proc, data_dir, val, gen_cfg, engine) if val else {}  # every rank takes part

    def sampled(m) -> dict:  # the sampled val readouts at the GRPO temperature (same draws before and after)
        return evaluate_sampled(m, proc, data_dir, val, gen_cfg, rcfg.eval_k, g.temperature, rcfg.eval_seed, engine)

    sampled_before = sampled(module)

    if g.one_step_off:
        # the rollouts of step t+1 generate while step t updates: on a copy of the policy, synced between steps
        if gen_cfg.backend not in ("transformers", "cached"):
            raise ValueError(f"rucl.grpo.one_step_off: generation.backend={gen_cfg.backend!r} is not supported yet "
                             "(transformers or cached)")
        gen_module = copy.deepcopy(module).requires_grad_(False)

        def sync_policy() -> None:
            gen_module.load_state_dict(module.state_dict())
    else:
        gen_module = module

        def sync_policy() -> None:
            gen.sync_weights(module)  # vLLM: push the updated weights; transformers: same tensors already

    gen = generator_for(gen_cfg, gen_module, proc, model_path=rcfg.init_from)
    c = rcfg.curriculum
    sched = CurriculumScheduler.from_config(c)
    rollout = RuCLRollout(gen, proc, judge, rubrics, sched, rcfg, data_dir, engine, sync_policy=sync_policy)
    updater = GRPOUpdater(CausalLMAdapter(module, proc, temperature=g.temperature), engine, g, ref_module=ref)
    history = MetricsHistory()
    bar = None

    steps_f = reports / "steps.jsonl"
    if main:
        reports.mkdir(parents=True, exist_ok=True)

    def log(step: int, m: dict) -> None:
        if bar is not None:  # a resumed run jumps straight to its checkpoint's step
            bar.advance(step + 1 - bar.done, reward=m.get("reward/total"), lam=m.get("curriculum/lambda_t"))
        row = {"step": step, **m}
        history.rows.append(_json_safe(row))
        run.log_metrics(m, step=step)
        ev = rollout.last.get("transition_event")
        if ev is not None and main:
            run.event("curriculum_transition", ev)

    def eval_fn(step: int) -> dict:
        return evaluate_policy(module, proc, data_dir, val, gen_cfg, engine)  # greedy val accuracy, all ranks

    ckpt_dir = Path(rcfg.checkpoint_dir) / f"{rcfg.name}-seed{seed}"
    trainer = GRPOTrainer(updater, train, rollout, g, ckpt_dir, log_fn=log,
                          stateful={"curriculum": sched, "history": history},
                          eval_fn=eval_fn if (val and g.eval_every) else None,
                          key_parts=resume_parts(rcfg, seed, data_dir, gen_cfg, judge, judge_cfg, rubrics))
    n_steps = steps if steps is not None else g.steps
    try:
        with progress(f"{rcfg.name} train", total=n_steps, show=main) as bar:
            summary = trainer.run(n_steps)
    finally:
        rollout.close()

    result: dict[str, Any] = {
        "steps": summary["steps"],
        "resumed_from": summary["resumed_from"],
        "resume_refused": summary["resume_refused"],
        "corrupt_checkpoints": summary["corrupt_checkpoints"],
        "checkpoint_dir": str(ckpt_dir),
        "transition_step": sched.transition_step,
        "lambda_final": sched.lambda_t,
        "reward_mode": rcfg.reward.mode,
    }
    module = merge_lora(module)  # adapters folded in: the saved policy is a plain checkpoint
    save_policy(module, proc, rcfg.out_dir)  # consolidated once, written by rank 0
    after = evaluate_policy(module, proc, data_dir, val, gen_cfg, engine) if val else {}
    sampled_after = sampled(module)
    if main:
        rows = history.rows
        steps_f.write_text("".join(json.dumps(r) + "\n" for r in rows))
        series = [{k: r.get(k) for k in ("step", "curriculum/lambda_t", "reward/s_f", "reward/s_a",
                                         "reward/total", "outcome_accuracy")} for r in rows]
        (reports / "curriculum.json").write_text(json.dumps(series, indent=1))
        png = plot_curriculum(rows, reports / "curriculum.png", sched.transition_step, sched.active_threshold,
                              title=f"RuCL curriculum (mode {rcfg.reward.mode})")
        run.log_artifact(png)
        (reports / "samples_last_step.json").write_text(json.dumps(_json_safe(rollout.last), indent=1))
        lambda_share = sum(1 for r in rows if (r.get("curriculum/lambda_t") or 0) > 0) / len(rows) if rows else None
        # written on every run (a DVC output): the switch of this run, or none; never an older run's switch
        write_json(reports / "transition.json", _json_safe({
            "switched": sched.transitioned, "transition_step": sched.transition_step,
            "event": sched.event if sched.transitioned else None, "threshold": sched.active_threshold,
            "threshold_rule": c.threshold_rule, "baseline": sched.baseline, "window": c.window,
            "lambda_positive_share": lambda_share}))
        hacking = hacking_warning(rows)
        result["hacking"] = hacking
        if hacking["warn"]:
            print(f"warning: {rcfg.name}: {hacking['message']}", flush=True)
        tail = rows[-min(5, len(rows)):] if rows else []

        def mean_of(key):
            v = [r[key] for r in tail if r.get(key) is not None]
            return sum(v) / len(v) if v else None

        n_samples = sum(r.get("n_episodes", 0) for r in rows)
        t_roll = sum(r.get("rollout_time_s", 0.0) for r in rows)
        t_upd = sum(r.get("update_time_s", 0.0) for r in rows)
        result.update({
            "final/reward_total": mean_of("reward/total"),
            "final/outcome_accuracy": mean_of("outcome_accuracy"),
            "final/s_f": mean_of("reward/s_f"),
            "final/s_a": mean_of("reward/s_a"),
            "final/rubric_to_wrong": mean_of("monitor/rubric_to_wrong"),
            "final/relevant_sound": mean_of("monitor/relevant_sound"),
            "lambda_positive_share": lambda_share,
            "curriculum_threshold": sched.active_threshold,
            "first/reward_total": rows[0].get("reward/total") if rows else None,
            "judge_failures_total": sum(r.get("judge/failures", 0.0) for r in rows),
            "samples_per_s": n_samples / (t_roll + t_upd) if (t_roll + t_upd) > 0 else None,
            "rollout_time_s_total": t_roll,
            "update_time_s_total": t_upd,
        })
        if val:
            result["accuracy_before"] = before
            result["accuracy_after"] = after
        keep = ("sampled_accuracy", "pass_at_k", "clean_pass_at_k", "relevant_flaw_rate")
        if sampled_before:
            result["sampled_before"] = {k: v for k, v in sampled_before.items() if k.startswith(keep) and "/" in k}
            result["sampled_after"] = {k: v for k, v in sampled_after.items() if k.startswith(keep) and "/" in k}
    result["duration_s"] = round(time.perf_counter() - t_start, 2)
    return _json_safe(result)


# ------------------------------------------------------------------------------------------------------------
# the pipeline stage


def log_train_inputs(run, rcfg: RuCLConfig, data) -> None:
    """Log what training reads to ``run`` as MLflow inputs: the train split, and val when accuracy is tracked
    during training (``rucl.eval_samples``)."""
    run.log_input(data.out_dir, split=rcfg.train_split, context="training")
    if rcfg.eval_samples:
        run.log_input(data.out_dir, split="val", context="evaluation")


def run_training(rcfg: RuCLConfig, judge_cfg, data, gen_cfg: GenerationConfig, reports_dir: str | Path, *, run=None,
                 seed: int = 1234, secret_resolver=None) -> dict[str, Any]:
    """:func:`train_rucl` from the sections, as the ``rucl`` stage and every study unit run it: the tiers (when the
    reward uses rubrics or a tiers file exists), the judge built from ``judge_cfg`` (not in outcome mode), and
    ``judge_cfg`` in the resume key."""
    backend, rubrics = None, []
    if rcfg.reward.mode != "outcome" or Path(rcfg.tiers_path).exists():
        rubrics = load_tiers(rcfg.tiers_path)
    if rcfg.reward.mode != "outcome":
        backend = make_judge(judge_cfg, secret_resolver, image_root=data.out_dir)
    return train_rucl(rcfg, data.out_dir, backend, rubrics, reports_dir, gen_cfg, run=run, seed=seed,
                      judge_cfg=judge_cfg)
