"""The stepwise routing environment: SLM proposes, the router keeps it or calls the LRM, repeat.

At step k of a problem:

1. the SLM proposes the next step from the current prefix (greedy; uncertainty from its token probabilities);
2. the router sees the 5-dim state of that proposal (``router.features.router_state``) and picks 0 (keep the SLM's
   step) or 1 (call the LRM, whose step replaces it);
3. the kept step is appended; it is checked against the problem (``task.check_step``), its written result is the
   value carried into the next step, so an accepted error propagates.

The episode ends after a final ``#### N`` step or ``max_steps``. Cost: the LRM's generated tokens (and a FLOPs
estimate ``2 * params * tokens`` per model). The SLM proposes at every step, so its tokens are paid always.

Both step models decode greedily, so a prefix determines the next step: ``StepCache`` memoises steps per
(model fingerprint, prefix), which makes GRPO's many rollouts of the same problems cheap, and can be saved to and
loaded from a JSONL file between stages.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from rubricflow.util.io import iter_jsonl, write_jsonl
from rubricflow.methods.roro.router.features import router_state
from rubricflow.methods.roro.env.step_lm import StepModel, StepOutput, prefix_text
from rubricflow.methods.roro.env.task import Problem, answer_correct, check_step, is_final

SLM, LRM = "SLM", "LRM"


# ----------------------------------------------------------------------------------------------------------------
# Records


@dataclass
class StepRecord:
    index: int
    writer: str  # SLM | LRM: who wrote the kept step
    text: str  # the kept step
    n_tokens: int  # tokens of the kept step
    slm_text: str  # the SLM's proposal (always generated)
    slm_tokens: int
    slm_uncertainty: float
    slm_correct: bool | None  # the proposal is locally correct (None: not checkable)
    lrm_text: str | None  # the LRM's step when it was called
    lrm_tokens: int
    lrm_correct: bool | None
    correct: bool | None  # the kept step is locally correct
    on_track: bool | None  # the kept step's result equals the true intermediate value
    state: list[float]  # router state at this decision
    action: int  # 0 keep SLM, 1 call LRM


@dataclass
class Trajectory:
    problem_id: str
    split: str
    policy: str
    question: str
    steps: list[StepRecord]
    outcome: bool  # the final answer is right
    finished: bool  # ended with a final '#### N' step (else cut at max_steps)
    slm_params: int = 0
    lrm_params: int = 0
    meta: dict = field(default_factory=dict)

    # -- cost ------------------------------------------------------------------------------------------------
    @property
    def lrm_tokens(self) -> int:
        return sum(s.lrm_tokens for s in self.steps if s.writer == LRM)

    @property
    def slm_tokens(self) -> int:
        return sum(s.slm_tokens for s in self.steps)

    @property
    def lrm_calls(self) -> int:
        return sum(1 for s in self.steps if s.writer == LRM)

    @property
    def lrm_flops(self) -> float:
        return 2.0 * self.lrm_params * self.lrm_tokens

    @property
    def total_flops(self) -> float:
        return self.lrm_flops + 2.0 * self.slm_params * self.slm_tokens

    # -- process quality (checkable problems) ----------------------------------------------------------------
    @property
    def accepted_slm_errors(self) -> int | None:
        """SLM proposals that were wrong and kept (the error then propagates)."""
        if any(s.slm_correct is None for s in self.steps):
            return None
        return sum(1 for s in self.steps if s.writer == SLM and s.slm_correct is False)

    @property
    def interventions(self) -> int | None:
        """LRM calls on steps where the SLM's proposal was wrong (the error was stopped before propagating)."""
        if any(s.slm_correct is None for s in self.steps):
            return None
        return sum(1 for s in self.steps if s.writer == LRM and s.slm_correct is False)

    @property
    def wasted_calls(self) -> int | None:
        """LRM calls on steps the SLM had right."""
        if any(s.slm_correct is None for s in self.steps):
            return None
        return sum(1 for s in self.steps if s.writer == LRM and s.slm_correct is True)

    @property
    def chain_exact(self) -> bool | None:
        """Every kept step locally right and the route finished with its final answer (so every written value is
        the true one), whatever the question asks; None when the steps are not checkable."""
        if any(s.correct is None for s in self.steps):
            return None
        return self.finished and all(s.correct for s in self.steps)

    @property
    def first_error_step(self) -> int | None:
        """Index of the first kept step that is not locally correct (None: none, or not checkable)."""
        for s in self.steps:
            if s.correct is False:
                return s.index
        return None

    @property
    def actions(self) -> list[int]:
        return [s.action for s in self.steps]

    @property
    def states(self) -> list[list[float]]:
        return [s.state for s in self.steps]

    def key(self) -> tuple:
        """Identity of the solution (what was written by whom): trajectories from different policies that made
        the same decisions are the same trajectory."""
        return (self.problem_id, tuple((s.writer, s.text) for s in self.steps))

    def to_row(self) -> dict:
        return {
            "problem_id": self.problem_id, "split": self.split, "policy": self.policy, "question": self.question,
            "steps": json.dumps([asdict(s) for s in self.steps]), "outcome": self.outcome,
            "finished": self.finished, "lrm_tokens": self.lrm_tokens, "slm_tokens": self.slm_tokens,
            "lrm_calls": self.lrm_calls, "n_steps": len(self.steps), "lrm_flops": self.lrm_flops,
            "total_flops": self.total_flops, "slm_params": self.slm_params, "lrm_params": self.lrm_params,
            "accepted_slm_errors": self.accepted_slm_errors, "interventions": self.interventions,
            "wasted_calls": self.wasted_calls, "first_error_step": self.first_error_step,
            "chain_exact": self.chain_exact,
            "writers": "".join("L" if s.writer == LRM else "S" for s in self.steps),
            "actions": json.dumps(self.actions), "states": json.dumps(self.states), "meta": json.dumps(self.meta),
        }

    @classmethod
    def from_row(cls, row: dict) -> "Trajectory":
        steps = [StepRecord(**s) for s in json.loads(row["steps"])]
        meta = row.get("meta")
        return cls(
            problem_id=row["problem_id"], split=row["split"], policy=row["policy"], question=row["question"],
            steps=steps, outcome=bool(row["outcome"]), finished=bool(row["finished"]),
            slm_params=int(row.get("slm_params") or 0), lrm_params=int(row.get("lrm_params") or 0),
            meta=json.loads(meta) if isinstance(meta, str) and meta else {},
        )


# ----------------------------------------------------------------------------------------------------------------
# Step cache


class StepCache:
    """Greedy steps per (model fingerprint, prefix). ``get`` generates the misses in one batch."""

    def __init__(self):
        self.entries: dict[tuple[str, str], StepOutput] = {}
        self.hits = 0
        self.misses = 0

    def get(self, model: StepModel, fingerprint: str, prefixes: list[str]) -> list[StepOutput]:
        todo = list(dict.fromkeys(p for p in prefixes if (fingerprint, p) not in self.entries))
        if todo:
            for p, out in zip(todo, model.propose(todo)):
                self.entries[(fingerprint, p)] = out
        self.misses += len(todo)
        self.hits += len(prefixes) - len(todo)
        return [self.entries[(fingerprint, p)] for p in prefixes]

    def save(self, path: str | Path) -> Path:
        return write_jsonl(path, ({"model": fp, "prefix": prefix, **asdict(o)}
                                  for (fp, prefix), o in sorted(self.entries.items())))

    def load(self, path: str | Path) -> int:
        """Add the entries of a saved cache; returns how many were read."""
        n = 0
        for lineno, row in iter_jsonl(path):
            try:
                self.entries[(row["model"], row["prefix"])] = StepOutput(
                    row["text"], int(row["n_tokens"]), float(row["uncertainty"]), bool(row["finished"])
                )
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: not a step-cache row ({e})") from None
            n += 1
        return n


def model_fingerprint(name: str, path: str | Path) -> str:
    """``name:sha256[:12]`` of the weights file for a local model directory, else ``name:<id>``."""
    p = Path(path)
    weights = p / "model.safetensors"
    if weights.exists():
        return f"{name}:{hashlib.sha256(weights.read_bytes()).hexdigest()[:12]}"
    return f"{name}:{path}"


# ----------------------------------------------------------------------------------------------------------------
# Policies


class RoutingPolicy(Protocol):
    name: str

    def decide(self, states: torch.Tensor) -> list[int]:
        """One action per row of ``states [N, 5]``: 0 keep the SLM's step, 1 call the LRM."""
        ...


@dataclass
class ConstantPolicy:
    action: int
    name: str = ""

    def __post_init__(self):
        self.name = self.name or ("all-lrm" if self.action else "all-slm")

    def decide(self, states: torch.Tensor) -> list[int]:
        return [self.action] * states.shape[0]


@dataclass
class RandomPolicy:
    rate: float  # P(call LRM) per step
    seed: int = 0
    name: str = ""

    def __post_init__(self):
        self.name = self.name or f"random-{self.rate:g}"
        self.rng = random.Random(self.seed)

    def decide(self, states: torch.Tensor) -> list[int]:
        return [int(self.rng.random() < self.rate) for _ in range(states.shape[0])]


@dataclass
class ThresholdPolicy:
    threshold: float  # call the LRM when the current-step uncertainty exceeds it
    name: str = ""

    def __post_init__(self):
        self.name = self.name or f"threshold-{self.threshold:g}"

    def decide(self, states: torch.Tensor) -> list[int]:
        return (states[:, 0] > self.threshold).long().tolist()


class RouterPolicy:
    """The MLP router: greedy (evaluation) or sampled (GRPO rollouts) actions."""

    def __init__(self, router: torch.nn.Module, greedy: bool, name: str = "router", seed: int | None = None):
        self.router, self.greedy, self.name = router, greedy, name
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None

    def decide(self, states: torch.Tensor) -> list[int]:
        return self.router.act(states, greedy=self.greedy, generator=self.generator).tolist()


# ----------------------------------------------------------------------------------------------------------------
# Environment


@dataclass
class _Live:
    problem: Problem
    repeat: int
    steps: list[StepRecord] = field(default_factory=list)
    uncertainties: list[float] = field(default_factory=list)
    carried: int | None = None
    done: bool = False
    finished: bool = False


class RoutingEnv:
    def __init__(
        self,
        slm: StepModel,
        lrm: StepModel,
        slm_fingerprint: str,
        lrm_fingerprint: str,
        max_steps: int = 6,
        token_norm: float = 16.0,
        step_norm: float = 8.0,
        cache: StepCache | None = None,
        fifth_feature: str = "step_index",
    ):
        self.slm, self.lrm = slm, lrm
        self.fp = {SLM: slm_fingerprint, LRM: lrm_fingerprint}
        self.max_steps, self.token_norm, self.step_norm = max_steps, token_norm, step_norm
        self.fifth_feature = fifth_feature
        self.cache = cache or StepCache()
        self._prompts: dict[tuple[str, str], str] = {}

    def _prompt(self, who: str, question: str) -> str:
        key = (who, question)
        if key not in self._prompts:
            self._prompts[key] = (self.slm if who == SLM else self.lrm).prompt(question)
        return self._prompts[key]

    def _steps(self, who: str, lives: list[_Live]) -> list[StepOutput]:
        model = self.slm if who == SLM else self.lrm
        prefixes = [prefix_text(self._prompt(who, lv.problem.question), [s.text for s in lv.steps]) for lv in lives]
        return self.cache.get(model, self.fp[who], prefixes)

    def rollout(self, problems: Sequence[Problem], policy: RoutingPolicy, repeats: int = 1) -> list[Trajectory]:
        """Route every problem ``repeats`` times with ``policy``; trajectories in (problem, repeat) order."""
        lives = [_Live(p, r, carried=p.start) for p in problems for r in range(repeats)]
        while True:
            active = [lv for lv in lives if not lv.done]
            if not active:
                break
            proposals = self._steps(SLM, active)
            states = []
            for lv, prop in zip(active, proposals):
                lv.uncertainties.append(prop.uncertainty)
                states.append(router_state(lv.uncertainties, prop.n_tokens, len(lv.steps), self.token_norm,
                                           self.step_norm, self.fifth_feature))
            actions = policy.decide(torch.tensor(states, dtype=torch.float32))
            called = [lv for lv, a in zip(active, actions) if a == 1]
            lrm_out = dict(zip(map(id, called), self._steps(LRM, called))) if called else {}
            for lv, prop, state, a in zip(active, proposals, states, actions):
                self._advance(lv, prop, lrm_out.get(id(lv)), state, int(a))
        return [self._finish(lv, policy.name) for lv in lives]

    def enumerate_routes(self, problems: Sequence[Problem]) -> list[Trajectory]:
        """Every routing decision sequence of every problem (2^steps trajectories each, fewer when routes end
        early): fills the step cache with the whole decision tree, so later rollouts on these problems are lookups.
        """
        lives = [_Live(p, 0, carried=p.start) for p in problems]
        done: list[_Live] = []
        while lives:
            proposals = self._steps(SLM, lives)
            lrm_steps = self._steps(LRM, lives)
            nxt: list[_Live] = []
            for lv, prop, lo in zip(lives, proposals, lrm_steps):
                us = lv.uncertainties + [prop.uncertainty]
                state = router_state(us, prop.n_tokens, len(lv.steps), self.token_norm, self.step_norm,
                                     self.fifth_feature)
                for a in (0, 1):
                    child = _Live(lv.problem, lv.repeat, list(lv.steps), list(us), lv.carried)
                    self._advance(child, prop, lo if a else None, state, a)
                    (done if child.done else nxt).append(child)
            lives = nxt
        return [self._finish(lv, "enumerate") for lv in done]

    def _advance(self, lv: _Live, prop: StepOutput, lrm: StepOutput | None, state: list[float], action: int) -> None:
        k = len(lv.steps)
        p = lv.problem
        slm_chk = check_step(p, k, prop.text, lv.carried)
        lrm_chk = check_step(p, k, lrm.text, lv.carried) if lrm is not None else None
        kept, chk = (lrm, lrm_chk) if action == 1 else (prop, slm_chk)
        lv.steps.append(
            StepRecord(
                index=k, writer=LRM if action == 1 else SLM, text=kept.text, n_tokens=kept.n_tokens,
                slm_text=prop.text, slm_tokens=prop.n_tokens, slm_uncertainty=prop.uncertainty,
                slm_correct=slm_chk.correct, lrm_text=lrm.text if lrm else None,
                lrm_tokens=lrm.n_tokens if lrm else 0, lrm_correct=lrm_chk.correct if lrm_chk else None,
                correct=chk.correct, on_track=chk.on_track, state=state, action=action,
            )
        )
        lv.carried = chk.value
        if is_final(kept.text):
            lv.done, lv.finished = True, True
        elif len(lv.steps) >= self.max_steps:
            lv.done = True

    def _finish(self, lv: _Live, policy_name: str) -> Trajectory:
        final = lv.steps[-1].text if lv.finished else None
        return Trajectory(
            problem_id=lv.problem.id, split=lv.problem.split, policy=policy_name, question=lv.problem.question,
            steps=lv.steps, outcome=answer_correct(lv.problem, final), finished=lv.finished,
            slm_params=self.slm.n_params, lrm_params=self.lrm.n_params, meta={"repeat": lv.repeat},
        )
