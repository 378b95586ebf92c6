"""RuCL's performance-triggered curriculum over the advanced-rubric weight ``lambda_t`` (paper section 3.3).

``lambda_t`` stays 0 while the model is still learning the foundational rubrics. The switch happens at the first
step where the batch foundational score ``S_F`` *exceeded* ``threshold`` (strictly) at every one of the last
``window`` steps, a guard against a transient lucky batch. After the switch, ``lambda`` ramps from 0 to ``peak``
over ``ramp_steps`` steps (sigmoid or linear) and then holds at ``peak``; it never goes back.

Timing, exactly (``t`` counts ``update`` calls from 0; ``t0`` is the call that saw the window complete)::

    update(score_t) records S_F of step t and returns lambda for step t + 1:
        t <  t0 :  0
        t >= t0 :  peak * ramp(min(1, (t - t0 + 1) / ramp_steps))     (ramp_steps = 0: peak at once)

so the step right after the switch already gets the first ramp value and the ``ramp_steps``-th step after the
switch gets ``peak``. ``ramp`` is ``x`` (linear) or a logistic curve rescaled to pass exactly through (0, 0) and
(1, 1): ``(s(k(x - 1/2)) - s(-k/2)) / (s(k/2) - s(-k/2))`` with ``s`` the logistic function and ``k`` the
steepness (default 10).

A missing score (NaN: no foundational rubric was judged in the batch, e.g. all judge calls failed) counts as *not*
exceeding the threshold: the window must be filled by measured evidence.

Threshold rules (``rucl.curriculum.threshold_rule``):

* ``absolute`` (the paper): ``threshold`` as given (0.9). At our scale the batch S_F of a sampled tiny policy tops
  out near it, so the switch may never come: the paper's reading, kept by name.
* ``relative`` (calibrated to the start): the first ``window`` updates measure the start's level ``b`` (mean of the
  measured scores; the switch cannot fire before it is known); from then on the threshold is ``b + margin``. It asks
  every seed for the same gain over its own start, so the switch means "the foundational tier improved", not "a seed
  started high". The margin is chosen on val seeds before any study (``rubricflow.methods.rucl.study``).

Before the switch ``lambda_t = 0`` whatever the threshold, so a run with ``peak = 0`` (lambda held at 0) follows
exactly the trajectory every threshold shares up to its switch: :func:`switch_step` replays a recorded S_F series
under any rule and gives the step it would have switched at.

Window tests (``rucl.curriculum.window_test``): ``every`` (the paper) asks that every score of the window exceed the
threshold; ``mean`` that the window's mean does (a missing score still blocks the switch). With small batches the
step-to-step noise of S_F makes ``every`` a wait for consecutive lucky batches; the mean of the window keeps the
paper's guard against one lucky batch at the paper's level of noise.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rubricflow.methods.rucl.config import CurriculumConfig

Shape = Literal["sigmoid", "linear"]
Rule = Literal["absolute", "relative"]


TAG_SWITCHED = "curriculum.switched"  # MLflow tag on every RuCL run: "true" or "false"
TAG_TRANSITION_STEP = "curriculum.transition_step"  # the step it switched at ("none" when it never did)


def switch_tags(transition_step: int | None) -> dict[str, str]:
    """The MLflow tags that say whether a run's curriculum switched to the advanced rubrics and at which step, on
    every RuCL run, so "never switched" can be filtered (``tags.`curriculum.switched` = 'false'``)."""
    switched = transition_step is not None
    return {TAG_SWITCHED: "true" if switched else "false",
            TAG_TRANSITION_STEP: str(int(transition_step)) if switched else "none"}


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def ramp(x: float, shape: Shape = "sigmoid", steepness: float = 10.0) -> float:
    """Ramp from 0 at ``x = 0`` to 1 at ``x >= 1`` (clamped)."""
    x = min(1.0, max(0.0, x))
    if shape == "linear":
        return x
    if shape == "sigmoid":
        lo, hi = _logistic(-steepness / 2), _logistic(steepness / 2)
        return (_logistic(steepness * (x - 0.5)) - lo) / (hi - lo)
    raise ValueError(f"curriculum shape: expected 'sigmoid' or 'linear', got {shape!r}")


class CurriculumScheduler:
    """Build it with ``from_config(section)``; the defaults live in the section (``rucl.curriculum``) only, so the
    plain constructor takes every setting by keyword."""

    def __init__(
        self,
        *,
        threshold: float,
        window: int,
        ramp_steps: int,
        peak: float,
        shape: Shape,
        steepness: float,
        threshold_rule: Rule,
        margin: float,
        window_test: Literal["every", "mean"],
    ):
        if window_test not in ("every", "mean"):
            raise ValueError(f"curriculum window_test: expected 'every' or 'mean', got {window_test!r}")
        if threshold_rule not in ("absolute", "relative"):
            raise ValueError(f"curriculum threshold_rule: expected 'absolute' or 'relative', got {threshold_rule!r}")
        if window < 1:
            raise ValueError(f"curriculum window: expected >= 1, got {window}")
        if ramp_steps < 0:
            raise ValueError(f"curriculum ramp_steps: expected >= 0, got {ramp_steps}")
        if not 0.0 <= peak <= 1.0:
            raise ValueError(f"curriculum peak: expected a weight in [0, 1], got {peak}")
        ramp(0.5, shape, steepness)  # validates shape
        self.threshold, self.window, self.ramp_steps = threshold, window, ramp_steps
        self.peak, self.shape, self.steepness = peak, shape, steepness
        self.threshold_rule, self.margin, self.window_test = threshold_rule, margin, window_test
        self.baseline: float | None = None  # relative rule: the start's level (mean S_F of the first window)
        self.t = 0  # update calls so far
        self.recent: deque[float] = deque(maxlen=window)
        self.transition_step: int | None = None
        self.event: dict | None = None
        self.lambda_t = 0.0  # the weight for the *next* step

    @classmethod
    def from_config(cls, cfg: "CurriculumConfig") -> "CurriculumScheduler":
        """The scheduler for a curriculum section (``rucl.curriculum``), every field taken from it."""
        return cls(
            threshold=cfg.threshold,
            window=cfg.window,
            ramp_steps=cfg.ramp_steps,
            peak=cfg.peak,
            shape=cfg.shape,
            steepness=cfg.steepness,
            threshold_rule=cfg.threshold_rule,
            margin=cfg.margin,
            window_test=cfg.window_test,
        )

    @property
    def active_threshold(self) -> float | None:
        """The threshold in force: ``threshold`` (absolute), ``baseline + margin`` (relative, once the baseline is
        measured; None before)."""
        if self.threshold_rule == "absolute":
            return self.threshold
        return None if self.baseline is None else self.baseline + self.margin

    @property
    def transitioned(self) -> bool:
        return self.transition_step is not None

    def lambda_at(self, t: int) -> float:
        """The value ``update`` returns at call ``t`` (given the recorded transition)."""
        if self.transition_step is None or t < self.transition_step:
            return 0.0
        if self.ramp_steps == 0:
            return self.peak
        return self.peak * ramp((t - self.transition_step + 1) / self.ramp_steps, self.shape, self.steepness)

    def update(self, foundational_score: float) -> float:
        """Record the batch foundational score of this step; return ``lambda`` for the next step."""
        s = float("nan") if foundational_score is None else float(foundational_score)
        self.recent.append(s)
        if self.threshold_rule == "relative" and self.baseline is None and len(self.recent) == self.window:
            measured = [x for x in self.recent if not math.isnan(x)]
            self.baseline = sum(measured) / len(measured) if measured else None
            if self.baseline is not None:  # the baseline window itself cannot trigger the switch
                self.lambda_t = 0.0
                self.t += 1
                return self.lambda_t
        threshold = self.active_threshold
        if self.transition_step is None and threshold is not None and len(self.recent) == self.window:
            measured = not any(math.isnan(x) for x in self.recent)
            if measured and (all(x > threshold for x in self.recent) if self.window_test == "every"
                             else sum(self.recent) / len(self.recent) > threshold):
                self.transition_step = self.t
                self.event = {
                    "step": self.t,
                    "threshold": threshold,
                    "threshold_rule": self.threshold_rule,
                    "baseline": self.baseline,
                    "window": self.window,
                    "window_scores": list(self.recent),
                }
        self.lambda_t = self.lambda_at(self.t)
        self.t += 1
        return self.lambda_t

    # -- resumable state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "config": {
                "threshold": self.threshold,
                "window": self.window,
                "ramp_steps": self.ramp_steps,
                "peak": self.peak,
                "shape": self.shape,
                "steepness": self.steepness,
                "threshold_rule": self.threshold_rule,
                "margin": self.margin,
                "window_test": self.window_test,
            },
            "baseline": self.baseline,
            "t": self.t,
            "recent": list(self.recent),
            "transition_step": self.transition_step,
            "event": self.event,
            "lambda_t": self.lambda_t,
        }

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()["config"]
        if state["config"] != mine:
            diff = {k: (state["config"].get(k), v) for k, v in mine.items() if state["config"].get(k) != v}
            raise ValueError(f"curriculum state was saved with other settings (saved, current): {diff}")
        self.t = int(state["t"])
        self.baseline = state.get("baseline")
        self.recent = deque((float(x) for x in state["recent"]), maxlen=self.window)
        self.transition_step = state["transition_step"]
        self.event = state["event"]
        self.lambda_t = float(state["lambda_t"])


def switch_step(scores, cfg: "CurriculumConfig", **overrides) -> int | None:
    """The step a scheduler of ``cfg`` (with ``overrides``, e.g. ``margin=0.1``) switches at on the batch S_F series
    ``scores`` (None: never). Exact for any run whose trajectory up to that step had lambda 0 (see the module
    docstring), e.g. a run with ``peak = 0``."""
    fields = {k: getattr(cfg, k) for k in ("threshold", "window", "ramp_steps", "peak", "shape", "steepness",
                                            "threshold_rule", "margin", "window_test")}
    sched = CurriculumScheduler(**{**fields, **overrides})
    for x in scores:
        sched.update(float("nan") if x is None else x)
        if sched.transitioned:
            break
    return sched.transition_step
