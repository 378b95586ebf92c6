"""rubricflow rewards in verl: ``compute_score`` functions and a reward manager that keeps failed judgments missing.

verl (read in its released source, 0.9.1) calls a custom reward function one sample at a time,
``compute_score(data_source, solution_str, ground_truth, extra_info)`` (``NaiveRewardManager``), or a batch at a time,
``compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)`` (``BatchRewardManager``); either
returns a float or a dict with ``"score"`` and extra values. The scalar goes into a token-level reward tensor, and
GRPO's advantage (``compute_grpo_outcome_advantage``) takes the plain ``torch.mean`` / ``torch.std`` of the group's
scores (grouped by ``non_tensor_batch["uid"]``). So verl has no "missing" reward: its rate-limited manager scores a
timed-out or failed call 0.0, and a NaN would make every advantage of that group NaN.

This module gives verl what it cannot express itself:

* :class:`VerlScorer` ``.compute_score`` / ``.compute_score_batch``: verl's two signatures over a
  :class:`~rubricflow.methods.rucl.scoring.RubricScorer` (the batch form makes one judge call for the whole batch).
  Each returns a dict per sample: ``score`` (the hybrid reward, **NaN when the judgment failed**), ``missing``
  (1.0 / 0.0), ``outcome``, ``s_f``, ``s_a``, ``lambda_t``. The batch form warns at a batch whose every score is
  missing and raises ``RewardsMissing`` after ``max_missing_batches`` (3) in a row. ``ground_truth`` is the reference
  answer; ``extra_info`` carries ``question``, ``answer_type``, ``facts`` (dict or JSON) and optionally ``sample_id``.
* :func:`neutral_fill`: per group, a missing score becomes the mean of the group's measured scores, so its GRPO
  advantage is exactly 0 and the group's mean is unchanged (the other completions are centred as if it were not
  there); a group with no measured score gets 0 for all (no signal: every advantage 0). Left as it is: the group's
  std, which then has one more sample at the mean (for k measured scores, the unbiased std shrinks by
  ``sqrt((k - 1) / k)``, so the others' advantages grow by that factor's inverse).
* :class:`RubricflowRewardManager`: verl's reward-manager interface (``__init__(tokenizer, num_examine,
  compute_score=None, reward_fn_key="data_source", **kwargs)``, ``__call__(data, return_dict=False)``, as
  ``verl.workers.reward_manager``'s managers): decodes the valid response tokens, scores the whole batch with one
  judge call, applies :func:`neutral_fill` by ``uid``, puts each score on the response's last valid token, calls
  ``scorer.step()`` (the curriculum advances once per training step) and returns ``reward_extra_info`` with
  ``rubricflow_missing``, ``s_f``, ``s_a``, ``outcome``, ``lambda_t`` per sample.

verl is never imported here (the manager does not subclass verl's ``AbstractRewardManager``, it matches its
interface): verl 0.9.1 pins ``transformers<5.11`` and cannot be installed beside this project's transformers
5.24, so the tests exercise these functions against verl's documented signatures (``docs/verl.md``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch

from rubricflow.methods.rucl.integrations import MAX_MISSING_BATCHES, MissingRewardsGuard
from rubricflow.methods.rucl.scoring import Item, RubricScorer, as_facts

NAN = float("nan")


def _item(i: int, solution_str: str, ground_truth: Any, extra_info: dict | None) -> Item:
    info = dict(extra_info or {})
    if "question" not in info:
        raise ValueError(f"rubricflow verl reward: extra_info of sample {i} has no `question` (the problem text the "
                         "judge sees); put it in the data set's extra_info column")
    return Item(sample_id=str(info.get("sample_id", info.get("index", i))), question=str(info["question"]),
                response=solution_str, answer=str(ground_truth), answer_type=str(info.get("answer_type", "text")),
                facts=as_facts(info.get("facts"), f"extra_info.facts of sample {i}"))


def _result(b, lambda_t: float) -> dict[str, float]:
    return {"score": NAN if b.missing else float(b.total), "missing": 1.0 if b.missing else 0.0,
            "outcome": float(b.outcome), "s_f": float(b.s_f), "s_a": float(b.s_a), "lambda_t": float(lambda_t)}


class VerlScorer:
    """verl's ``compute_score`` signatures over a :class:`RubricScorer` (see the module docstring)."""

    def __init__(self, scorer: RubricScorer, max_missing_batches: int = MAX_MISSING_BATCHES):
        self.scorer = scorer
        # batches only: verl's one-sample form would count single failed samples as whole batches
        self.guard = MissingRewardsGuard("rubricflow compute_score_batch (verl)", max_missing_batches)

    def compute_score(self, data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                      **kwargs) -> dict[str, float]:
        """One sample (verl's ``compute_score``). ``score`` is NaN when the judgment failed: hand the results to
        :func:`neutral_fill` (or use :class:`RubricflowRewardManager`) before verl's advantage sees them."""
        lam = self.scorer.lambda_t
        return _result(self.scorer.score([_item(0, solution_str, ground_truth, extra_info)])[0], lam)

    def compute_score_batch(self, data_sources: Sequence[str], solution_strs: Sequence[str],
                            ground_truths: Sequence[Any], extra_infos: Sequence[dict | None] | None = None,
                            **kwargs) -> list[dict[str, float]]:
        """A batch (verl's ``BatchRewardManager`` signature): one judge call for all of it."""
        n = len(solution_strs)
        if not (len(data_sources) == len(ground_truths) == n):
            raise ValueError(f"compute_score_batch: {len(data_sources)} data_sources, {n} solution_strs, "
                             f"{len(ground_truths)} ground_truths; expected one each per sample")
        extras = list(extra_infos) if extra_infos is not None else [None] * n
        lam = self.scorer.lambda_t
        items = [_item(i, s, g, e) for i, (s, g, e) in enumerate(zip(solution_strs, ground_truths, extras))]
        results = [_result(b, lam) for b in self.scorer.score(items)]
        self.guard.check(sum(r["missing"] == 1.0 for r in results), len(results))
        return results


def neutral_fill(scores: Sequence[float], group_ids: Sequence[Any]) -> tuple[list[float], list[bool]]:
    """``(filled scores, missing flags)``: each NaN score replaced by the mean of the measured scores of its group
    (0.0 when the group has none). See the module docstring for what this does to GRPO's statistics."""
    if len(scores) != len(group_ids):
        raise ValueError(f"neutral_fill: {len(scores)} scores but {len(group_ids)} group ids")
    missing = [s is None or math.isnan(float(s)) for s in scores]
    groups: dict[Any, list[float]] = defaultdict(list)
    for s, g, m in zip(scores, group_ids, missing):
        if not m:
            groups[g].append(float(s))
    means = {g: sum(v) / len(v) for g, v in groups.items()}
    filled = [means.get(g, 0.0) if m else float(s) for s, g, m in zip(scores, group_ids, missing)]
    return filled, missing


class RubricflowRewardManager:
    """A verl reward manager (the interface of ``verl.workers.reward_manager``'s managers) for rubricflow rewards.

    ``compute_score`` is a :class:`VerlScorer` (or anything with its ``compute_score_batch``); ``group_key`` names the
    ``non_tensor_batch`` column that groups a prompt's responses (verl's ``uid``)."""

    def __init__(self, tokenizer, num_examine: int = 0, compute_score: VerlScorer | None = None,
                 reward_fn_key: str = "data_source", group_key: str = "uid", **kwargs):
        if compute_score is None or not hasattr(compute_score, "compute_score_batch"):
            raise ValueError("RubricflowRewardManager needs compute_score=VerlScorer(RubricScorer(...))")
        self.tokenizer, self.num_examine = tokenizer, num_examine
        self.scorer, self.reward_fn_key, self.group_key = compute_score, reward_fn_key, group_key
        self.steps: list[dict[str, Any]] = []

    def __call__(self, data, return_dict: bool = False):
        prompt_len = data.batch["prompts"].shape[-1]
        valid = data.batch["attention_mask"][:, prompt_len:].sum(dim=-1)
        responses = data.batch["responses"]
        n = len(data)
        texts = [self.tokenizer.decode(responses[i][: int(valid[i])], skip_special_tokens=True) for i in range(n)]
        ntb = data.non_tensor_batch
        truths = [rm.get("ground_truth") if isinstance(rm, dict) else None for rm in ntb["reward_model"]]
        extras = list(ntb["extra_info"]) if "extra_info" in ntb else [None] * n
        if self.group_key not in ntb:
            raise ValueError(f"RubricflowRewardManager: non_tensor_batch has no `{self.group_key}` column (the "
                             "group id GRPO's advantage uses; verl sets `uid` before the reward)")
        results = self.scorer.compute_score_batch(list(ntb[self.reward_fn_key]), texts, truths, extras)
        filled, missing = neutral_fill([r["score"] for r in results], list(ntb[self.group_key]))
        reward = torch.zeros_like(responses, dtype=torch.float32)
        for i in range(n):
            reward[i, max(int(valid[i]) - 1, 0)] = filled[i]
        self.steps.append(self.scorer.scorer.step() if hasattr(self.scorer, "scorer") else {})
        if not return_dict:
            return reward
        extra = {k: [r[k] for r in results] for k in ("outcome", "s_f", "s_a", "lambda_t")}
        extra["rubricflow_missing"] = [float(m) for m in missing]
        return {"reward_tensor": reward, "reward_extra_info": extra}
