"""The oracle process reward (``roro.router.methods: [oracle-process]``): read off the checked steps, it orders routes
that the outcome cannot (a lucky accepted error under the parity reading) and charges a wasted LRM call."""

import pytest

from rubricflow.config import config_from_dict
from rubricflow.methods.roro.router.train import OracleScorer, oracle_process_score, router_runs, trajectory_reward
from rubricflow.methods.roro.env.routing import RoutingEnv
from tests.roro.test_parity import KEEPS, Chain, _problem


def _routes(answer_kind):
    env = RoutingEnv(Chain("slm", slip=1), Chain("lrm"), "slm:x", "lrm:x", max_steps=6)
    p = _problem(*KEEPS, answer_kind)  # the SLM slips at step 2; doubled later, the slip keeps the final parity
    routes = {tuple(t.actions): t for t in env.enumerate_routes([p])}
    all_lrm = routes[(1, 1, 1, 1)].lrm_tokens
    return routes, all_lrm


def _reward(t, all_lrm, process_weight):
    return trajectory_reward(t.outcome, oracle_process_score(t), t.lrm_tokens, all_lrm, process_weight, 0.2, t.finished)


def test_oracle_ranks_a_lucky_accepted_error_below_the_same_cost_route_without():
    routes, all_lrm = _routes("parity")
    lucky, saved = routes[(0, 0, 1, 0)], routes[(0, 1, 0, 0)]  # one LRM call each: wasted at step 3 / at the slip
    assert lucky.lrm_tokens == saved.lrm_tokens and lucky.outcome and saved.outcome
    assert (lucky.accepted_slm_errors, lucky.chain_exact, saved.chain_exact) == (1, False, True)
    assert _reward(lucky, all_lrm, 0.0) == _reward(saved, all_lrm, 0.0)  # outcome-only cannot tell them apart
    assert oracle_process_score(lucky) == pytest.approx(1 - 2 / 4)  # an accepted error and a wasted call
    assert oracle_process_score(saved) == 1.0
    assert _reward(lucky, all_lrm, 0.5) < _reward(saved, all_lrm, 0.5)


def test_oracle_ranks_a_wasted_call_below_the_route_that_saved_it():
    routes, all_lrm = _routes("value")
    wasteful, lean = routes[(1, 1, 0, 0)], routes[(0, 1, 0, 0)]  # the same steps; step 1 also sent to the LRM
    assert [s.text for s in wasteful.steps] == [s.text for s in lean.steps] and wasteful.wasted_calls == 1
    assert oracle_process_score(wasteful) == pytest.approx(0.75) and oracle_process_score(lean) == 1.0
    assert _reward(wasteful, all_lrm, 0.5) < _reward(lean, all_lrm, 0.5)
    scorer = OracleScorer()
    assert scorer.scores([wasteful, lean, wasteful]) == pytest.approx([0.75, 1.0, 0.75]) and scorer.failures == 0


def test_oracle_process_routers_are_a_method_of_their_own():
    rc = config_from_dict({}, overrides={"roro.router.methods": ["oracle-process", "outcome-only"],
                                         "roro.router.sweep_cost_weights": [0.1, 0.2]}).roro
    runs = {r.tag: r for r in router_runs(rc)}
    assert set(runs) == {"oracle-cw0.1", "oracle-cw0.2", "outcome-cw0.1", "outcome-cw0.2"}
    assert runs["oracle-cw0.1"].method == "oracle-process" and runs["oracle-cw0.1"].process_weight == 0.5
    assert runs["outcome-cw0.2"].process_weight == 0.0
