"""The generic GRPO loop: deterministic prompt stream, method rollouts, updates, logging hook, checkpoint/resume.

``GRPOTrainer.run(steps)``::

    refuse the checkpoints under checkpoint_dir if they were trained on other inputs (key_parts; start fresh)
    resume from the latest complete checkpoint that verifies (a corrupt one: warn, try the previous one)
    for step in [start, steps):
        prompts           = prompt stream's next batch (seeded order, resumable cursor; rank r takes its slice)
        episodes, metrics = rollout_fn(step, prompts)           # the method: generate, judge, reward
        metrics          |= updater.update(episodes)            # GRPO
        metrics          |= eval_fn(step) every cfg.eval_every steps and after the last one (if given)
        log_fn(step, metrics)                                   # the stage logs to MLflow here
        checkpoint every cfg.checkpoint_every steps and after the last one

One-step-off pipelining (``cfg.one_step_off``, an algorithmic change, off by default): the rollout function is a
:class:`PipelinedRollout` (``start`` generates a batch and sends it to be scored, ``finish`` waits for its rewards
and returns the episodes, ``sync_policy`` makes the generating policy the current one); while step t is finished and
updated in this thread, step t+1's ``start`` runs in a worker thread on the policy of before update t::

    sync_policy(); start(0) in the worker
    for step in [start, steps):
        wait for start(step)                                    # generated with the policy after `version` updates
        lag = step - version                                    # 0 on the first step, then 1; never more (checked)
        sync_policy(); start(step + 1) in the worker            # policy after `step` updates
        episodes, metrics = finish(step)                        # rewards of step `step`
        metrics |= updater.update(episodes)                     # update `step`
        ... eval, log (pipeline/policy_lag), checkpoint

A checkpoint taken while step t+1 is in flight records the prompt cursor from before its batch, so a resumed run
generates that batch again (with the resumed policy: lag 0 on its first step). The rollouts of the worker draw from
torch's global RNG while this thread updates: with a deterministic update (no dropout) a run is reproducible, but the
RNG state a checkpoint records is taken mid-flight, so a resumed one-step-off run is not bit-identical to an
uninterrupted one.

A checkpoint restores everything that decides what happens next: engine (model, optimizer, LR schedule), the
RNG states of python / numpy / torch (rollout sampling draws from torch's), the prompt cursor, the updater's
shuffle RNG and every ``stateful`` object (e.g. ``{"curriculum": scheduler}``), so a resumed run continues the
same sequence of batches and, on a deterministic backend, the same parameters as an uninterrupted one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import torch

from rubricflow.grpo.checkpoint import (
    CheckpointManager,
    CorruptCheckpoint,
    rng_state,
    seed_everything,
    set_rng_state,
)
from rubricflow.grpo.config import GRPOConfig
from rubricflow.grpo.types import Episode
from rubricflow.grpo.updater import GRPOUpdater

RolloutFn = Callable[[int, list[Any]], tuple[list[Episode], dict[str, float]]]
LogFn = Callable[[int, dict[str, float]], None]
EvalFn = Callable[[int], dict[str, float]]

log = logging.getLogger("rubricflow.grpo.trainer")


MAX_POLICY_LAG = 1  # one-step-off: the most updates between the generating policy and the one updated


class PolicyLagExceeded(RuntimeError):
    """A batch would update a policy more than ``MAX_POLICY_LAG`` updates ahead of the one that generated it."""


class PipelinedRollout(Protocol):
    """A rollout function in two phases, for one-step-off pipelining (see the module docstring)."""

    def start(self, step: int, prompts: list[Any]) -> Any:
        """Generate the batch of ``step`` with the generating policy and send it to be scored; returns a handle."""
        ...

    def finish(self, step: int, handle: Any) -> tuple[list[Episode], dict[str, float]]:
        """Wait for the batch's rewards; its episodes and metrics (as a plain rollout function returns them)."""
        ...

    def sync_policy(self) -> None:
        """Make the generating policy the trained one's current weights (never called while ``start`` runs)."""
        ...


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class PromptIterator:
    """Endless, deterministic stream of prompt batches over ``items``.

    Epoch ``e`` visits the items in the order ``randperm(n)`` seeded by ``(seed, e)``; a global batch is
    ``batch_size * world_size`` consecutive items (crossing into the next epoch when needed) and rank ``r`` takes
    items ``[r * batch_size, (r + 1) * batch_size)`` of it. The cursor ``(epoch, pos)`` is the whole state.
    """

    def __init__(self, items: Sequence[Any], batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1):
        if not items:
            raise ValueError("PromptIterator: no prompts (the training split is empty?)")
        if batch_size < 1:
            raise ValueError(f"PromptIterator: batch_size must be >= 1, got {batch_size}")
        self.items, self.batch_size, self.seed = list(items), batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.epoch, self.pos = 0, 0
        self._order_epoch, self._order = -1, []

    def _order_for(self, epoch: int) -> list[int]:
        if epoch != self._order_epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._order, self._order_epoch = torch.randperm(len(self.items), generator=g).tolist(), epoch
        return self._order

    def next_batch(self) -> list[Any]:
        need = self.batch_size * self.world_size
        picked: list[int] = []
        while len(picked) < need:
            order = self._order_for(self.epoch)
            take = min(need - len(picked), len(order) - self.pos)
            picked += order[self.pos : self.pos + take]
            self.pos += take
            if self.pos >= len(order):
                self.epoch, self.pos = self.epoch + 1, 0
        mine = picked[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        return [self.items[i] for i in mine]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "seed": self.seed, "n": len(self.items)}

    def load_state_dict(self, state: dict) -> None:
        if state["n"] != len(self.items) or state["seed"] != self.seed:
            raise ValueError(
                f"prompt stream state is for {state['n']} prompts / seed {state['seed']}, but this run has "
                f"{len(self.items)} prompts / seed {self.seed}: resuming would replay a different order"
            )
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


class GRPOTrainer:
    def __init__(
        self,
        updater: GRPOUpdater,
        prompts: Sequence[Any],
        rollout_fn: RolloutFn,
        cfg: GRPOConfig,
        checkpoint_dir: str | Path,
        log_fn: LogFn | None = None,
        stateful: dict[str, Stateful] | None = None,
        eval_fn: EvalFn | None = None,
        key_parts: dict[str, Any] | None = None,
    ):
        """``key_parts``: what the run is trained on (``rubricflow.grpo.checkpoint.resume_key``); checkpoints
        recorded with other parts are not resumed. None: no check (the caller keys ``checkpoint_dir`` itself)."""
        self.updater, self.rollout_fn, self.cfg = updater, rollout_fn, cfg
        self.engine = updater.engine
        self.rank, self.world_size = getattr(self.engine, "rank", 0), getattr(self.engine, "world_size", 1)
        self.data = PromptIterator(prompts, cfg.prompts_per_step, cfg.seed, self.rank, self.world_size)
        self.log_fn = log_fn
        self.eval_fn = eval_fn
        self.stateful = dict(stateful or {})
        self.ckpt = CheckpointManager(checkpoint_dir, cfg.keep_checkpoints, self.engine, key_parts=key_parts)
        self.step = 0
        self.resumed_from: int | None = None
        self.resume_refused: str | None = None  # "<parts> changed": the checkpoints were trained on other inputs
        self.corrupt_checkpoints: list[str] = []
        self.history: list[dict[str, float]] = []
        self._data_state: dict | None = None  # one-step-off: the prompt cursor before the batch in flight
        if cfg.one_step_off and not all(callable(getattr(rollout_fn, a, None))
                                        for a in ("start", "finish", "sync_policy")):
            raise ValueError("grpo.one_step_off needs a rollout function with start / finish / sync_policy "
                             "(rubricflow.grpo.trainer.PipelinedRollout); this method's has not")
        if cfg.one_step_off and self.world_size > 1:
            raise ValueError(f"grpo.one_step_off runs in one process only; this run has {self.world_size} ranks")

    # -- state -------------------------------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "step": self.step,
            "rng": rng_state(),
            "data": self._data_state if self._data_state is not None else self.data.state_dict(),
            "updater": self.updater.state_dict(),
            "stateful": {k: v.state_dict() for k, v in self.stateful.items()},
        }

    def load_state(self, state: dict) -> None:
        missing = sorted(set(self.stateful) - set(state["stateful"]))
        if missing:
            raise KeyError(f"checkpoint has no state for {missing} (saved: {sorted(state['stateful'])})")
        set_rng_state(state["rng"])
        self.data.load_state_dict(state["data"])
        self.updater.load_state_dict(state["updater"])
        for k, v in self.stateful.items():
            v.load_state_dict(state["stateful"][k])
        self.step = int(state["step"])

    def save_checkpoint(self) -> Path:
        return self.ckpt.save(self.step, self.state())

    def maybe_resume(self) -> int | None:
        """Load the latest complete checkpoint that verifies, if there is one; returns its step."""
        self.resume_refused = self.ckpt.check_key()
        cps = self.ckpt.checkpoints()
        for _, path in reversed(cps):
            try:
                _, state = self.ckpt.load(path)
            except CorruptCheckpoint as e:
                self.corrupt_checkpoints.append(str(path))
                log.warning("%s; trying the previous checkpoint", e)
                continue
            self.load_state(state)
            self.resumed_from = self.step
            return self.step
        if cps:
            log.warning("no valid checkpoint under %s (corrupt: %s); starting fresh", self.ckpt.root,
                        ", ".join(Path(p).name for p in self.corrupt_checkpoints))
        return None

    # -- loop --------------------------------------------------------------------------------------------------
    def run(self, steps: int | None = None) -> dict[str, Any]:
        total = self.cfg.steps if steps is None else steps
        if self.maybe_resume() is None:
            seed_everything(self.cfg.seed + 1000 * self.rank)
        t_run = time.perf_counter()
        if self.cfg.one_step_off:
            self._run_one_step_off(total)
        while self.step < total:
            step = self.step
            t0, c0 = time.perf_counter(), time.process_time()
            prompts = self.data.next_batch()
            episodes, metrics = self.rollout_fn(step, prompts)
            metrics = dict(metrics)
            metrics["rollout_time_s"] = time.perf_counter() - t0
            metrics["pipeline/policy_lag"] = 0.0
            metrics.update(self.updater.update(episodes))
            metrics["step_time_s"] = time.perf_counter() - t0
            metrics["step_cpu_s"] = time.process_time() - c0  # CPU time of this process (robust to other load)
            self._end_step(step, total, metrics)
        return {"steps": self.step, "resumed_from": self.resumed_from, "resume_refused": self.resume_refused,
                "corrupt_checkpoints": list(self.corrupt_checkpoints), "run_time_s": time.perf_counter() - t_run}

    def _run_one_step_off(self, total: int) -> None:
        """The steps up to ``total`` with step t+1's rollouts started before step t's update (module docstring)."""
        ro = self.rollout_fn
        pool = ThreadPoolExecutor(1, thread_name_prefix="rollout")
        pending = None

        def launch(step: int):
            data_state = self.data.state_dict()  # a checkpoint before this batch is used rolls back to here
            prompts = self.data.next_batch()
            return pool.submit(ro.start, step, prompts), self.step, data_state  # generated after self.step updates

        try:
            if self.step >= total:
                return
            ro.sync_policy()
            pending = launch(self.step)
            t_prev = time.perf_counter()
            while self.step < total:
                step = self.step
                t0, c0 = time.perf_counter(), time.process_time()
                fut, version, _ = pending
                handle = fut.result()
                t_gen_wait = time.perf_counter() - t0
                lag = step - version
                if lag > MAX_POLICY_LAG:
                    raise PolicyLagExceeded(f"step {step}: its batch was generated by the policy after {version} "
                                            f"updates, {lag} behind (at most {MAX_POLICY_LAG})")
                pending = None
                if step + 1 < total:
                    ro.sync_policy()  # the worker is idle: it now generates with the policy after `step` updates
                    pending = launch(step + 1)
                self._data_state = pending[2] if pending is not None else None
                episodes, metrics = ro.finish(step, handle)
                metrics = dict(metrics)
                metrics["rollout_time_s"] = time.perf_counter() - t0
                metrics["rollout_wait_s"] = t_gen_wait  # waiting for this batch's generation (what overlap left)
                metrics["pipeline/policy_lag"] = float(lag)
                metrics.update(self.updater.update(episodes))
                now = time.perf_counter()
                metrics["step_time_s"] = now - t_prev  # wall time since the previous step ended (work overlaps)
                metrics["step_cpu_s"] = time.process_time() - c0
                self._end_step(step, total, metrics)
                t_prev = time.perf_counter()  # eval and checkpoint not counted, as in the sequential loop
        finally:
            self._data_state = None
            for f in ([pending[0]] if pending is not None else []):
                f.cancel()
            pool.shutdown(wait=True)

    def _end_step(self, step: int, total: int, metrics: dict[str, float]) -> None:
        """After a step's update: evaluation, logging, checkpoint, history."""
        every = self.cfg.checkpoint_every
        self.step = step + 1
        ev = self.cfg.eval_every
        if self.eval_fn is not None and ((ev and self.step % ev == 0) or self.step == total):
            t1 = time.perf_counter()
            metrics.update({f"eval/{k}": v for k, v in self.eval_fn(step).items()})
            metrics["eval_time_s"] = time.perf_counter() - t1
        # log before checkpointing: a crash in between repeats the step on resume (logged twice, same step
        # number) rather than losing its metrics
        if self.log_fn is not None:
            self.log_fn(step, metrics)
        if (every and self.step % every == 0) or self.step == total:
            t1 = time.perf_counter()
            self.save_checkpoint()
            metrics["checkpoint_time_s"] = time.perf_counter() - t1
        self.history.append(metrics)
