"""A router start that imitates the threshold policy (``roro.router.start: threshold``).

A coin-flip start (``start: coin``, the paper's) leaves GRPO to find from scratch what a one-feature rule already
does well: call the LRM when the current step's uncertainty is high. With few training problems and steps the
learned routers end below that rule. This start first fits the router by behaviour cloning to the threshold
policy that earns the most ``outcome - cost_weight * cost`` on the *training* problems (the candidates are
``roro.eval.thresholds``; val and test are never read), so GRPO starts at the rule and the process reward has to
improve on it. The chosen threshold depends only on the cost weight and the training problems, never on the
process reward, so every router method at one cost weight starts from the same weights (a fair control).

Cloning: the threshold policy's routes on the training problems give (state, action) pairs; the MLP is fitted by
full-batch Adam on their cross-entropy for ``start_steps`` steps, seeded, towards ``1 - start_explore`` on the rule's
action and ``start_explore`` on the other: a router cloned to certainty samples the rule's route every time, every
GRPO group is then flat and nothing moves it, so the start keeps that much exploration. The summary records the
threshold, its training reward and the share of the cloned states on which the fitted router's greedy action agrees
with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rubricflow.methods.roro.env.routing import RoutingEnv, ThresholdPolicy, Trajectory
from rubricflow.methods.roro.env.task import Problem


def route_reward(t: Trajectory, all_lrm_tokens: int, cost_weight: float) -> float:
    """``outcome - cost_weight * lrm_tokens / all_lrm_tokens``: the outcome-only reward of one route."""
    return float(t.outcome) - cost_weight * (t.lrm_tokens / all_lrm_tokens if all_lrm_tokens > 0 else 0.0)


def best_threshold(env: RoutingEnv, problems: Sequence[Problem], thresholds: Sequence[float], cost_weight: float,
                   all_lrm: dict[str, int]) -> tuple[float, float, list[Trajectory]]:
    """The threshold of ``thresholds`` whose routes on ``problems`` earn the highest mean outcome-only reward at
    ``cost_weight`` (ties: the higher threshold, the cheaper rule); returns it, its mean reward and its routes."""
    if not thresholds:
        raise ValueError("roro.eval.thresholds: the threshold start needs at least one candidate threshold")
    best = None
    for th in sorted(set(thresholds)):
        routes = env.rollout(problems, ThresholdPolicy(th))
        mean = sum(route_reward(t, all_lrm[t.problem_id], cost_weight) for t in routes) / max(1, len(routes))
        if best is None or mean >= best[1]:
            best = (th, mean, routes)
    return best


def clone(router: torch.nn.Module, routes: list[Trajectory], steps: int, lr: float, seed: int,
          explore: float = 0.0) -> float:
    """Fit ``router`` to the actions of ``routes`` (cross-entropy towards ``1 - explore`` on each route's action,
    full-batch Adam, ``steps`` steps); returns the share of their states on which the fitted router's greedy action
    is the route's action."""
    if not 0.0 <= explore < 0.5:
        raise ValueError(f"roro.router.start_explore {explore!r}: expected a probability in [0, 0.5)")
    states = torch.tensor([s for t in routes for s in t.states], dtype=torch.float32)
    actions = torch.tensor([a for t in routes for a in t.actions], dtype=torch.long)
    if not len(actions):
        raise ValueError("threshold start: the threshold routes have no routing decisions to clone")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        opt = torch.optim.Adam(router.parameters(), lr=lr)
        router.train()
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(router(states), actions, label_smoothing=2 * explore)
            loss.backward()
            opt.step()
    router.eval()
    with torch.no_grad():
        return float((router(states).argmax(-1) == actions).float().mean())


def threshold_start(router: torch.nn.Module, env: RoutingEnv, problems: Sequence[Problem], thresholds: Sequence[float],
                    cost_weight: float, all_lrm: dict[str, int], steps: int, lr: float, seed: int,
                    explore: float = 0.0) -> dict:
    """Clone the best training threshold (:func:`best_threshold`) into ``router``; returns what the start was."""
    th, reward, routes = best_threshold(env, problems, thresholds, cost_weight, all_lrm)
    agreement = clone(router, routes, steps, lr, seed, explore)
    calls = sum(sum(t.actions) for t in routes) / max(1, sum(len(t.actions) for t in routes))
    return {"threshold": th, "train_reward": reward, "call_rate": calls, "agreement": agreement}
