"""RuCL rollouts: sample a group of responses per prompt, judge them, turn judgments into rewards and episodes.

One call per training step (the ``rollout_fn`` of ``GRPOTrainer``)::

    lambda_t          = curriculum.lambda_t                       (the weight decided by the previous steps)
    responses         = generator.generate(prompts, n=group_size)
    judgments         = judge.judge(requests)                     (skipped in reward mode "outcome")
    reward breakdowns = compute_reward(outcome, judgment, tiers, lambda_t, alpha, mode)
    curriculum.update(batch mean S_F)                             (averaged over ranks first)

Every number the method is judged by is returned as a metric: total reward and each component, lambda_t, S_F,
S_A, outcome accuracy, judge failures / repairs, completion length, rollout tokens/s.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from models.processor import text_tokenizer
from rubricflow.answers import outcome_score
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
from rubricflow.grpo.types import Episode
from rubricflow.judge.protocol import JudgeBackend, JudgeRequest, Rubric
from rubricflow.methods.rucl.rewards import batch_summary, compute_reward, tier_map
from rubricflow.methods.rucl.config import RuCLConfig


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
    ):
        mode = rcfg.reward.mode
        if mode != "outcome" and judge is None:
            raise ValueError(f"rucl.reward.mode={mode!r} needs a judge (only 'outcome' runs without one)")
        if mode != "outcome" and not rubrics:
            raise ValueError(f"rucl.reward.mode={mode!r} needs the tiered rubrics (rucl.tiers_path), got none")
        self.gen, self.processor, self.judge = generator, processor, judge
        self.rubrics = list(rubrics)
        self.tiers = tier_map(self.rubrics) if self.rubrics else {}
        self.scheduler, self.rcfg, self.engine = scheduler, rcfg, engine
        self.data_dir = Path(data_dir)
        tok = text_tokenizer(processor)
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.last: dict[str, Any] = {}  # the last step's per-sample details (for reports and tests)

    def _requests(self, samples) -> list:
        from rubricflow.evaluation import policy_requests

        return policy_requests(self.processor, self.data_dir, samples)

    def __call__(self, step: int, samples: list) -> tuple[list[Episode], dict[str, float]]:
        g = self.rcfg.grpo
        lam = float(self.scheduler.lambda_t)
        reqs = self._requests(samples)
        t0 = time.perf_counter()
        outs = self.gen.generate(
            reqs, n=g.group_size, max_new_tokens=g.max_new_tokens, temperature=g.temperature, top_p=g.top_p
        )
        gen_s = time.perf_counter() - t0
        flat = [(s, r, c) for s, r, cs in zip(samples, reqs, outs) for c in cs]
        t1 = time.perf_counter()
        judgments: list = [None] * len(flat)
        if self.rcfg.reward.mode != "outcome":
            root = self.data_dir.resolve()
            jreqs = [
                JudgeRequest(
                    sample_id=f"{s.id}#s{step}#{k}",
                    question=s.question,
                    response=c.text,
                    rubrics=self.rubrics,
                    images=[str(root / p) for p in s.images],
                    facts=s.facts,
                    answer=s.answer,
                )
                for k, (s, _, c) in enumerate(flat)
            ]
            judgments = self.judge.judge(jreqs)
            if len(judgments) != len(jreqs):
                raise RuntimeError(f"judge returned {len(judgments)} judgments for {len(jreqs)} requests")
        judge_s = time.perf_counter() - t1
        a = self.rcfg.reward
        breakdowns, episodes = [], []
        for (s, r, c), j in zip(flat, judgments):
            b = compute_reward(outcome_score(c.text, s.answer, s.answer_type), j, self.tiers, lam, a.alpha, a.mode)
            breakdowns.append(b)
            actions = list(c.token_ids) + ([self.eos_id] if c.finished else [])
            episodes.append(
                Episode({"text": r.prompt, "images": r.images}, actions, b.total, s.id, meta={"text": c.text})
            )
        if a.shuffle_control:
            # Control: the same rewards, assigned to random episodes of the batch (seeded per step).
            perm = torch.randperm(len(episodes), generator=torch.Generator().manual_seed(self.rcfg.grpo.seed + step))
            rewards = [episodes[i].reward for i in perm.tolist()]
            for e, r in zip(episodes, rewards):
                e.reward = r
        summ = batch_summary(breakdowns)
        s_f = summ["s_f"]
        if self.engine is not None and getattr(self.engine, "world_size", 1) > 1:
            # every rank feeds the scheduler the same score: the mean over the ranks that have one (a rank whose
            # judgments all failed has none)
            mine = {"s_f": s_f} if s_f is not None and not math.isnan(s_f) else {}
            s_f = self.engine.all_reduce_mean(mine).get("s_f", float("nan"))
        transitioned_before = self.scheduler.transitioned
        next_lam = self.scheduler.update(s_f)
        n_tok = sum(len(c.token_ids) for _, _, c in flat)
        statuses = [j.status for j in judgments if j is not None]
        metrics = {
            "reward/total": summ["reward"],
            "reward/outcome": summ["outcome"],
            "reward/rubric": summ["rubric"],
            "reward/s_f": summ["s_f"],
            "reward/s_a": summ["s_a"],
            "curriculum/lambda_t": lam,
            "curriculum/lambda_next": next_lam,
            "curriculum/s_f_batch": s_f,
            "outcome_accuracy": summ["outcome"],
            "judge/failures": float(statuses.count("failed")),
            "judge/repaired": float(statuses.count("repaired")),
            "judge/time_s": judge_s,
            "reward/n_missing": summ["n_missing"],
            "rollout/completion_len": n_tok / max(len(flat), 1),
            "rollout/finished_frac": sum(c.finished for _, _, c in flat) / max(len(flat), 1),
            "rollout/tokens_per_s": n_tok / gen_s if gen_s > 0 else 0.0,
            "rollout/gen_time_s": gen_s,
        }
        self.last = {
            "step": step,
            "transition_event": self.scheduler.event if (self.scheduler.transitioned and not transitioned_before) else None,
            "samples": [
                {"id": s.id, "response": c.text, **{k: _finite(v) for k, v in b.to_dict().items() if k != "reason"}}
                for (s, _, c), b in zip(flat, breakdowns)
            ],
        }
        return episodes, metrics
