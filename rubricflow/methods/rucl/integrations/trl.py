"""rubricflow rewards in TRL's ``GRPOTrainer``: a reward function and a curriculum callback.

::

    from rubricflow.methods.rucl.scoring import RubricScorer
    from rubricflow.methods.rucl.integrations.trl import RubricflowReward, RubricflowCallback

    scorer = RubricScorer(judge, tiered_rubrics, CurriculumScheduler.from_config(curriculum), alpha=0.7)
    trainer = GRPOTrainer(model=..., reward_funcs=RubricflowReward(scorer), args=GRPOConfig(...),
                          train_dataset=ds, callbacks=[RubricflowCallback(scorer)])

**The reward function** has TRL's documented signature, ``f(prompts, completions, completion_ids, **kwargs) ->
list[float | None]``, where ``kwargs`` holds the dataset's other columns: ``question`` (the text the judge sees;
defaults to the prompt), ``answer``, ``answer_type`` (int/float/choice/text, default text), ``facts`` (a dict or
JSON string; needed by the programmatic judge) and optionally ``sample_id``. It judges the whole batch in one call
and returns the hybrid reward, or ``None`` where the judgment failed: TRL 1.16 turns ``None`` into NaN, leaves the
completion out of its group's mean and std and gives it advantage 0 (``unscorable_mask`` in its
``_generate_and_score_completions``), so a failed judgment never counts as a 0 reward. Use it as the only reward
function: next to another one, TRL's ``nansum`` over functions would add nothing for the failed completion and
keep the other function's value. ``AsyncRubricflowReward`` is the same as a coroutine (TRL runs async reward
functions concurrently on its event loop; the judge's ``ajudge`` is used).

Through TRL's ``log_metric`` hook every call logs ``rubricflow/lambda_t`` (the weight used), ``rubricflow/s_f``,
``rubricflow/s_a``, ``rubricflow/outcome`` and ``rubricflow/judge_failures``; they reach every logger TRL reports
to (MLflow included). A batch whose every reward is missing is warned about; ``max_missing_batches`` (3) of them in
a row raise ``RewardsMissing`` (``rubricflow.methods.rucl.integrations.MissingRewardsGuard``).

**The callback** calls ``scorer.step()`` at every optimizer step's end: the step's mean S_F goes to the
curriculum scheduler, which updates lambda for the next step (RuCL's performance-triggered switch: S_F above the
threshold at every step of the window). It adds ``rubricflow/lambda_next``, ``rubricflow/s_f_step`` and, at the
switch, ``rubricflow/curriculum_transition_step`` to the step's entry of ``state.log_history`` (and to the ``logs``
that loggers after it receive: transformers calls its own reporting callbacks first, so the callback does not rely
on them); when MLflow is one of the trainer's loggers (``report_to``) and a run is active, the transition is logged
there directly, as a tag (``curriculum_transition_step``), a metric and ``curriculum_transition.json``. ``history`` and
``transition`` keep what it saw, for tests and reports.

The reward function needs no TRL import; the callback subclasses ``transformers.TrainerCallback`` (created on first
use). TRL itself is only needed by the trainer: :func:`require_trl` names it when missing.
"""

from __future__ import annotations

from typing import Any

from rubricflow.methods.rucl.integrations import MAX_MISSING_BATCHES, IntegrationUnavailable, MissingRewardsGuard
from rubricflow.methods.rucl.scoring import Item, RubricScorer, as_facts


def require_trl() -> str:
    """TRL's version; ``IntegrationUnavailable`` naming the package and the pinned install command when missing."""
    try:
        import trl
    except ImportError:
        raise IntegrationUnavailable(
            "rubricflow.methods.rucl.integrations.trl needs `trl` (pinned: `.venv/bin/pip install -c "
            "requirements/constraints.txt torch==2.13.0 trl==1.16.0`, or `pip install -e '.[dev]'`)"
        ) from None
    return trl.__version__


def _text(completion: Any) -> str:
    """A completion as text: a string (standard format) or a list of messages (conversational format)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
    raise TypeError(f"completion: expected a string or a list of messages, got {type(completion).__name__}")


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):  # conversational: the last user turn is the question
        users = [m.get("content") or "" for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return users[-1] if users else ""
    return str(prompt)


class RubricflowReward:
    """TRL reward function (see the module docstring). Column names are configurable."""

    __name__ = "rubricflow"

    def __init__(self, scorer: RubricScorer, question_key: str = "question", answer_key: str = "answer",
                 answer_type_key: str = "answer_type", facts_key: str = "facts", id_key: str = "sample_id",
                 max_missing_batches: int = MAX_MISSING_BATCHES):
        self.scorer = scorer
        self.keys = (question_key, answer_key, answer_type_key, facts_key, id_key)
        self.calls: list[dict[str, Any]] = []  # per call: rewards returned and which completions were missing
        self.guard = MissingRewardsGuard("rubricflow reward (TRL)", max_missing_batches)

    def items(self, prompts: list, completions: list, kwargs: dict) -> list[Item]:
        qk, ak, tk, fk, ik = self.keys
        n = len(completions)
        if ak not in kwargs:
            raise ValueError(f"rubricflow reward: the dataset has no `{ak}` column (the reference answer); columns "
                             f"given: {sorted(k for k in kwargs if not k.startswith(('trainer_', 'log_')))}")

        def col(key, default=None):
            v = kwargs.get(key)
            return list(v) if v is not None else [default] * n

        questions, answers, types, facts, ids = col(qk), col(ak), col(tk, "text"), col(fk), col(ik)
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        return [
            Item(sample_id=f"{ids[i] if ids[i] is not None else i}#s{step}#{i}",
                 question=str(questions[i]) if questions[i] is not None else _prompt_text(prompts[i]),
                 response=_text(completions[i]), answer=str(answers[i]), answer_type=str(types[i] or "text"),
                 facts=as_facts(facts[i], f"rubricflow reward: column `{fk}` row {i}"))
            for i in range(n)
        ]

    def _finish(self, breakdowns, kwargs: dict) -> list[float | None]:
        rewards = [None if b.missing else float(b.total) for b in breakdowns]
        stats = self.scorer.batch_stats(breakdowns)
        self.calls.append({"rewards": rewards, "lambda_t": self.scorer.lambda_t,
                           "missing": [i for i, r in enumerate(rewards) if r is None]})
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric("rubricflow/lambda_t", self.scorer.lambda_t)
            for k in ("s_f", "s_a", "outcome"):
                if stats[k] == stats[k]:  # not NaN
                    log_metric(f"rubricflow/{k}", stats[k])
            log_metric("rubricflow/judge_failures", stats["n_missing"])
        self.guard.check(sum(r is None for r in rewards), len(rewards))
        return rewards

    def __call__(self, prompts: list, completions: list, completion_ids: list | None = None,
                 **kwargs) -> list[float | None]:
        return self._finish(self.scorer.score(self.items(prompts, completions, kwargs)), kwargs)


class AsyncRubricflowReward(RubricflowReward):
    """The same reward as a coroutine function (TRL awaits async reward functions concurrently)."""

    async def __call__(self, prompts: list, completions: list, completion_ids: list | None = None,
                       **kwargs) -> list[float | None]:
        return self._finish(await self.scorer.ascore(self.items(prompts, completions, kwargs)), kwargs)


_CALLBACK_CLS = None


def _callback_class():
    global _CALLBACK_CLS
    if _CALLBACK_CLS is not None:
        return _CALLBACK_CLS
    from transformers import TrainerCallback

    class _RubricflowCallback(TrainerCallback):
        def __init__(self, scorer: RubricScorer):
            self.scorer = scorer
            self.history: list[dict[str, Any]] = []
            self.transition: dict[str, Any] | None = None
            self._unlogged: dict[str, float] = {}

        def on_step_end(self, args, state, control, **kwargs):
            info = self.scorer.step()
            row = {"global_step": state.global_step, **{k: v for k, v in info.items() if k != "transition"}}
            self.history.append(row)
            self._unlogged = {"rubricflow/lambda_next": info.get("lambda_next", info["lambda_t"]),
                              "rubricflow/s_f_step": info["s_f"]}
            if info["transition"] is not None:
                self.transition = {**info["transition"], "global_step": state.global_step}
                self._unlogged["rubricflow/curriculum_transition_step"] = float(state.global_step)
                _mlflow_transition(args, self.transition)
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            # Trainer.log appends a copy of `logs` to state.log_history before it calls the callbacks: add the
            # step's curriculum values to both (loggers called after this one see them in `logs`)
            if self._unlogged:
                extra = {k: v for k, v in self._unlogged.items() if v == v}  # NaN left out
                if logs is not None:
                    logs.update(extra)
                if state.log_history and state.log_history[-1].get("step") == state.global_step:
                    state.log_history[-1].update(extra)
                self._unlogged = {}
            return control

    _CALLBACK_CLS = _RubricflowCallback
    return _CALLBACK_CLS


def RubricflowCallback(scorer: RubricScorer):  # noqa: N802  (a class to the user; built lazily)
    """The curriculum callback (a ``transformers.TrainerCallback``); see the module docstring."""
    return _callback_class()(scorer)


def _mlflow_transition(args, event: dict) -> None:
    report_to = getattr(args, "report_to", None) or []
    if isinstance(report_to, str):
        report_to = [report_to]
    if "mlflow" not in report_to and "all" not in report_to:
        return
    import mlflow

    if mlflow.active_run() is None:
        return
    mlflow.set_tag("curriculum_transition_step", event["global_step"])
    mlflow.log_metric("rubricflow/curriculum_transition", 1.0, step=int(event["global_step"]))
    mlflow.log_dict(event, "curriculum_transition.json")
