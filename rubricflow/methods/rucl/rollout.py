"""RuCL rollouts: sample a group of responses per prompt, score them with the ``RubricScorer`` (the one the TRL and
verl integrations use), and turn the reward breakdowns into episodes.

One call per training step (the ``rollout_fn`` of ``GRPOTrainer``)::

    lambda_t          = curriculum.lambda_t                       (the weight decided by the previous steps)
    responses         = generator.generate(prompts, n=group_size)
    reward breakdowns = scorer.score(items)                       (judge call skipped in reward mode "outcome")
    scorer.step()     -> curriculum.update(batch mean S_F)        (averaged over ranks first)

Every number the method is judged by is returned as a metric: total reward and each component, lambda_t, S_F,
S_A, outcome accuracy, judge failures / repairs, completion length, rollout tokens/s, and the judge tokens of the
step (``judge/prompt_tokens``, ``judge/completion_tokens``: counted from the server's answers, or for the
programmatic judge an estimate, ``judge/tokens_estimated = 1``), the completions judged on the advanced tier
(``judge/advanced_judged``; a monitoring sample while lambda_t = 0, ``rucl.reward.advanced_monitor``) and the
reward-hacking monitor (``monitor/*``, rubricflow.methods.rucl.monitor).

The call is two phases (``rubricflow.grpo.trainer.PipelinedRollout``): :meth:`RuCLRollout.start` generates and, with
a server-backed judge and ``grpo.stream_rewards``, sends each group to the judge as soon as the generation batch that
completes it is done (``rubricflow.judge.stream.JudgeStream``); :meth:`RuCLRollout.finish` gathers the judgments and
computes the rewards. Streamed or not, the judgments, rewards and episodes are the same. Per-step judge tokens are the
difference of the judge's counter between two ``finish`` calls (under one-step-off pipelining, answers of the next
batch that arrived before this ``finish`` count to this step).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from models.processor import text_tokenizer
from rubricflow.evaluation.heldout import policy_requests
from rubricflow.grpo.pipeline import generate_groups
from rubricflow.grpo.types import Episode
from rubricflow.judge.protocol import JudgeBackend, Rubric
from rubricflow.judge.stream import JudgeStream, server_backed
from rubricflow.judge.usage import usage_of
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
from rubricflow.methods.rucl.monitor import step_monitor
from rubricflow.methods.rucl.scoring import Item, RubricScorer


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


class RuCLRollout:
    def __init__(
        self,
        generator,
        processor,
        judge: JudgeBackend | None,
        rubrics: list[Rubric],
        scheduler: CurriculumScheduler,
        rcfg: RuCLConfig,
        data_dir: str | Path,
        engine=None,
        sync_policy=None,
    ):
        """``sync_policy``: makes ``generator`` generate with the trained policy's current weights (called at the
        start of every sequential step, and by the trainer between steps under one-step-off pipelining)."""
        try:
            self.scorer = RubricScorer(judge, rubrics, scheduler, rcfg.reward.alpha, rcfg.reward.mode,
                                       rcfg.reward.advanced_monitor, rcfg.reward.gate)
        except ValueError as e:
            raise ValueError(f"rucl.reward.mode: {e} (rucl.tiers_path names the tiers)") from None
        self.gen, self.processor, self.judge = generator, processor, judge
        self.scheduler, self.rcfg, self.engine = scheduler, rcfg, engine
        self.data_dir = Path(data_dir)
        tok = text_tokenizer(processor)
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.last: dict[str, Any] = {}  # the last step's per-sample details (for reports and tests)
        self._sync = sync_policy
        streams = rcfg.grpo.stream_rewards and rcfg.reward.mode != "outcome" and server_backed(judge)
        self.stream = JudgeStream(judge) if streams else None
        self.usage = usage_of(judge) if judge is not None else None
        self._usage_mark = self.usage.snapshot() if self.usage is not None else (0, 0)

    def sync_policy(self) -> None:
        if self._sync is not None:
            self._sync()

    def close(self) -> None:
        """Stop the judge stream (cancels judgments still in flight)."""
        if self.stream is not None:
            self.stream.close()

    def _requests(self, samples) -> list:
        return policy_requests(self.processor, self.data_dir, samples)

    def _reduce_s_f(self, s_f: float) -> float:
        """Every rank feeds the scheduler the same score: the mean over the ranks that have one (a rank whose
        judgments all failed has none)."""
        if self.engine is None or getattr(self.engine, "world_size", 1) <= 1:
            return s_f
        mine = {"s_f": s_f} if s_f is not None and not math.isnan(s_f) else {}
        return self.engine.all_reduce_mean(mine).get("s_f", float("nan"))

    def __call__(self, step: int, samples: list) -> tuple[list[Episode], dict[str, float]]:
        """One sequential step: sync the generating policy, generate, score, return episodes and metrics."""
        self.sync_policy()
        return self.finish(step, self.start(step, samples))

    def _item(self, root: Path, step: int, k: int, s, c) -> Item:
        return Item(sample_id=f"{s.id}#s{step}#{k}", question=s.question, response=c.text, answer=s.answer,
                    answer_type=s.answer_type, facts=s.facts, images=[str(root / p) for p in s.images])

    def start(self, step: int, samples: list) -> dict[str, Any]:
        """Generate the step's groups; with a judge stream, send each group to the judge as it completes."""
        g = self.rcfg.grpo
        reqs = self._requests(samples)
        root = self.data_dir.resolve()
        n = g.group_size
        futures: list = []
        monitored = None
        if self.stream is not None:
            monitored = self.scorer.monitor_ids([f"{samples[k // n].id}#s{step}#{k}"
                                                 for k in range(len(samples) * n)])
        outs: list = [None] * len(samples)
        t0 = time.perf_counter()
        for i, cs in generate_groups(self.gen, reqs, n=n, max_new_tokens=g.max_new_tokens, temperature=g.temperature,
                                     top_p=g.top_p):
            outs[i] = cs
            if self.stream is not None:
                group = [self._item(root, step, i * n + j, samples[i], c) for j, c in enumerate(cs)]
                futures.append(self.scorer.submit(group, self.stream, monitored))
        gen_s = time.perf_counter() - t0
        return {"samples": samples, "reqs": reqs, "outs": outs, "futures": futures, "gen_s": gen_s, "t_gen_end":
                time.perf_counter()}

    def finish(self, step: int, handle: dict[str, Any]) -> tuple[list[Episode], dict[str, float]]:
        """Gather (or make) the judgments of a started batch and turn them into episodes and metrics."""
        samples, reqs, outs, futures = handle["samples"], handle["reqs"], handle["outs"], handle["futures"]
        lam = float(self.scheduler.lambda_t)
        gen_s = handle["gen_s"]
        flat = [(s, r, c) for s, r, cs in zip(samples, reqs, outs) for c in cs]
        t1 = time.perf_counter()
        root = self.data_dir.resolve()
        items = [self._item(root, step, k, s, c) for k, (s, _, c) in enumerate(flat)]
        if futures:
            try:
                judgments = [j for f in futures for j in f.result()]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
            breakdowns = self.scorer.finish(items, judgments)
        else:
            breakdowns = self.scorer.score(items)
        judgments = self.scorer.last_judgments
        judge_s = time.perf_counter() - t1
        episodes = []
        for (s, r, c), b in zip(flat, breakdowns):
            actions = list(c.token_ids) + ([self.eos_id] if c.finished else [])
            episodes.append(
                Episode({"text": r.prompt, "images": r.images}, actions, b.total, s.id, meta={"text": c.text})
            )
        if self.rcfg.reward.shuffle_control:
            # Control: the same rewards, assigned to random episodes of the batch (seeded per step).
            perm = torch.randperm(len(episodes), generator=torch.Generator().manual_seed(self.rcfg.grpo.seed + step))
            rewards = [episodes[i].reward for i in perm.tolist()]
            for e, r in zip(episodes, rewards):
                e.reward = r
        summ = self.scorer.step(self._reduce_s_f)
        n_tok = sum(len(c.token_ids) for _, _, c in flat)
        statuses = [j.status for j in judgments if j is not None]
        metrics = {
            "reward/total": summ["reward"],
            "reward/outcome": summ["outcome"],
            "reward/rubric": summ["rubric"],
            "reward/s_f": summ["s_f"],
            "reward/s_a": summ["s_a"],
            "curriculum/lambda_t": lam,
            "curriculum/lambda_next": summ["lambda_next"],
            "curriculum/s_f_batch": summ["s_f_batch"],
            "outcome_accuracy": summ["outcome"],
            # a judgment that left out a requested rubric counts as a failure (as in the failure budget)
            "judge/failures": float(sum(j.counts_as_failed for j in judgments if j is not None)),
            "judge/repaired": float(statuses.count("repaired")),
            "judge/time_s": judge_s,  # waiting for (or making) the judgments after generation ended
            "judge/advanced_judged": summ["advanced_judged"],
            "reward/n_missing": summ["n_missing"],
            "rollout/completion_len": n_tok / max(len(flat), 1),
            "rollout/finished_frac": sum(c.finished for _, _, c in flat) / max(len(flat), 1),
            "rollout/tokens_per_s": n_tok / gen_s if gen_s > 0 else 0.0,
            "rollout/gen_time_s": gen_s,
        }
        # the reward-hacking monitor (rubricflow.methods.rucl.monitor): what the rubric term paid for, against the
        # independent answer-relevant readout
        metrics.update(step_monitor([(s.facts, c.text, b) for (s, _, c), b in zip(flat, breakdowns)],
                                    self.rcfg.reward.alpha))
        if self.usage is not None:
            (p0, c0), (p1, c1) = self._usage_mark, self.usage.snapshot()
            self._usage_mark = (p1, c1)
            metrics["judge/prompt_tokens"] = float(p1 - p0)
            metrics["judge/completion_tokens"] = float(c1 - c0)
            metrics["judge/tokens_estimated"] = float(self.usage.estimated)
        self.last = {
            "step": step,
            "transition_event": summ["transition"],
            "samples": [
                {"id": s.id, "response": c.text, **{k: _finite(v) for k, v in b.to_dict().items() if k != "reason"}}
                for (s, _, c), b in zip(flat, breakdowns)
            ],
        }
        return episodes, metrics
