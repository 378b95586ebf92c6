"""Router GRPO through the shared updater (``roro_router``): the router ``PolicyAdapter``, rollouts, rewards and the
runs of the cost-weight sweep.

An episode is one routed solution: ``prompt`` = the router states it saw (one 5-vector per step), ``actions`` =
its decisions (0 keep SLM, 1 call LRM), ``group`` = the problem (``group_size`` rollouts per problem are compared).
Reward of a trajectory (the same for each of its decisions, GRPO's sequence-level advantage)::

    reward = 1[final answer right] + process_weight * judge_score * 1[finished]
             - cost_weight * lrm_tokens / all_lrm_tokens

``judge_score`` is the Judge's process score under the Rubricor's rubric for the problem (``score_mode``: by default
the mean over sampled judgments of ``sum weight * score * 1[satisfied]``, the paper's score), or, for the
``oracle-process`` routers, the oracle's (:func:`oracle_process_score`: read off the checked steps, the upper bound
on what any learned Judge could give); a failed judgment
makes the reward *missing* (NaN: the updater leaves the episode out), never 0. A route cut off before its final
answer (``finished`` false) earns no process credit, whatever the Judge says: the process term must not pay for a
solution that skipped its end. ``all_lrm_tokens`` is the LRM cost of routing every step of that problem to the LRM,
so the cost term is a fraction in [0, 1]. ``process_weight = 0`` is the outcome-only GRPO baseline (no Judge calls).

Under GRPO's group centring (a group = the rollouts of one problem) every term varies within a group (outcome,
routes' process scores, cost), so none of them vanishes; a wrong route never out-earns a right one of the same cost
while ``process_weight`` < 1 (the process score is in [0, 1]: weights sum to 1, scores in [0, 1]).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from models.generation.zero3 import zero3_world
from rubricflow.grpo.checkpoint import MetricsHistory, code_hash, content_hash
from rubricflow.grpo.engine import make_engine
from rubricflow.grpo.export import full_state_dict
from rubricflow.pipeline.progress import progress
from rubricflow.grpo.trainer import GRPOTrainer
from rubricflow.grpo.types import Episode
from rubricflow.grpo.updater import GRPOUpdater
from rubricflow.util.io import write_json
from rubricflow.methods.roro.config import CHECKED_ROUTERS, TRAINED_ROUTERS, RoRoConfig
from rubricflow.methods.roro.judge.scoring import process_scores
from rubricflow.methods.roro.paths import cache_path, router_dir, rubrics_path
from rubricflow.methods.roro.env.problems import problems as problem_sets
from rubricflow.methods.roro.env.oracles import oracle_process_score  # noqa: F401 (re-exported)
from rubricflow.methods.roro.router.dose import dose_scorers
from rubricflow.methods.roro.router.imitate import threshold_start
from rubricflow.methods.roro.router.mlp import RouterMLP, save_router
from rubricflow.methods.roro.env.routing import ConstantPolicy, RouterPolicy, RoutingEnv, Trajectory, model_fingerprint
from rubricflow.methods.roro.judge.lm import load_rubric_lm
from rubricflow.methods.roro.judge.rubricor import load_rubrics
from rubricflow.methods.roro.env.step_models import make_env
from rubricflow.methods.roro.env.task import Problem
from rubricflow.training.ranks import process_rank


class RouterAdapter:
    """``PolicyAdapter`` for ``rubricflow.methods.roro.router.mlp.RouterMLP``: log-prob of each recorded decision."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def action_logprobs(self, module: torch.nn.Module, episodes: list[Episode], with_entropy: bool = False):
        B = len(episodes)
        T = max(1, max(len(e.actions) for e in episodes))
        dim = module.state_dim
        states = torch.zeros((B, T, dim), dtype=torch.float32)
        actions = torch.zeros((B, T), dtype=torch.long)
        mask = torch.zeros((B, T), dtype=torch.float32)
        for i, e in enumerate(episodes):
            n = len(e.actions)
            if len(e.prompt) != n:
                raise ValueError(f"episode {i}: {len(e.prompt)} states for {n} actions (one state per decision)")
            if n:
                states[i, :n] = torch.as_tensor(e.prompt, dtype=torch.float32)
                actions[i, :n] = torch.as_tensor(e.actions, dtype=torch.long)
                mask[i, :n] = 1.0
        all_logp = module.log_probs(states)  # [B, T, A]
        logp = all_logp.gather(-1, actions.unsqueeze(-1)).squeeze(-1) * mask
        if with_entropy:
            with torch.no_grad():
                ent = -(all_logp.exp() * all_logp).sum(-1) * mask
            return logp, mask, ent
        return logp, mask


# ----------------------------------------------------------------------------------------------------------------
# Process scores (Judge under the Rubricor's rubric), cached per distinct trajectory


class ProcessScorer:
    """Judge process scores for trajectories, memoised by (problem, solution); None = the judgment failed."""

    def __init__(self, judge, rubrics: dict, questions: dict[str, str], mode: str = "sampled", samples: int = 4,
                 temperature: float = 1.0, seed: int = 0):
        self.judge, self.rubrics, self.questions = judge, rubrics, questions
        self.mode, self.samples, self.temperature, self.seed = mode, samples, temperature, seed
        self.cache: dict[tuple, float | None] = {}
        self.failures = 0

    def scores(self, trajs: list[Trajectory]) -> list[float | None]:
        todo, seen = [], set()
        for t in trajs:
            k = t.key()
            if k not in self.cache and k not in seen:
                seen.add(k)
                todo.append(t)
        items, keys = [], []
        for t in todo:
            r = self.rubrics.get(t.problem_id)
            if r is None:
                raise KeyError(f"no rubric for problem {t.problem_id} (run the rubricor-judge stage on it)")
            if r.failed:
                self.cache[t.key()] = None  # the Rubricor's output did not parse: no process score
                continue
            items.append((self.questions[t.problem_id], r.value, t))
            keys.append(t.key())
        if items:
            # the generator reseeds torch's global RNG; fork it so the router's rollout sampling stream (which the
            # GRPO checkpoints save and restore) is not reset at every Judge call
            with torch.random.fork_rng():
                scored = process_scores(self.judge, items, self.mode, self.samples, self.temperature, self.seed)
            for k, sc in zip(keys, scored):
                self.cache[k] = sc
                self.failures += sc is None
        return [self.cache[t.key()] for t in trajs]


class OracleScorer:
    """``ProcessScorer``'s interface over :func:`oracle_process_score` (no model, nothing fails; the score is a
    cheap function of the route, so nothing is cached)."""

    failures = 0

    def scores(self, trajs: list[Trajectory]) -> list[float | None]:
        return [oracle_process_score(t) for t in trajs]


# ----------------------------------------------------------------------------------------------------------------
# Rewards


def trajectory_reward(outcome: bool, process: float | None, lrm_tokens: int, all_lrm_tokens: int,
                      process_weight: float, cost_weight: float, finished: bool = True) -> float:
    """``outcome + process_weight * process * finished - cost_weight * lrm_tokens / all_lrm_tokens`` (NaN when the
    process score is needed and missing). Raises ValueError for a process score outside [0, 1]."""
    cost = lrm_tokens / all_lrm_tokens if all_lrm_tokens > 0 else 0.0
    r = float(outcome) - cost_weight * cost
    if process_weight > 0:
        if process is None:
            return float("nan")
        if not -1e-9 <= process <= 1.0 + 1e-9:  # weights sum to 1, scores in [0, 1]
            raise ValueError(f"process score {process!r}: expected a number in [0, 1]")
        if finished:
            r += process_weight * process
    return r


@dataclass
class RouterRun:
    tag: str
    process_weight: float
    cost_weight: float
    method: str = "roro"  # roro (the Judge's process score) | oracle-process | outcome-only


TRAINING_CODE = ("rubricflow.methods.roro", "rubricflow.grpo")


def resume_parts(run: RouterRun, rcfg, seed: int, fingerprints: list[str], problems: list[Problem],
                 extra: dict | None = None) -> dict:
    """The resume key's parts (``rubricflow.grpo.checkpoint.resume_key``): the run (tag, weights), the seed, the
    router section (without its operational, output and resumable fields: ``Section``; and without the cost weights,
    which ``run`` carries), the model fingerprints (step models, Judge,
    rubrics), the training problems, the training code, and ``extra`` (the task / steps / Judge-scoring sections
    the caller built the environment and the scorer from)."""
    router = {k: v for k, v in rcfg.resume_dump().items() if k not in ("sweep_cost_weights", "cost_weight")}
    return {"run": [run.tag, run.process_weight, run.cost_weight, run.method], "seed": seed, "router": router,
            "models": list(fingerprints), "problems": [asdict(p) for p in problems],
            "code": code_hash(*TRAINING_CODE), **(extra or {})}


def train_router(
    run: RouterRun,
    env: RoutingEnv,
    problems: list[Problem],
    rcfg,
    scorer: ProcessScorer | None,
    checkpoint_dir: str | Path,
    seed: int,
    log=None,
    fingerprints: list[str] | None = None,
    key_parts: dict | None = None,
    start_thresholds: Sequence[float] = (),
    prescore: bool = True,
):
    """GRPO-train a fresh router (or resume its checkpoint, if it was trained on the same inputs: see
    :func:`resume_parts`; ``key_parts`` adds the caller's parts); returns ``(router, summary)``, the router with
    its full weights on every rank (call it on every rank of a multi-process run). Under ``rcfg.start: threshold``
    the fresh router is first cloned to the best of ``start_thresholds`` on ``problems`` (``router.imitate``)."""
    if run.process_weight > 0 and scorer is None:
        raise ValueError(f"router run {run.tag}: process_weight > 0 needs the Judge (scorer)")
    g = rcfg.grpo
    torch.manual_seed(seed)
    router = RouterMLP(hidden=rcfg.hidden, init_call_bias=rcfg.init_call_bias)
    start = None
    if rcfg.start == "threshold":
        with torch.random.fork_rng():  # the GRPO run's random stream is the coin start's
            lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(problems, ConstantPolicy(1))}
            start = threshold_start(router, env, problems, start_thresholds, run.cost_weight, lrm, rcfg.start_steps,
                                    rcfg.start_lr, seed, rcfg.start_explore)
    # Under ZeRO-3 the router's parameters are partitioned over the ranks, and each rank routes a different number
    # of steps (a forward per step): rollouts sample from a full copy, refreshed every step (one collective gather,
    # the same on every rank), and the trained router is returned consolidated.
    plain = copy.deepcopy(router)
    engine = make_engine(router, g)
    partitioned = zero3_world(engine.module) > 1
    updater = GRPOUpdater(RouterAdapter(router), engine, g)
    all_lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(problems, ConstantPolicy(1))}
    if run.process_weight > 0 and prescore:
        # every route of every training problem: the step cache then holds the whole decision tree and the Judge
        # scores all distinct trajectories in a few big batches, so the GRPO steps below are lookups (not where the
        # chains are too long to enumerate: roro.trajectories.enumerate_routes off; the rollouts are scored as they
        # come)
        scorer.scores(env.enumerate_routes(problems))
    policy = RouterPolicy(plain if partitioned else router, greedy=False, name=run.tag)  # torch's global RNG

    def rollout_fn(step: int, batch: list[Problem]):
        if partitioned:
            plain.load_state_dict(full_state_dict(engine.module, all_ranks=True))
        trajs = env.rollout(batch, policy, repeats=g.group_size)
        proc = scorer.scores(trajs) if run.process_weight > 0 else [None] * len(trajs)
        eps, outs, costs, pvals = [], [], [], []
        for t, pv in zip(trajs, proc):
            r = trajectory_reward(t.outcome, pv, t.lrm_tokens, all_lrm[t.problem_id], run.process_weight,
                                  run.cost_weight, t.finished)
            eps.append(Episode(prompt=t.states, actions=t.actions, reward=r, group=t.problem_id, role="router"))
            outs.append(float(t.outcome))
            costs.append(t.lrm_tokens / max(1, all_lrm[t.problem_id]))
            if pv is not None:
                pvals.append(pv)
        m = {"accuracy": sum(outs) / len(outs), "lrm_cost_frac": sum(costs) / len(costs),
             "process_mean": sum(pvals) / len(pvals) if pvals else float("nan"),
             "call_rate": sum(sum(t.actions) for t in trajs) / max(1, sum(len(t.actions) for t in trajs))}
        return eps, m

    hist = MetricsHistory()

    def log_fn(step: int, metrics: dict) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}}
        hist.rows.append(row)
        if log is not None:
            log(run.tag, row)

    t0 = time.perf_counter()
    ckpt = Path(checkpoint_dir) / f"{run.tag}-seed{seed}"
    parts = resume_parts(run, rcfg, seed, list(fingerprints or []), problems,
                         {**(key_parts or {}), **({"start_thresholds": list(start_thresholds)} if start else {})})
    trainer = GRPOTrainer(updater, problems, rollout_fn, g, ckpt, log_fn=log_fn, stateful={"history": hist},
                          key_parts=parts)
    res = trainer.run()
    if partitioned:
        plain.load_state_dict(full_state_dict(engine.module, all_ranks=True))
        router = plain
    history = hist.rows
    tail = history[-5:] or [{}]
    summary = {
        "tag": run.tag, "process_weight": run.process_weight, "cost_weight": run.cost_weight,
        "steps": res["steps"], "resumed_from": res["resumed_from"],
        "resume_refused": res["resume_refused"], "corrupt_checkpoints": res["corrupt_checkpoints"],
        "train_s": time.perf_counter() - t0,
        "final_train_accuracy": _mean(r.get("accuracy") for r in tail),
        "final_train_cost_frac": _mean(r.get("lrm_cost_frac") for r in tail),
        "final_reward": _mean(r.get("reward_mean/router") for r in tail),
        "missing_rewards": sum(r.get("n_missing", 0.0) for r in history),
        **({"start": start} if start else {}),
        "history": history,
    }
    return router.eval(), summary


def _mean(xs) -> float:
    v = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(v) / len(v) if v else float("nan")


# ----------------------------------------------------------------------------------------------------------------
# The stage


RUN_PREFIX = {"roro": "roro", "oracle-process": "oracle", "outcome-only": "outcome", "oracle-noisy": "noisy",
              "exact-reader": "reader"}


def run_prefix(method: str, rcfg) -> str:
    """A run's tag prefix: the method's, with the target accuracy for ``oracle-noisy`` (``noisy0.8``)."""
    if method == "oracle-noisy":
        return f"{RUN_PREFIX[method]}{rcfg.noisy_target_acc:g}"
    return RUN_PREFIX[method]


def router_runs(rc: RoRoConfig) -> list[RouterRun]:
    """RoRo (outcome + Judge's process - cost), oracle-process (outcome + oracle process - cost), the dose-response
    scorers (oracle-noisy: the oracle corrupted to a target val process-pair accuracy; exact-reader: an exact reader
    of the warm Rubricor's rubrics) and outcome-only (outcome - cost) routers at every swept cost weight (the main
    ``cost_weight`` included)."""
    weights = sorted(set(rc.router.sweep_cost_weights) | {rc.router.cost_weight})
    runs = []
    for m in TRAINED_ROUTERS:
        if m in rc.router.methods:
            pw = 0.0 if m == "outcome-only" else rc.router.process_weight
            runs += [RouterRun(f"{run_prefix(m, rc.router)}-cw{w:g}", pw, w, m) for w in weights]
    return runs


def load_judge_scorer(rc: RoRoConfig, probs: list[Problem]) -> ProcessScorer:
    """The kept Judge scoring under the kept Rubricor's stored rubrics, as the alternation scored (``score_mode``)."""
    rj = rc.rubricor_judge
    judge = load_rubric_lm(rj.judge, "judge", rj.batch_size, rj.judge_reads)
    if not rubrics_path(rc).exists():
        raise FileNotFoundError(f"{rubrics_path(rc)}: no rubrics; run `rubricflow roro-rubricor-judge`")
    return ProcessScorer(judge, load_rubrics(rubrics_path(rc)), {p.id: p.question for p in probs}, rj.score_mode,
                         rj.score_samples, rj.score_temperature, rj.seed)


def run_router(rc: RoRoConfig, log: Callable[[str, dict], None] | None = None) -> dict:
    """Train every router of :func:`router_runs` on the train problems and save each (rank 0) with its history;
    returns the runs' summaries, the Judge calls and the step-cache use."""
    t0 = time.perf_counter()
    probs = problem_sets(rc)["train"]
    env = make_env(rc, cache_path(rc))
    runs = router_runs(rc)
    checked = sorted({r.method for r in runs} & set(CHECKED_ROUTERS))
    if checked and not all(p.checkable for p in probs):
        raise ValueError(f"roro.router.methods: {', '.join(checked)} read the checked steps; the training problems "
                         "have no step structure (roro.task.source)")
    judged = any(r.method == "roro" and r.process_weight > 0 for r in runs)
    scorer = load_judge_scorer(rc, probs) if judged else None
    scorers, dose = dose_scorers(rc, {r.method for r in runs}, env)
    scorers["oracle-process"] = OracleScorer()
    fps = [env.fp["SLM"], env.fp["LRM"]]
    if scorer is not None:
        fps += [model_fingerprint("judge", rc.rubricor_judge.judge.path), content_hash(rubrics_path(rc))]
    # the sections the environment and the scorer were built from (the models themselves are in ``fps``)
    key_parts = {"task": rc.task.model_dump(mode="json"), "steps": rc.steps.model_dump(mode="json"),
                 "rubricor_judge": rc.rubricor_judge.model_dump(mode="json", exclude={"judge", "rubricor"})
                 if scorer is not None else None}
    if dose:  # the calibrated noise scale and the reader's rubrics: what the dose scorers were built from
        key_parts["dose"] = {m: {k: v for k, v in d.items() if k != "val_process_acc"} for m, d in dose.items()}
        if "exact-reader" in dose:  # the reader reads the rubrics as the Judge would (judge_reads)
            key_parts["dose"]["judge_reads"] = rc.rubricor_judge.judge_reads
    out_dir = router_dir(rc)
    main = process_rank() == 0  # several ranks train the router together; rank 0 writes the files
    if main:
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in list(out_dir.glob("*.pt")) + list((out_dir / "history").glob("*.json")):
            stale.unlink()  # routers of an earlier sweep must not show up in the evaluation
    summaries = []
    with progress("roro router", total=len(runs), show=main) as bar:
        for i, run in enumerate(runs, 1):
            router, summ = train_router(run, env, probs, rc.router, scorers.get(run.method, scorer),
                                        rc.router.checkpoint_dir, rc.seed, log=log, fingerprints=fps,
                                        key_parts=key_parts, start_thresholds=rc.eval.thresholds,
                                        prescore=rc.trajectories.enumerate_routes)
            history = summ.pop("history")
            if main:
                save_router(router, out_dir / f"{run.tag}.pt",
                            meta={"tag": run.tag, "method": run.method, "process_weight": run.process_weight,
                                  "cost_weight": run.cost_weight})
                write_json(out_dir / "history" / f"{run.tag}.json", history)
                bar.advance()
                print(f"roro router: {i}/{len(runs)} {run.tag}: {summ['steps']} steps in {summ['train_s']:.0f} s, "
                      f"last steps' train accuracy {summ['final_train_accuracy']:.3f} at LRM cost "
                      f"{summ['final_train_cost_frac']:.3f}", flush=True)
            summaries.append(summ)
    out = {
        "runs": summaries,
        "judge_calls": len(scorer.cache) if scorer else 0,
        "judge_failures": scorer.failures if scorer else 0,
        "step_cache_hits": env.cache.hits, "step_cache_misses": env.cache.misses,
        "dose": {m: {k: v for k, v in d.items() if k != "rubrics"} for m, d in dose.items()},
        "duration_s": time.perf_counter() - t0,
    }
    if main:
        write_json(router_dir(rc) / "summary.json", out)
    return out
