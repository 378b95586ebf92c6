"""rubricflow's rubric rewards inside other RL trainers (RuCL's scorer: they are part of the method).

* :mod:`rubricflow.methods.rucl.scoring`: the trainer-independent part: judge a batch of completions on the tiered
  rubrics, compute RuCL's hybrid reward (a failed judgment stays *missing*), and feed the batch's foundational score
  to the curriculum scheduler once per optimizer step;
* :mod:`.trl`: a reward function for TRL's ``GRPOTrainer`` (``None`` where the judgment failed: TRL leaves that
  completion out) and a ``TrainerCallback`` that advances the curriculum and logs it;
* :mod:`.mlflow`: the judge as a scorer of ``mlflow.genai.evaluate`` (one assessment per rubric plus the score; a
  failed judgment is an error assessment, never a 0);
* :mod:`.verl`: verl's ``compute_score`` signatures (one sample, and a batch: one judge call) and a reward manager
  that keeps a failed judgment out of GRPO's group statistics instead of scoring it 0.

TRL and verl are imported only where a class needs them; a missing one raises :class:`IntegrationUnavailable`
naming the package. Docs: ``docs/trl.md``, ``docs/verl.md``, ``docs/mlflow.md``.

A batch whose rewards are *all* missing teaches nothing (every advantage is 0) and usually means a setup error (the
judge down, or a dataset without the ``facts`` column the programmatic judge needs). :class:`MissingRewardsGuard`
warns at such a batch, naming the likely causes, and raises :class:`RewardsMissing` after ``max_batches`` (3) of
them in a row; the TRL reward and verl's batch scorer use it.
"""

import logging
import warnings

from models.errors import BackendUnavailable

log = logging.getLogger("rubricflow.methods.rucl.integrations")

MAX_MISSING_BATCHES = 3  # batches in a row with every reward missing before the reward function stops training


class IntegrationUnavailable(BackendUnavailable):
    """The trainer package an integration needs (trl, verl) is not installed; the message says how to get it."""


class RewardsMissing(RuntimeError):
    """Every reward of several batches in a row was missing: training would go on without any signal."""


class MissingRewardsGuard:
    """Counts batches in a row whose every reward is missing: warns at each, raises after ``max_batches``."""

    def __init__(self, where: str, max_batches: int = MAX_MISSING_BATCHES):
        if max_batches < 1:
            raise ValueError(f"{where}: max_missing_batches must be >= 1, got {max_batches}")
        self.where, self.max_batches, self.in_a_row = where, max_batches, 0

    def check(self, n_missing: int, n: int, reasons: str = "") -> None:
        if n == 0 or n_missing < n:
            self.in_a_row = 0
            return
        self.in_a_row += 1
        why = f" (judge failures: {reasons})" if reasons else ""
        text = (f"{self.where}: every reward of this batch of {n} is missing{why}; {self.in_a_row} such batch(es) in "
                f"a row (the judge down? with the programmatic judge, a dataset without the `facts` column?)")
        if self.in_a_row >= self.max_batches:
            raise RewardsMissing(f"{text}: stopping after {self.max_batches} in a row, no reward signal")
        warnings.warn(text, RuntimeWarning, stacklevel=3)
        log.warning(text)
