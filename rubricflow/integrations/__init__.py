"""rubricflow's rubric rewards inside other RL trainers.

* :mod:`rubricflow.methods.rucl.scoring`: the trainer-independent part: judge a batch of completions on the tiered
  rubrics, compute RuCL's hybrid reward (a failed judgment stays *missing*), and feed the batch's foundational score
  to the curriculum scheduler once per optimizer step;
* :mod:`rubricflow.integrations.trl`: a reward function for TRL's ``GRPOTrainer`` (``None`` where the judgment
  failed: TRL leaves that completion out) and a ``TrainerCallback`` that advances the curriculum and logs it;
* :mod:`rubricflow.integrations.mlflow`: the judge as a scorer of ``mlflow.genai.evaluate`` (one assessment per
  rubric plus the score; a failed judgment is an error assessment, never a 0);
* :mod:`rubricflow.integrations.verl`: verl's ``compute_score`` signatures (one sample, and a batch: one judge
  call) and a reward manager that keeps a failed judgment out of GRPO's group statistics instead of scoring it 0.

TRL and verl are imported only where a class needs them; a missing one raises :class:`IntegrationUnavailable`
naming the package. Docs: ``docs/trl.md``, ``docs/verl.md``, ``docs/mlflow.md``.
"""

from models.errors import BackendUnavailable


class IntegrationUnavailable(BackendUnavailable):
    """The trainer package an integration needs (trl, verl) is not installed; the message says how to get it."""
