"""The router start that imitates the threshold policy (roro.router.start: threshold)."""

import pytest
import torch

from rubricflow.config import config_from_dict
from rubricflow.methods.roro.env.routing import ConstantPolicy, RouterPolicy, ThresholdPolicy
from rubricflow.methods.roro.router.imitate import best_threshold, clone, threshold_start
from rubricflow.methods.roro.router.mlp import RouterMLP
from rubricflow.methods.roro.router.train import OracleScorer, RouterRun, train_router
from tests.roro.test_parity import KEEPS, _env, _problem

# the SLM slips at step 2 with uncertainty 0.9 (every other step 0.05): a threshold between them calls the LRM
# exactly there, which makes every route right for one LRM call
PROBLEMS = [_problem(*KEEPS, "value"), _problem(2, [("add", 1), ("add", 2), ("add", 1)], "value")]


def _all_lrm(env):
    return {t.problem_id: t.lrm_tokens for t in env.rollout(PROBLEMS, ConstantPolicy(1))}


def test_the_start_threshold_is_the_best_outcome_minus_cost_rule_on_the_training_problems():
    env = _env()
    th, reward, routes = best_threshold(env, PROBLEMS, [0.0, 0.5, 1.0], 0.2, _all_lrm(env))
    assert th == 0.5 and [t.actions for t in routes] == [[0, 1, 0, 0], [0, 1, 0, 0]]
    assert all(t.outcome for t in routes) and 0.8 < reward < 1.0  # right, one LRM call of four steps
    # at a prohibitive cost weight, never calling the LRM earns most (ties go to the higher, cheaper threshold)
    assert best_threshold(env, PROBLEMS, [0.0, 0.5, 1.0], 5.0, _all_lrm(env))[0] == 1.0
    with pytest.raises(ValueError, match="roro.eval.thresholds"):
        best_threshold(env, PROBLEMS, [], 0.2, _all_lrm(env))


def test_the_cloned_router_acts_as_the_rule_and_keeps_its_exploration():
    env = _env()
    _, _, routes = best_threshold(env, PROBLEMS, [0.5], 0.2, _all_lrm(env))
    torch.manual_seed(0)
    router = RouterMLP()
    before = torch.get_rng_state()
    agreement = clone(router, routes, steps=300, lr=1e-2, seed=1, explore=0.1)
    assert torch.equal(before, torch.get_rng_state())  # the caller's random stream is untouched
    assert agreement == 1.0
    greedy = env.rollout(PROBLEMS, RouterPolicy(router, greedy=True))
    assert [t.actions for t in greedy] == [t.actions for t in env.rollout(PROBLEMS, ThresholdPolicy(0.5))]
    states = torch.tensor([s for t in routes for s in t.states])
    p_call = router.log_probs(states).exp()[:, 1]
    actions = torch.tensor([a for t in routes for a in t.actions])
    p_other = torch.where(actions == 1, 1 - p_call, p_call)
    assert p_other.max().item() == pytest.approx(0.1, abs=0.03)  # not cloned to certainty
    with pytest.raises(ValueError, match="start_explore"):
        clone(RouterMLP(), routes, steps=1, lr=1e-2, seed=1, explore=0.5)


def test_every_method_at_one_cost_weight_starts_from_the_same_router(tmp_path):
    env = _env()
    rcfg = config_from_dict({}, overrides={"roro.router.start": "threshold", "roro.router.grpo.steps": 1,
                                           "roro.router.grpo.group_size": 2, "roro.router.grpo.prompts_per_step": 2,
                                           "roro.router.grpo.checkpoint_every": 0}).roro.router
    starts = {}
    for method, pw in (("outcome-only", 0.0), ("oracle-process", 0.5)):
        _, summ = train_router(RouterRun(f"{method}-cw0.2", pw, 0.2, method), env, PROBLEMS, rcfg, OracleScorer(),
                               tmp_path / "ckpt", seed=3, start_thresholds=[0.0, 0.5, 1.0])
        starts[method] = summ["start"]
    assert starts["outcome-only"] == starts["oracle-process"]
    assert starts["outcome-only"]["threshold"] == 0.5 and starts["outcome-only"]["agreement"] == 1.0
    coin = config_from_dict({}, overrides={"roro.router.grpo.steps": 1, "roro.router.grpo.group_size": 2,
                                           "roro.router.grpo.prompts_per_step": 2,
                                           "roro.router.grpo.checkpoint_every": 0}).roro.router
    _, summ = train_router(RouterRun("outcome-cw0.2", 0.0, 0.2, "outcome-only"), env, PROBLEMS, coin, None,
                           tmp_path / "ckpt2", seed=3)
    assert coin.start == "coin" and "start" not in summ


def test_threshold_start_reports_what_it_cloned():
    env = _env()
    out = threshold_start(RouterMLP(), env, PROBLEMS, [0.5, 1.0], 0.2, _all_lrm(env), steps=200, lr=1e-2, seed=0,
                          explore=0.1)
    assert out["threshold"] == 0.5 and out["call_rate"] == 0.25 and out["agreement"] == 1.0
    with pytest.raises(Exception, match="start_explore"):
        config_from_dict({}, overrides={"roro.router.start_explore": 0.5})


def test_the_capacity_study_differs_from_base_only_in_the_setting_and_is_chosen_on_val():
    from rubricflow import registry
    from rubricflow.methods.roro.study.specs import CAPACITY_SETTINGS

    _, decl = registry.studies()["roro_router_capacity"]
    spec = decl.spec()
    assert spec.eval_split == "val" and spec.untrained == ["threshold"] and len(spec.seeds) >= 3
    assert list(spec.selection.settings)[0] == "base"  # the current default wins an exact tie
    base = spec.variants["base"]
    for name, extra in CAPACITY_SETTINGS.items():
        assert spec.variants[name] == {**base, **extra}  # one training budget / start apart, same reward
        assert spec.variants[name]["roro.router.methods"] == ["oracle-process"]
    gated = {p.variant: p.gates for p in spec.preconditions}
    assert all(gated[name] == [f"{name} vs threshold (chain_range_auc)"] for name in CAPACITY_SETTINGS)
    assert all(c.exploratory for c in spec.claims)  # three val seeds choose a setting; they claim nothing
