"""Pair construction: outcome first, then LRM cost, then process quality; ties make no pair."""

import pytest

from rubricflow.methods.roro.env.routing import LRM, SLM, StepRecord, Trajectory
from rubricflow.methods.roro.judge.pairs import build_trajectory_pairs, compare


def traj(pid, writers, slm_correct, outcome, lrm_tokens_per_call=5, policy="p"):
    steps = []
    for k, (w, ok) in enumerate(zip(writers, slm_correct)):
        steps.append(StepRecord(
            index=k, writer=w, text=f"s{k}{w}", n_tokens=5, slm_text=f"s{k}", slm_tokens=5, slm_uncertainty=0.1,
            slm_correct=ok, lrm_text=f"l{k}" if w == LRM else None, lrm_tokens=lrm_tokens_per_call if w == LRM else 0,
            lrm_correct=True if w == LRM else None, correct=True if w == LRM else ok, on_track=None,
            state=[0.1] * 5, action=int(w == LRM)))
    return Trajectory(pid, "train", policy, "q", steps, outcome, True)


S, L = SLM, LRM


def test_outcome_beats_cost():
    right_expensive = traj("a", [L, L, L], [True, False, True], True)
    wrong_cheap = traj("a", [S, S, S], [True, False, True], False)
    assert compare(right_expensive, wrong_cheap) == (1, "outcome")
    assert compare(wrong_cheap, right_expensive) == (-1, "outcome")


def test_cost_decides_equal_outcomes_beyond_margin():
    one_call = traj("a", [S, L, S], [True, False, True], True)
    three_calls = traj("a", [L, L, L], [True, False, True], True)
    assert compare(one_call, three_calls) == (1, "cost")  # 5 vs 15 LRM tokens
    assert compare(one_call, three_calls, cost_margin=10) == (1, "process")  # |10| not > 10: process decides
    # process: both intervened at the SLM error; the expensive one wasted 2 calls
    assert compare(one_call, three_calls, order=["outcome", "process", "cost"]) == (1, "process")


def test_process_prefers_intervention_before_error_propagates():
    # both wrong, same cost (one call): A called the LRM at the SLM's error, B wasted it on a correct step and
    # kept the error
    a = traj("a", [S, L, S], [True, False, False], False)
    b = traj("a", [L, S, S], [True, False, False], False)
    assert a.accepted_slm_errors == 1 and b.accepted_slm_errors == 2
    assert compare(a, b) == (1, "process")
    assert compare(b, a) == (-1, "process")


def test_no_criterion_no_pair():
    a = traj("a", [S, S], [True, True], True)
    b = traj("a", [S, S], [True, True], True, policy="other")
    assert compare(a, b) == (0, None)
    with pytest.raises(ValueError, match="unknown criterion 'speed'"):
        compare(a, b, order=["speed"])


def test_build_trajectory_pairs_orders_and_caps_per_problem():
    ts = [
        traj("a", [S, S, S], [True, False, True], False),  # 0
        traj("a", [S, L, S], [True, False, True], True),  # 1
        traj("a", [L, L, L], [True, False, True], True),  # 2
        traj("b", [S, S], [True, True], True),  # 3
        traj("b", [L, S], [True, True], True),  # 4
    ]
    pairs = build_trajectory_pairs(ts)
    got = {(p.chosen, p.rejected, p.reason) for p in pairs}
    assert got == {(1, 0, "outcome"), (2, 0, "outcome"), (1, 2, "cost"), (3, 4, "cost")}
    capped = build_trajectory_pairs(ts, max_per_problem=2, seed=0)
    a_pairs = [p for p in capped if p.problem_id == "a"]
    assert len(a_pairs) == 2 and {p.reason for p in a_pairs} == {"outcome", "cost"}  # round-robin over reasons
    assert all(ts[p.chosen].problem_id == ts[p.rejected].problem_id for p in capped)


def test_same_number_of_calls_is_the_same_cost_and_process_decides():
    from rubricflow.methods.roro.judge.pairs import category

    # both wrong, one call each: A called the op step where the SLM erred (8 tokens), B the final restatement (4)
    a = traj("a", [S, L, S], [True, False, False], False, lrm_tokens_per_call=8)
    b = traj("a", [S, S, L], [True, False, True], False, lrm_tokens_per_call=4)
    assert a.lrm_calls == b.lrm_calls == 1 and a.lrm_tokens > b.lrm_tokens
    assert compare(a, b) == (1, "process")  # counted in calls: a tie, so placement decides (A intervened)
    assert compare(a, b, cost_unit="lrm_tokens") == (-1, "cost")  # counted in tokens: B is cheaper
    with pytest.raises(ValueError, match="pairs.cost_unit: unknown unit 'flops'"):
        compare(a, b, cost_unit="flops")
    ts = [a, b, traj("a", [L, L, S], [True, False, True], True)]
    pairs = build_trajectory_pairs(ts)
    assert {(p.chosen, p.rejected, category(p, ts)) for p in pairs} == {
        (0, 1, "process-wrong"), (2, 0, "outcome"), (2, 1, "outcome")}


def test_split_balance_gives_each_reason_an_equal_share_of_the_budget():
    from rubricflow.methods.roro.judge.pairs import category_counts

    # problem a: 1 outcome pair + 1 cost pair + 1 process pair available (4 routes, 6 pairs: see below)
    # problem b: outcome and cost pairs only
    a = [traj("a", [S, L, S], [True, False, False], False),  # 1 call, intervened
         traj("a", [L, S, S], [True, False, False], False),  # 1 call, wasted: process pair with the first
         traj("a", [L, L, L], [True, False, False], True)]   # right: outcome pairs with both
    b = [traj("b", [S, S], [True, True], True), traj("b", [L, S], [True, True], True),
         traj("b", [L, L], [True, True], True), traj("b", [S, S], [False, True], False)]
    ts = a + b
    available = {}
    every = build_trajectory_pairs(ts, available=available)
    assert available == {"outcome": 5, "cost": 3, "process-wrong": 1}
    assert category_counts(every, ts) == {**available, "process-right": 0}
    # per problem, a cap of 2: problem a keeps outcome + cost... it has no cost pair: outcome + process
    per_problem = build_trajectory_pairs(ts, max_per_problem=2, seed=0, balance="problem")
    assert category_counts(per_problem, ts) == {"outcome": 2, "cost": 1, "process-right": 0, "process-wrong": 1}
    # split-wide: budget 2 * 2 problems = 4; shares 1 / 1 / 1 plus the left-over one to the first open reason
    split = build_trajectory_pairs(ts, max_per_problem=2, seed=0, balance="split")
    assert category_counts(split, ts) == {"outcome": 2, "cost": 1, "process-right": 0, "process-wrong": 1}
    assert len({(p.chosen, p.rejected) for p in split}) == 4  # no pair drawn twice
    assert {p.problem_id for p in split if p.reason == "outcome"} == {"a", "b"}  # round-robin over problems
    with pytest.raises(ValueError, match="pairs.balance: unknown rule 'global'"):
        build_trajectory_pairs(ts, max_per_problem=2, balance="global")
