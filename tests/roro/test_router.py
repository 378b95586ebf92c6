"""Router MLP shapes, the 5 state features, the router policy adapter and the reward."""

import math

import pytest
import torch

from rubricflow.grpo.types import Episode
from rubricflow.methods.roro.router.features import FEATURE_NAMES, router_state
from rubricflow.methods.roro.router.mlp import CALL_LRM, KEEP_SLM, STATE_DIM, RouterMLP, load_router, save_router
from rubricflow.methods.roro.router.train import RouterAdapter, trajectory_reward


def test_mlp_is_two_layers_of_128_on_5_features():
    r = RouterMLP()
    linears = [m for m in r.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(5, 128), (128, 2)]
    assert STATE_DIM == len(FEATURE_NAMES) == 5
    x = torch.rand(3, 4, 5)
    assert r(x).shape == (3, 4, 2)
    lp = r.log_probs(x)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3, 4))
    with pytest.raises(ValueError, match="last dim 5"):
        r(torch.rand(2, 4))


def test_initial_policy_follows_init_bias():
    r = RouterMLP(init_call_bias=math.log(3))  # P(call) = 3 / (1 + 3)
    p = r.log_probs(torch.zeros(1, 5)).exp()[0]
    assert p[CALL_LRM].item() == pytest.approx(0.75, abs=0.02)  # small output weights: close to the bias
    assert r.act(torch.zeros(2, 5), greedy=True).tolist() == [CALL_LRM, CALL_LRM]
    g = torch.Generator().manual_seed(0)
    acts = r.act(torch.zeros(4000, 5), generator=g)
    assert 0.72 < acts.float().mean().item() < 0.78


def test_features_hand_computed():
    s = router_state([0.2, 0.6, 0.1], step_tokens=8, step_index=2, token_norm=16, step_norm=8)
    assert s == pytest.approx([0.1, 0.1, 0.3, 0.5, 0.25])
    assert router_state([0.4], 4, 0) == pytest.approx([0.4, 0.4, 0.4, 0.25, 0.0])
    with pytest.raises(ValueError, match="one uncertainty per step"):
        router_state([0.4, 0.5], 4, 0)


def test_adapter_logprobs_match_the_mlp():
    torch.manual_seed(0)
    r = RouterMLP()
    s1 = [[0.1, 0.1, 0.1, 0.5, 0.0], [0.8, 0.1, 0.45, 0.5, 0.125]]
    s2 = [[0.3, 0.3, 0.3, 0.25, 0.0]]
    eps = [Episode(s1, [KEEP_SLM, CALL_LRM], 1.0, "p"), Episode(s2, [CALL_LRM], 0.0, "p")]
    logp, mask, ent = RouterAdapter(r).action_logprobs(r, eps, with_entropy=True)
    assert logp.shape == mask.shape == ent.shape == (2, 2)
    assert mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    ref = r.log_probs(torch.tensor(s1))
    assert logp[0, 0].item() == pytest.approx(ref[0, KEEP_SLM].item())
    assert logp[0, 1].item() == pytest.approx(ref[1, CALL_LRM].item())
    assert logp[1, 1].item() == 0.0 and ent[1, 1].item() == 0.0
    logp.sum().backward()  # differentiable for the GRPO update
    assert r.net[0].weight.grad is not None
    with pytest.raises(ValueError, match="one state per decision"):
        RouterAdapter(r).action_logprobs(r, [Episode(s2, [0, 1], 0.0, "p")])


def test_reward_hand_computed_and_missing():
    assert trajectory_reward(True, 0.4, 6, 24, process_weight=0.5, cost_weight=1.0) == pytest.approx(1 + 0.2 - 0.25)
    assert trajectory_reward(False, None, 0, 24, process_weight=0.0, cost_weight=1.0) == 0.0
    assert math.isnan(trajectory_reward(True, None, 6, 24, process_weight=0.5, cost_weight=1.0))


def test_save_load_round_trip(tmp_path):
    r = RouterMLP(hidden=16)
    save_router(r, tmp_path / "r.pt", meta={"tag": "x", "cost_weight": 0.5})
    r2, meta = load_router(tmp_path / "r.pt")
    x = torch.rand(3, 5)
    assert torch.allclose(r(x), r2(x)) and meta["cost_weight"] == 0.5


def test_fifth_feature_is_the_step_index_or_nothing():
    assert router_state([0.2, 0.6, 0.1], 8, 2, 16, 8, fifth="none") == pytest.approx([0.1, 0.1, 0.3, 0.5, 0.0])
    with pytest.raises(ValueError, match="fifth feature 'lrm_calls'"):
        router_state([0.4], 4, 0, fifth="lrm_calls")


def test_reward_probes_no_process_credit_for_skipping_work():
    from rubricflow.config import config_from_dict

    # a route cut off before its final answer earns no process credit, whatever the Judge says
    assert trajectory_reward(False, 1.0, 0, 24, 0.5, 0.2, finished=False) == 0.0
    assert trajectory_reward(False, 1.0, 0, 24, 0.5, 0.2, finished=True) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="process score 1.5: expected a number in \\[0, 1\\]"):
        trajectory_reward(True, 1.5, 0, 24, 0.5, 0.2)
    # adversarial: an all-SLM route (no LRM work) that gets the answer wrong but fools the Judge completely (process
    # 1.0) never out-earns the right all-LRM route the Judge scores 0 while cost_weight < 1 - process_weight; the
    # default sweep also has larger weights (the routers reach low costs only there), where it does: the bound is
    # stated in the sweep's description and the README, and the oracle's process score cannot be fooled
    r = config_from_dict({}).roro.router
    assert r.process_weight < 1.0
    bound = 1.0 - r.process_weight
    for cw in r.sweep_cost_weights:
        skip = trajectory_reward(False, 1.0, 0, 24, r.process_weight, cw)
        work = trajectory_reward(True, 0.0, 24, 24, r.process_weight, cw)
        assert (skip < work) == (cw < bound), cw
    assert "1 - process_weight" in type(r).model_fields["sweep_cost_weights"].description
    # nor does any wrong route out-earn a right one of the same cost
    for p_wrong in (0.0, 0.5, 1.0):
        for tokens in (0, 8, 24):
            assert trajectory_reward(False, p_wrong, tokens, 24, 0.5, 0.4) < trajectory_reward(True, 0.0, tokens, 24,
                                                                                              0.5, 0.4)


def test_the_routers_advantage_scaling_keeps_the_cost_weight_acting():
    """Why the router's GRPO scales by the batch std (roro_router_tune): a group whose routes all score the same
    outcome differs only in cost; divided by its own small std, that difference becomes a full-size "call less"
    advantage whatever the cost weight, while the batch std keeps it as small as the weight says."""
    from rubricflow.config import config_from_dict
    from rubricflow.grpo.core import grouped_advantages

    costs = [0, 6, 12, 24]  # LRM tokens of four routes of each problem, all-LRM = 24

    def advantages(cw, scale):
        lucky = [trajectory_reward(True, None, c, 24, 0.0, cw) for c in costs]  # every route right
        mixed = [trajectory_reward(c >= 12, None, c, 24, 0.0, cw) for c in costs]  # calling fixes the answer
        adv = grouped_advantages(torch.tensor(lucky + mixed), ["lucky"] * 4 + ["mixed"] * 4, scale=scale)
        return adv[:4].abs().max().item(), adv[4:].abs().max().item()

    small, big = advantages(0.02, "group"), advantages(0.4, "group")
    assert small[0] == pytest.approx(big[0], rel=5e-2) and small[0] > 1.0  # the weight is gone from the lucky group
    small, big = advantages(0.02, "batch"), advantages(0.4, "batch")
    assert small[0] < 0.1 * small[1]  # at a small weight the cost-only group barely moves the router
    assert big[0] / small[0] > 10  # and it grows with the weight
    assert config_from_dict({}).roro.router.grpo.scale_rewards == "batch"


def test_the_router_resume_key_follows_the_sections_declarations():
    """What may differ between an interrupted router run and its resumption comes from the section's declarations
    (outputs, resumable GRPO fields), not a hand list; the cost weights travel with the run."""
    from rubricflow.config import config_from_dict
    from rubricflow.grpo.checkpoint import resume_key
    from rubricflow.methods.roro.router.train import RouterRun, resume_parts

    rc = config_from_dict({}).roro.router
    run = RouterRun("roro-cw0.2", 1.0, 0.2, "roro")
    base = resume_key(resume_parts(run, rc, 1, ["m"], []))
    same = rc.model_copy(update={"checkpoint_dir": "elsewhere", "cost_weight": 0.5, "sweep_cost_weights": [0.1],
                                 "grpo": rc.grpo.model_copy(update={"steps": 999, "checkpoint_every": 3})})
    assert resume_key(resume_parts(run, same, 1, ["m"], [])) == base
    other = rc.model_copy(update={"grpo": rc.grpo.model_copy(update={"lr": 0.5})})
    assert resume_key(resume_parts(run, other, 1, ["m"], [])) != base
    assert resume_key(resume_parts(RouterRun("roro-cw0.5", 1.0, 0.5, "roro"), rc, 1, ["m"], [])) != base
