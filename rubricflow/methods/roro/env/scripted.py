"""The long-chain environment: step models whose behaviour per step type is set by ``roro.scripted``, so that the
route matters (the third reading of the task, beside ``value`` and ``parity``; ``rubricflow study roro_long``).

On the 4-5-step problems of the tiny step models, SLM errors are nearly independent per step and its uncertainty
separates them well, so a one-feature uncertainty threshold is close to the best router. The paper's premise is the
opposite: long chains, LRM calls concentrated on early problem-formulation steps, errors that propagate. This
environment builds that premise on purpose, with known ground truth:

* **Long chains**: synthetic problems of ``task.min_ops..task.max_ops`` operations (8-16 in the study), written one
  step per line exactly as the tiny models write them (``task.solution_steps``), checked by the same
  ``task.check_step``; an accepted error propagates to the final answer.
* **Step types**: the first ``formulate_steps`` operations are *formulation* steps, the others *compute* steps,
  then the final ``#### N``. The SLM errs on a formulation step with ``slm_formulate_error`` and on a compute step
  with ``slm_compute_error``; the LRM with ``lrm_error`` on either. An error writes a result 1-2 off the right one.
* **Miscalibrated uncertainty for one step type** (``miscalibrated``): the SLM's uncertainty on a calibrated step is
  drawn from ``right_uncertainty`` when the step is right and ``wrong_uncertainty`` when it is wrong; on the
  miscalibrated type a wrong step's uncertainty is drawn from the right steps' range (confidently wrong), so no
  threshold on uncertainty finds those errors. The router also sees the step index and the step's tokens.
* **Per-step costs that differ**: a formulation step costs ``formulate_tokens``, a compute step ``compute_tokens``,
  the SLM's final step ``final_tokens``. The LRM's final step *verifies* the chain from the question
  (``verify_tokens_per_op`` per operation) and, with probability ``lrm_repair``, repairs it: it writes the true
  answer even when an earlier error was kept (the outcome is then right, the chain is not, and the oracle's process
  score still counts the kept error). Otherwise it restates the carried value.

Every draw is a pure function of ``(scripted.seed, model, question, step index, carried value, what)`` (SHA-256),
so a prefix always gives the same step, as with greedy decoding (the step cache applies unchanged), a study unit
rebuilds the environment by changing the seed, and a route's later steps depend on what was carried, not on which
model wrote the earlier ones. The token counts are the cost model's, not the length of the written text.
"""

from __future__ import annotations

import hashlib
import json

from rubricflow.methods.roro.config import ScriptedConfig
from rubricflow.methods.roro.env.step_lm import INSTRUCTION, StepOutput
from rubricflow.methods.roro.env.task import FINAL_PREFIX, OPS, apply_op, parse_final, parse_question, parse_step

STEP_TYPES = ("formulate", "compute", "final")


class ScriptedStepModel:
    """The SLM (``name="slm"``) or the LRM (``name="lrm"``) of the long-chain environment (module doc)."""

    def __init__(self, cfg: ScriptedConfig, name: str, n_params: int):
        if name not in ("slm", "lrm"):
            raise ValueError(f"scripted step model: name {name!r}; expected 'slm' or 'lrm'")
        self.cfg, self.name, self.n_params = cfg, name, n_params

    @property
    def fingerprint(self) -> str:
        """Names the model and every setting it behaves by, for the step cache."""
        blob = json.dumps(self.cfg.model_dump(mode="json"), sort_keys=True)
        return f"scripted-{self.name}:{hashlib.sha256(blob.encode()).hexdigest()[:12]}"

    def prompt(self, question: str) -> str:
        return f"{question}\n{INSTRUCTION}\n"

    def propose(self, prefixes: list[str]) -> list[StepOutput]:
        return [self._step(p) for p in prefixes]

    # -- one step ------------------------------------------------------------------------------------------------
    def step_type(self, index: int, n_ops: int) -> str:
        if index >= n_ops:
            return "final"
        return "formulate" if index < self.cfg.formulate_steps else "compute"

    def _draw(self, question: str, index: int, carried: int, what: str) -> float:
        key = repr((self.cfg.seed, self.name, question, index, carried, what))
        h = hashlib.sha256(key.encode()).digest()
        return (int.from_bytes(h[:8], "big") + 0.5) / 2.0**64  # in (0, 1)

    def _uniform(self, bounds: list[float], u: float) -> float:
        return bounds[0] + (bounds[1] - bounds[0]) * u

    def _step(self, prefix: str) -> StepOutput:
        question, steps = _read_prefix(prefix)
        start, ops = parse_question(question)
        k = len(steps)
        carried = start if k == 0 else _written_value(steps[-1], prefix)
        c = self.cfg
        kind = self.step_type(k, len(ops))
        u_unc = self._draw(question, k, carried, "uncertainty")
        if kind == "final":
            if self.name == "lrm":
                true = start
                for op, arg in ops:
                    true = apply_op(op, true, arg)
                repaired = self._draw(question, k, carried, "repair") < c.lrm_repair
                value = true if repaired else carried
                return StepOutput(f"{FINAL_PREFIX} {value}", c.verify_tokens_per_op * len(ops),
                                  self._uniform(c.right_uncertainty, u_unc), True)
            return StepOutput(f"{FINAL_PREFIX} {carried}", c.final_tokens, self._uniform(c.right_uncertainty, u_unc),
                              True)
        op, arg = ops[k]
        rate = c.lrm_error if self.name == "lrm" else (
            c.slm_formulate_error if kind == "formulate" else c.slm_compute_error)
        right = apply_op(op, carried, arg)
        wrong = self._draw(question, k, carried, "error") < rate
        value = right
        if wrong:
            off = (1, 2, -1, -2)[int(self._draw(question, k, carried, "offset") * 4)]
            value = right + off
        sees_error = wrong and not (c.miscalibrated == kind)
        unc = self._uniform(c.wrong_uncertainty if sees_error else c.right_uncertainty, u_unc)
        tokens = c.formulate_tokens if kind == "formulate" else c.compute_tokens
        return StepOutput(f"{carried} {OPS[op][1]} {arg} = {value}", tokens, unc, True)


def _read_prefix(prefix: str) -> tuple[str, list[str]]:
    """``(question, steps written so far)`` of a prefix ``ScriptedStepModel.prompt(question) + steps``."""
    head, sep, rest = prefix.partition(f"\n{INSTRUCTION}\n")
    if not sep:
        raise ValueError(f"scripted step model: not a prefix of its prompt (no {INSTRUCTION!r} line): {prefix[:80]!r}")
    return head, [s for s in rest.split("\n") if s]


def _written_value(step: str, prefix: str) -> int:
    """The result a written step carries into the next one."""
    parsed = parse_step(step)
    if parsed is not None:
        return parsed[3]
    fin = parse_final(step)
    if fin is not None and float(fin).is_integer():
        return int(float(fin))
    raise ValueError(f"scripted step model: cannot read the carried value of step {step!r} in {prefix[:80]!r}")
