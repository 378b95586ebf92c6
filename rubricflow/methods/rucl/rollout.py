"""RuCL rollouts: sample a group of responses per prompt, score them with the ``RubricScorer`` (the one the TRL and
verl integrations use), and turn the reward breakdowns into episodes.

One call per training step (the ``rollout_fn`` of ``GRPOTrainer``)::

    lambda_t          = curriculum.lambda_t                       (the weight decided by the previous steps)
    responses         = generator.generate(prompts, n=group_size)
    reward breakdowns = scorer.score(items)                       (judge call skipped in reward mode "outcome")
    scorer.step()     -> curriculum.update(batch mean S_F)        (averaged over ranks first)

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
from rubricflow.evaluation import policy_requests
from rubricflow.grpo.types import Episode
from rubricflow.judge.protocol import JudgeBackend, Rubric
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.curriculum import CurriculumScheduler
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
    ):
        try:
            self.scorer = RubricScorer(judge, rubrics, scheduler, rcfg.reward.alpha, rcfg.reward.mode)
        except ValueError as e:
            raise ValueError(f"rucl.reward.mode: {e} (rucl.tiers_path names the tiers)") from None
        self.gen, self.processor, self.judge = generator, processor, judge
        self.scheduler, self.rcfg, self.engine = scheduler, rcfg, engine
        self.data_dir = Path(data_dir)
        tok = text_tokenizer(processor)
        self.eos_id = tok.convert_tokens_to_ids("<|im_end|>")
        self.last: dict[str, Any] = {}  # the last step's per-sample details (for reports and tests)

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
        root = self.data_dir.resolve()
        items = [Item(sample_id=f"{s.id}#s{step}#{k}", question=s.question, response=c.text, answer=s.answer,
                      answer_type=s.answer_type, facts=s.facts, images=[str(root / p) for p in s.images])
                 for k, (s, _, c) in enumerate(flat)]
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
            "judge/time_s": judge_s,
            "reward/n_missing": summ["n_missing"],
            "rollout/completion_len": n_tok / max(len(flat), 1),
            "rollout/finished_frac": sum(c.finished for _, _, c in flat) / max(len(flat), 1),
            "rollout/tokens_per_s": n_tok / gen_s if gen_s > 0 else 0.0,
            "rollout/gen_time_s": gen_s,
        }
        self.last = {
            "step": step,
            "transition_event": summ["transition"],
            "samples": [
                {"id": s.id, "response": c.text, **{k: _finite(v) for k, v in b.to_dict().items() if k != "reason"}}
                for (s, _, c), b in zip(flat, breakdowns)
            ],
        }
        return episodes, metrics
