"""RoRo pipeline steps on the ``RoRoConfig`` alone (no Config, tracking or Prefect): each returns a metrics dict
and writes under ``rc.data_dir`` / ``rc.out_dir``. ``rubricflow.methods.roro.stages`` wraps them as pipeline stages.

    models          train the SLM and the LRM (tiny Qwen2, SFT on step-by-step solutions)
    trajectories    every route of each train / val problem (or the routes of diverse policies); store steps,
                    writers, checks, states, cost
    pairs           preference pairs (outcome, then cost, then process quality), counted per category
    rubricor_judge  warm start + alternating rejection-sampling fine-tuning; val pairwise accuracy per phase and
                    pair category; the phase with the best val accuracy is kept
    router          (rubricflow.methods.roro.router_train) GRPO routers + the cost-weight sweep
    eval            (rubricflow.methods.roro.evaluate) accuracy vs LRM cost on test problems, baselines, curve, AUC; the
                    kept Judge's pairwise accuracy on test pairs
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rubricflow.io import write_json, write_parquet
from rubricflow.methods.roro.config import RoRoConfig, StepModelConfig
from rubricflow.methods.roro.task import Problem, make_problems, read_gsm8k
from rubricflow.splits import check_split

Log = Callable[[str, dict], None]


# ----------------------------------------------------------------------------------------------------------------
# Problems


def problems(rc: RoRoConfig) -> dict[str, list[Problem]]:
    """Problems per split: ``sft`` (step-model training; no question shared with the others), ``train``,
    ``val`` (held-out pairs) and ``test`` (held-out routing evaluation; GSM8K rows when task.source=gsm8k)."""
    t = rc.task
    kw = dict(min_ops=t.min_ops, max_ops=t.max_ops, max_value=t.max_value, mul_max=t.mul_max, arg_max=t.arg_max)
    out = {s: make_problems(n, s, t.seed, **kw) for s, n in (("train", t.n_train), ("val", t.n_val),
                                                              ("test", t.n_test))}
    if t.source == "gsm8k":
        out["test"] = read_gsm8k(t.gsm8k_path, split="test", limit=t.n_test)
    held = {p.question for s in ("train", "val", "test") for p in out[s]}
    out["sft"] = [p for p in make_problems(t.n_sft, "sft", t.seed, **kw) if p.question not in held]
    return HeldOutGuard(out)


class HeldOutGuard(dict):
    """The problem sets; taking ``["test"]`` goes through the test-split guard (rubricflow.splits). The SFT set
    is still filtered against the test questions above, so no test question leaks into step-model training."""

    def __getitem__(self, split: str) -> list[Problem]:
        check_split(split, "RoRo problems")
        return super().__getitem__(split)


# ----------------------------------------------------------------------------------------------------------------
# models


def _step_corpus(sft: list[Problem]) -> list[str]:
    from rubricflow.methods.roro.steps import INSTRUCTION

    marks = ["<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"] * 50
    return marks + [f"{p.question}\n{INSTRUCTION}\n" + "\n".join(p.reference_steps) for p in sft[:1000]]


def train_step_model(spec: StepModelConfig, sft: list[Problem], val: list[Problem], corpus: list[str], name: str,
                     rc: RoRoConfig, seed: int) -> dict:
    """Build + SFT a tiny step model and save it to ``spec.path``.

    Schedule: ``sft_steps`` at ``lr``; then, while the gold-prefix step accuracy on ``val`` is below
    ``target_step_acc``, blocks of ``extra_block`` steps at lr / 2 (at most ``max_extra_steps``); then
    ``sft_decay_steps`` at lr / 4. Tiny transformers learn the step lookup and the arithmetic in sudden phase
    changes whose timing varies with the seed; the extra blocks make the strength of the trained model (what
    matters for routing) far less seed-dependent than a fixed step count.
    """
    from models.tiny import TinyDims, build_tiny_text, save
    from rubricflow.methods.roro.steps import TransformersStepModel, solution_prompt
    from rubricflow.sft import SFTExample, train_sft

    t0 = time.perf_counter()
    dims = TinyDims(hidden_size=spec.hidden_size, num_layers=spec.num_layers, num_heads=spec.num_heads,
                    num_kv_heads=spec.num_kv_heads, vocab_size=spec.vocab_size, max_positions=512)
    model, tok = build_tiny_text(corpus, dims, seed=seed)
    ex = [SFTExample(solution_prompt(tok, p.question), "\n".join(p.reference_steps)) for p in sft]

    def acc() -> float:
        sm = TransformersStepModel(model, tok, name, rc.steps.max_step_tokens, rc.steps.uncertainty, rc.steps.batch_size)
        return gold_prefix_step_accuracy(sm, val)

    def phase(steps: int, lr: float, k: int) -> list[float]:
        out = train_sft(model, tok, ex, steps=steps, batch_size=spec.batch_size, lr=lr,
                        warmup_steps=min(spec.warmup_steps, steps) if k == 0 else 0, seed=seed + k)
        model.eval()
        return out

    losses = phase(spec.sft_steps, spec.lr, 0)
    extra, trace = 0, []
    if spec.target_step_acc > 0:
        a = acc()
        trace.append(a)
        while a < spec.target_step_acc and extra + spec.extra_block <= spec.max_extra_steps:
            losses += phase(spec.extra_block, spec.lr / 2, 1 + extra // spec.extra_block)
            extra += spec.extra_block
            a = acc()
            trace.append(a)
    if spec.sft_decay_steps:
        losses += phase(spec.sft_decay_steps, spec.lr / 4, 1000)
    save(model, tok, spec.path)
    return {"params": sum(p.numel() for p in model.parameters()), "final_loss": sum(losses[-10:]) / max(1, len(losses[-10:])),
            "extra_steps": extra, "steps": len(losses), "acc_trace": trace, "train_s": time.perf_counter() - t0}


def load_step_model(spec: StepModelConfig, name: str, rc: RoRoConfig):
    """A StepModel for ``spec`` (transformers or vLLM) and its cache fingerprint."""
    from rubricflow.methods.roro.routing import model_fingerprint
    from rubricflow.methods.roro.steps import TransformersStepModel, VLLMStepModel

    if spec.backend == "vllm":
        m = VLLMStepModel(spec.path, name, spec.n_params, max_step_tokens=rc.steps.max_step_tokens,
                          uncertainty=rc.steps.uncertainty, gpu_memory_utilization=spec.gpu_memory_utilization)
        return m, model_fingerprint(name, spec.path)
    from models.loader import load_policy

    if spec.source == "tiny" and not (Path(spec.path) / "config.json").exists():
        raise FileNotFoundError(f"roro.{name}.path={spec.path}: no trained {name.upper()} here; run `rubricflow roro-models`")
    model, tok = load_policy(spec.path)
    m = TransformersStepModel(model, tok, name, rc.steps.max_step_tokens, rc.steps.uncertainty, rc.steps.batch_size)
    return m, model_fingerprint(name, spec.path)


def gold_prefix_step_accuracy(step_model, probs: list[Problem]) -> float:
    """Fraction of steps a model gets locally right when continuing the *gold* prefix."""
    from rubricflow.methods.roro.steps import prefix_text
    from rubricflow.methods.roro.task import check_step

    prefixes, meta = [], []
    for p in probs:
        pr = step_model.prompt(p.question)
        vals = [p.start] + p.true_values()
        for k in range(p.n_steps):
            prefixes.append(prefix_text(pr, p.reference_steps[:k]))
            meta.append((p, k, vals[k]))
    outs = step_model.propose(prefixes)
    ok = [bool(check_step(p, k, o.text, carried).correct) for (p, k, carried), o in zip(meta, outs)]
    return sum(ok) / max(1, len(ok))


def run_models(rc: RoRoConfig, log: Log | None = None) -> dict:
    import torch

    probs = problems(rc)
    corpus = _step_corpus(probs["sft"])
    out: dict = {"n_sft_problems": len(probs["sft"])}
    for name, spec, seed in (("slm", rc.slm, rc.seed), ("lrm", rc.lrm, rc.seed + 1)):
        if spec.source != "tiny":
            out[f"{name}_source"] = spec.path  # a pretrained model: nothing to train here
            continue
        torch.manual_seed(seed)
        m = train_step_model(spec, probs["sft"], probs["val"], corpus, name, rc, seed)
        sm, _ = load_step_model(spec, name, rc)
        m["val_step_acc"] = gold_prefix_step_accuracy(sm, probs["val"])
        out.update({f"{name}_{k}": v for k, v in m.items()})
        if log:
            log("models", {f"{name}_{k}": v for k, v in m.items()})
    return out


# ----------------------------------------------------------------------------------------------------------------
# trajectories


def make_env(rc: RoRoConfig, cache_path: str | Path | None = None):
    from rubricflow.methods.roro.routing import RoutingEnv, StepCache

    slm, slm_fp = load_step_model(rc.slm, "slm", rc)
    lrm, lrm_fp = load_step_model(rc.lrm, "lrm", rc)
    cache = StepCache()
    if cache_path is not None and Path(cache_path).exists():
        cache.load(cache_path)
    return RoutingEnv(slm, lrm, slm_fp, lrm_fp, rc.steps.max_steps, rc.steps.token_norm, rc.steps.step_norm, cache,
                      rc.steps.fifth_feature)


def collection_policies(rc: RoRoConfig) -> list:
    from rubricflow.methods.roro.routing import ConstantPolicy, RandomPolicy, ThresholdPolicy

    tc = rc.trajectories
    pols: list = [ConstantPolicy(0), ConstantPolicy(1)]
    pols += [RandomPolicy(r, seed=tc.seed + i) for i, r in enumerate(tc.random_rates)]
    pols += [ThresholdPolicy(t) for t in tc.thresholds]
    return pols


def trajectories_path(rc: RoRoConfig) -> Path:
    return Path(rc.data_dir) / "trajectories.parquet"


def cache_path(rc: RoRoConfig) -> Path:
    return Path(rc.data_dir) / "step_cache.jsonl"


def write_trajectories(path: Path, trajs) -> Path:
    import pyarrow as pa

    return write_parquet(path, pa.Table.from_pylist([t.to_row() for t in trajs]))


def read_trajectories(path: Path):
    import pyarrow.parquet as pq

    from rubricflow.methods.roro.routing import Trajectory

    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no trajectories; run `rubricflow roro-trajectories` first")
    return [Trajectory.from_row(r) for r in pq.read_table(path).to_pylist()]


def policy_summary(trajs) -> dict[str, dict[str, float]]:
    by: dict[str, list] = {}
    for t in trajs:
        by.setdefault(t.policy, []).append(t)
    return {
        name: {
            "accuracy": sum(t.outcome for t in ts) / len(ts),
            "lrm_tokens": sum(t.lrm_tokens for t in ts) / len(ts),
            "lrm_call_rate": sum(t.lrm_calls for t in ts) / max(1, sum(len(t.steps) for t in ts)),
            "n": float(len(ts)),
        }
        for name, ts in sorted(by.items())
    }


def run_trajectories(rc: RoRoConfig, log: Log | None = None) -> dict:
    from rubricflow.methods.roro.pairs import dedupe

    t0 = time.perf_counter()
    probs = problems(rc)
    env = make_env(rc)
    pool = probs["train"] + probs["val"]
    trajs = []
    if rc.trajectories.enumerate_routes:
        trajs += env.enumerate_routes(pool)
    else:
        for pol in collection_policies(rc):
            reps = rc.trajectories.random_repeats if pol.name.startswith("random") else 1
            trajs += env.rollout(pool, pol, repeats=reps)
    unique = dedupe(trajs)
    write_trajectories(trajectories_path(rc), unique)
    steps = [s for t in unique for s in t.steps]
    slm_err = [s for s in steps if s.slm_correct is False]
    if rc.trajectories.enumerate_routes:  # the policies' accuracy and cost, read off the routes they would take
        trajs = []
        for pol in collection_policies(rc):
            reps = rc.trajectories.random_repeats if pol.name.startswith("random") else 1
            trajs += env.rollout(pool, pol, repeats=reps)
    env.cache.save(cache_path(rc))
    summ = policy_summary(trajs)
    out = {
        "n_rollouts": len(trajs), "n_unique": len(unique), "n_problems": len(pool),
        "collection": "every route" if rc.trajectories.enumerate_routes else "policies",
        "step_cache_entries": len(env.cache.entries),
        "slm_step_error_rate": len(slm_err) / max(1, len(steps)),
        "uncertainty_auc": _auc([s.slm_uncertainty for s in slm_err],
                                [s.slm_uncertainty for s in steps if s.slm_correct is True]),
        "policies": summ, "duration_s": time.perf_counter() - t0,
    }
    return out


def _auc(pos: list[float], neg: list[float]) -> float | None:
    """P(a random error step has higher SLM uncertainty than a random correct one) (ties 0.5)."""
    if not pos or not neg:
        return None
    import bisect

    neg_s = sorted(neg)
    tot = 0.0
    for x in pos:
        lo, hi = bisect.bisect_left(neg_s, x), bisect.bisect_right(neg_s, x)
        tot += lo + 0.5 * (hi - lo)
    return tot / (len(pos) * len(neg))


# ----------------------------------------------------------------------------------------------------------------
# pairs


def pairs_path(rc: RoRoConfig) -> Path:
    return Path(rc.data_dir) / "pairs.parquet"


def read_trajectory_pairs(path: Path):
    """The stored trajectory pairs per split (``{"train": [Pair, ...], "val": [...]}``)."""
    import pyarrow.parquet as pq

    from rubricflow.methods.roro.pairs import Pair

    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no pairs; run `rubricflow roro-pairs` first")
    rows = pq.read_table(path).to_pylist()
    return {split: [Pair(r["problem_id"], int(r["chosen"]), int(r["rejected"]), r["reason"]) for r in rows
                    if r["split"] == split] for split in ("train", "val")}


def run_pairs(rc: RoRoConfig, log: Log | None = None) -> dict:
    import pyarrow as pa

    from rubricflow.methods.roro.pairs import build_trajectory_pairs

    trajs = read_trajectories(trajectories_path(rc))
    pairs, out = make_pairs(rc, trajs)
    split_of = {t.problem_id: t.split for t in trajs}
    rows = [p.to_row(split_of[p.problem_id]) for p in pairs]
    write_parquet(pairs_path(rc), pa.Table.from_pylist(rows, schema=pa.schema([
        ("problem_id", pa.string()), ("chosen", pa.int64()), ("rejected", pa.int64()), ("reason", pa.string()),
        ("split", pa.string())])))
    return out


def make_pairs(rc: RoRoConfig, trajs) -> tuple[list, dict]:
    """The pairs of ``trajs`` under ``rc.pairs`` and their counts: per split and category, kept (``<split>_<cat>``)
    and decided before the per-problem cap (``<split>_available_<cat>``), and the process share of the kept pairs."""
    from rubricflow.methods.roro.pairs import CATEGORIES, build_trajectory_pairs, category_counts

    pc = rc.pairs
    split_of = {t.problem_id: t.split for t in trajs}
    out: dict = {}
    pairs: list = []
    for split in sorted(set(split_of.values())):
        idx = [i for i, t in enumerate(trajs) if t.split == split]
        sub = [trajs[i] for i in idx]
        available: dict[str, int] = {}
        ps = build_trajectory_pairs(sub, pc.order, pc.cost_margin, pc.max_pairs_per_problem, pc.seed, pc.cost_unit,
                                    available, pc.balance)
        counts = category_counts(ps, sub)
        out[f"{split}_pairs"] = len(ps)
        for cat in CATEGORIES:
            out[f"{split}_{cat}"] = counts[cat]
            out[f"{split}_available_{cat}"] = available.get(cat, 0)
        out[f"{split}_process_frac"] = (counts["process-right"] + counts["process-wrong"]) / max(1, len(ps))
        pairs += [type(p)(p.problem_id, idx[p.chosen], idx[p.rejected], p.reason) for p in ps]
    out["n_pairs"] = len(pairs)
    return pairs, out


# ----------------------------------------------------------------------------------------------------------------
# rubricor-judge


def rubrics_path(rc: RoRoConfig) -> Path:
    return Path(rc.out_dir) / "rubrics.jsonl"


def rounds_path(rc: RoRoConfig) -> Path:
    """Val pairwise accuracy after each alternation phase (a DVC plot: x=phase_index)."""
    return Path(rc.out_dir) / "rubricor_judge_rounds.json"


def run_rubricor_judge(rc: RoRoConfig, log: Log | None = None) -> dict:
    import torch

    from rubricflow.methods.roro.rubricor_judge import (
        alternate,
        build_rubric_lms,
        problem_views,
        save_rubrics,
        routing_tokenizer_corpus,
        write_rubrics,
    )

    t0 = time.perf_counter()
    trajs = read_trajectories(trajectories_path(rc))
    pairs = read_trajectory_pairs(pairs_path(rc))
    if not pairs["train"] or not pairs["val"]:
        raise ValueError(f"{pairs_path(rc)}: need train and val pairs, got {len(pairs['train'])} / {len(pairs['val'])}")
    rj = rc.rubricor_judge
    views = problem_views(trajs)
    torch.manual_seed(rj.seed)
    corpus = routing_tokenizer_corpus(views, trajs, rj.seed)
    judge, rubricor = build_rubric_lms(corpus, rj.judge, rj.rubricor, rj.batch_size, rj.seed)
    rows = alternate(judge, rubricor, rj, trajs, pairs["train"], pairs["val"],
                     log=(lambda row: log("rubricor_judge", row)) if log else None)
    judge.save(rj.judge.path)
    rubricor.save(rj.rubricor.path)
    rubrics = write_rubrics(rubricor, views, sorted(views))
    save_rubrics(rubrics_path(rc), rubrics)
    sel = next(r for r in rows if r["selected"])
    out = {
        "rounds": rows,
        "optimizer": rj.optimizer, "score_mode": rj.score_mode, "select_on": rj.select_on,
        "val_pairwise_acc_round0": rows[0]["val_pairwise_acc"],
        "val_pairwise_acc_final": rows[-1]["val_pairwise_acc"],
        "val_pairwise_acc_selected": sel["val_pairwise_acc"],
        "val_process_acc_selected": sel.get("val_acc_process"),
        "selected_phase": f"{sel['round']}/{sel['phase']}",
        "rubric_failed_frac": sum(r.failed for r in rubrics.values()) / max(1, len(rubrics)),
        "judge_generations": judge.n_generated, "rubricor_generations": rubricor.n_generated,
        "duration_s": time.perf_counter() - t0,
    }
    write_json(rounds_path(rc), [{"phase_index": i, "round": r["round"], "phase": r["phase"],
                                   **{k: r[k] for k in r if k.startswith("val_acc_") or k == "val_pairwise_acc"}}
                                  for i, r in enumerate(rows)])
    return out


# ----------------------------------------------------------------------------------------------------------------
# router


def _file_hash(path: Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def router_dir(rc: RoRoConfig) -> Path:
    return Path(rc.out_dir) / "router"


def router_runs(rc: RoRoConfig) -> list:
    """RoRo (outcome + process - cost) and outcome-only (outcome - cost) routers at every swept cost weight (the
    main ``cost_weight`` included)."""
    from rubricflow.methods.roro.router_train import RouterRun

    weights = sorted(set(rc.router.sweep_cost_weights) | {rc.router.cost_weight})
    runs = []
    if "roro" in rc.router.methods:
        runs += [RouterRun(f"roro-cw{w:g}", rc.router.process_weight, w) for w in weights]
    if "outcome-only" in rc.router.methods:
        runs += [RouterRun(f"outcome-cw{w:g}", 0.0, w) for w in weights]
    return runs


def load_judge_scorer(rc: RoRoConfig, probs: list[Problem]):
    from models.loader import load_policy
    from rubricflow.methods.roro.router_train import ProcessScorer
    from rubricflow.methods.roro.rubricor_judge import RubricLM, load_rubrics

    rj = rc.rubricor_judge
    if not (Path(rj.judge.path) / "config.json").exists():
        raise FileNotFoundError(f"roro.rubricor_judge.judge.path={rj.judge.path}: no Judge; run `rubricflow roro-rubricor-judge`")
    if not rubrics_path(rc).exists():
        raise FileNotFoundError(f"{rubrics_path(rc)}: no rubrics; run `rubricflow roro-rubricor-judge`")
    model, tok = load_policy(rj.judge.path)
    judge = RubricLM(model, tok, "judge", rj.batch_size, rj.judge.max_new_tokens)
    return ProcessScorer(judge, load_rubrics(rubrics_path(rc)), {p.id: p.question for p in probs}, rj.score_mode,
                         rj.score_samples, rj.score_temperature, rj.seed)


def run_router(rc: RoRoConfig, log: Log | None = None) -> dict:
    from models.router import save_router
    from rubricflow.ranks import process_rank
    from rubricflow.methods.roro.router_train import train_router

    t0 = time.perf_counter()
    probs = problems(rc)["train"]
    env = make_env(rc, cache_path(rc))
    runs = router_runs(rc)
    scorer = load_judge_scorer(rc, probs) if any(r.process_weight > 0 for r in runs) else None
    fps = [env.fp["SLM"], env.fp["LRM"]]
    if scorer is not None:
        from rubricflow.methods.roro.routing import model_fingerprint

        fps += [model_fingerprint("judge", rc.rubricor_judge.judge.path), _file_hash(rubrics_path(rc))]
    # the sections the environment and the scorer were built from (the models themselves are in ``fps``)
    key_parts = {"task": rc.task.model_dump(mode="json"), "steps": rc.steps.model_dump(mode="json"),
                 "rubricor_judge": rc.rubricor_judge.model_dump(mode="json", exclude={"judge", "rubricor"})
                 if scorer is not None else None}
    out_dir = router_dir(rc)
    main = process_rank() == 0  # several ranks train the router together; rank 0 writes the files
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in list(out_dir.glob("*.pt")) + list((out_dir / "history").glob("*.json")):
            stale.unlink()  # routers of an earlier sweep must not show up in the evaluation
    summaries = []
    for i, run in enumerate(runs):
        router, summ = train_router(run, env, probs, rc.router, scorer, rc.router.checkpoint_dir, rc.seed,
                                    log=log, fingerprints=fps, key_parts=key_parts)
        history = summ.pop("history")
        if main:
            save_router(router, out_dir / f"{run.tag}.pt",
                        meta={"tag": run.tag, "process_weight": run.process_weight, "cost_weight": run.cost_weight})
            write_json(out_dir / "history" / f"{run.tag}.json", history)
        summaries.append(summ)
    out = {
        "runs": summaries,
        "judge_calls": len(scorer.cache) if scorer else 0,
        "judge_failures": scorer.failures if scorer else 0,
        "step_cache_hits": env.cache.hits, "step_cache_misses": env.cache.misses,
        "duration_s": time.perf_counter() - t0,
    }
    if main:
        write_json(router_dir(rc) / "summary.json", out)
    return out


# ----------------------------------------------------------------------------------------------------------------
# eval


def eval_dir(rc: RoRoConfig) -> Path:
    return Path(rc.out_dir) / "eval"


def anchor_rows(env, probs: list[Problem]) -> list[dict]:
    """The all-SLM and all-LRM rows (the ends of every accuracy-vs-cost curve)."""
    from rubricflow.methods.roro.evaluate import summarize
    from rubricflow.methods.roro.routing import ConstantPolicy

    all_lrm_trajs = env.rollout(probs, ConstantPolicy(1))
    all_lrm = {t.problem_id: t.lrm_tokens for t in all_lrm_trajs}
    return [summarize("all-slm", None, env.rollout(probs, ConstantPolicy(0)), all_lrm),
            summarize("all-lrm", None, all_lrm_trajs, all_lrm)]


def baseline_rows(rc: RoRoConfig, env, test: list[Problem], all_lrm: dict[str, int],
                  methods=("threshold", "random"), seed: int | None = None) -> list[dict]:
    """The threshold and random baselines' curve points on ``test`` (random routers seeded from ``seed``, default
    ``rc.eval.seed``)."""
    from rubricflow.methods.roro.evaluate import summarize
    from rubricflow.methods.roro.routing import RandomPolicy, ThresholdPolicy

    ec = rc.eval
    seed = ec.seed if seed is None else seed
    rows = []
    if "threshold" in methods:
        for th in ec.thresholds:
            rows.append(summarize("threshold", th, env.rollout(test, ThresholdPolicy(th)), all_lrm))
    if "random" in methods:
        for i, rate in enumerate(ec.random_rates):
            rows.append(summarize("random", rate, env.rollout(test, RandomPolicy(rate, seed=seed + i),
                                                               repeats=ec.random_repeats), all_lrm))
    return rows


def router_rows(rc: RoRoConfig, env, test: list[Problem], all_lrm: dict[str, int]) -> list[dict]:
    """The trained routers' curve points on ``test`` (greedy), one per router in ``router_dir``."""
    from models.router import load_router
    from rubricflow.methods.roro.evaluate import summarize
    from rubricflow.methods.roro.routing import RouterPolicy

    routers = sorted(router_dir(rc).glob("*.pt"))
    if not routers:
        raise FileNotFoundError(f"{router_dir(rc)}: no trained routers; run `rubricflow roro-router` first")
    rows = []
    for path in routers:
        router, meta = load_router(path)
        method = "roro" if meta["process_weight"] > 0 else "outcome-only"
        trajs = env.rollout(test, RouterPolicy(router, greedy=True, name=meta["tag"]))
        rows.append(summarize(method, meta["cost_weight"], trajs, all_lrm))
    return rows


def method_curves(rows: list[dict]) -> dict[str, dict]:
    """Per method with curve points: its points and ``evaluate.curve_metrics`` (AUC, accuracy at matched costs),
    anchored at the all-SLM and all-LRM rows."""
    from rubricflow.methods.roro.evaluate import curve_metrics

    anchors = [(0.0, r["accuracy"]) for r in rows if r["method"] == "all-slm"]
    anchors += [(1.0, r["accuracy"]) for r in rows if r["method"] == "all-lrm"]
    out = {}
    for m in ("roro", "outcome-only", "threshold", "random"):
        pts = [(min(1.0, r["lrm_cost_frac"]), r["accuracy"]) for r in rows if r["method"] == m]
        if pts:
            out[m] = {"points": pts, **curve_metrics(pts, anchors)}
    return out


def judge_test_accuracy(rc: RoRoConfig, env, test: list[Problem]) -> dict:
    """The kept Judge's pairwise accuracy on test pairs, overall and per category: every route of the first
    ``rc.eval.judge_problems`` problems of ``test`` (the evaluation split), paired by the training rules (``make_pairs``), each problem's rubric
    written by the kept Rubricor, scored as in training (``score_mode``). A final evaluation: nothing is chosen on
    it."""
    from models.loader import load_policy
    from rubricflow.methods.roro.pairs import dedupe
    from rubricflow.methods.roro.rubricor_judge import RubricLM, pairwise_accuracy, problem_views, write_rubrics

    probs = test[: rc.eval.judge_problems]
    if not probs:
        return {}
    rj = rc.rubricor_judge
    lms = {}
    for name, spec in (("judge", rj.judge), ("rubricor", rj.rubricor)):
        if not (Path(spec.path) / "config.json").exists():
            raise FileNotFoundError(f"roro.rubricor_judge.{name}.path={spec.path}: no {name}; run "
                                    "`rubricflow roro-rubricor-judge`")
        model, tok = load_policy(spec.path)
        lms[name] = RubricLM(model, tok, name, rj.batch_size, spec.max_new_tokens)
    trajs = dedupe(env.enumerate_routes(probs))
    pairs, counts = make_pairs(rc, trajs)
    views = problem_views(trajs)
    rubrics = write_rubrics(lms["rubricor"], views, sorted(views))
    acc = pairwise_accuracy(lms["judge"], rubrics, views, trajs, pairs, rj.score_mode, rj.score_samples,
                            rj.score_temperature, rj.seed + 7)
    return {**acc, "n_problems": len(probs), "pair_counts": counts}


def run_eval(rc: RoRoConfig, log: Log | None = None) -> dict:
    from rubricflow.methods.roro.evaluate import format_table, interpolate, summarize, write_curve
    from rubricflow.methods.roro.routing import ConstantPolicy, RandomPolicy

    t0 = time.perf_counter()
    test = problems(rc)[rc.eval.split]
    env = make_env(rc, cache_path(rc))
    ec = rc.eval
    rows = anchor_rows(env, test)
    all_lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(test, ConstantPolicy(1))}
    rows += baseline_rows(rc, env, test, all_lrm, ec.baselines)
    rows += router_rows(rc, env, test, all_lrm)
    anchors = [(r["lrm_cost_frac"], r["accuracy"]) for r in rows if r["method"] in ("all-slm", "all-lrm")]
    curve = {m: anchors + [(r["lrm_cost_frac"], r["accuracy"]) for r in rows if r["method"] == m]
             for m in ("outcome-only", "threshold", "random")}
    curves = method_curves(rows)
    matched = []
    for j, r in enumerate([r for r in rows if r["method"] == "roro"]):
        rnd = summarize("random-matched", round(r["lrm_call_rate"], 4),
                        env.rollout(test, RandomPolicy(r["lrm_call_rate"], seed=ec.seed + 1000 + j),
                                    repeats=ec.random_repeats), all_lrm)
        matched.append({
            "cost_weight": r["param"], "roro_accuracy": r["accuracy"], "roro_lrm_cost_frac": r["lrm_cost_frac"],
            "roro_lrm_tokens": r["lrm_tokens"],
            **{f"{m}_accuracy_at_cost": interpolate(c, r["lrm_cost_frac"]) for m, c in curve.items()
               if len(c) > len(anchors)},
            "random_matched_accuracy": rnd["accuracy"], "random_matched_lrm_cost_frac": rnd["lrm_cost_frac"],
        })
        rows.append(rnd)
    paths = write_curve([r for r in rows if r["method"] != "random-matched"], eval_dir(rc))
    table = format_table(rows)
    (eval_dir(rc) / "table.txt").write_text(table + "\n")
    main = next((m for m in matched if m["cost_weight"] == rc.router.cost_weight), matched[0] if matched else {})
    judge = judge_test_accuracy(rc, env, test) if "roro" in rc.router.methods else {}
    out = {
        "rows": rows, "matched": matched, "split": rc.eval.split, "n_test": len(test), "source": rc.task.source,
        "main_cost_weight": rc.router.cost_weight,
        "auc": {m: c["auc"] for m, c in curves.items()},
        "roro_minus_outcome_auc": (curves["roro"]["auc"] - curves["outcome-only"]["auc"])
        if {"roro", "outcome-only"} <= set(curves) else None,
        "roro_accuracy": main.get("roro_accuracy"), "roro_lrm_cost_frac": main.get("roro_lrm_cost_frac"),
        "outcome_only_accuracy_at_roro_cost": main.get("outcome-only_accuracy_at_cost"),
        "roro_minus_outcome_at_cost": (main["roro_accuracy"] - main["outcome-only_accuracy_at_cost"])
        if main.get("outcome-only_accuracy_at_cost") is not None else None,
        "judge_test": judge,
        "plots": {k: str(v) for k, v in paths.items()}, "duration_s": time.perf_counter() - t0,
    }
    write_json(eval_dir(rc) / "table.json", {"rows": rows, "matched": matched})
    return out
