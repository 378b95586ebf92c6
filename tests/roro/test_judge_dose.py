"""The Judge-quality dose-response's scorers (``env.oracles``, ``roro.router.methods: [oracle-noisy |
exact-reader]``): the corrupted oracle hits its calibrated accuracy, its noise is fixed per route and seed, target 1.0
is the oracle, the exact reader reads a rubric literally, and the noisy scorer is what the router loop reads."""

import statistics
from dataclasses import dataclass, replace

import pytest

from rubricflow.config import config_from_dict
from rubricflow.methods.roro.study.judge_dose import dose_table, judge_dose_spec
from rubricflow.methods.roro.judge.pairs import Pair
from rubricflow.methods.roro.env.oracles import (
    SIGMA_MAX,
    NoisyOracleScorer,
    ReaderScorer,
    calibrate_sigma,
    literal_score,
    noisy_score,
    oracle_process_score,
    process_accuracy,
    route_noise,
)
from rubricflow.methods.roro.router.train import OracleScorer, RouterRun, router_runs, train_router
from rubricflow.judge.protocol import Parsed
from rubricflow.methods.roro.judge.rubric import criterion
from tests.roro.test_oracle import _routes
from tests.roro.test_parity import KEEPS, Chain, _problem


@dataclass
class FakeRoute:
    """What the calibration reads of a route: its identity, its outcome (the pair category) and a base score."""

    name: str
    outcome: bool
    base: float

    def key(self):
        return ("p", self.name)


def _synthetic(n_pairs=300):
    """``n_pairs`` process pairs whose chosen route's base score is higher by 0.1-0.5 (the base orders all)."""
    routes, pairs = [], []
    for k in range(n_pairs):
        lo = 0.1 + 0.4 * (k % 7) / 7
        hi = lo + 0.1 + 0.4 * (k % 5) / 5
        routes += [FakeRoute(f"c{k}", k % 2 == 0, hi), FakeRoute(f"r{k}", k % 2 == 0, lo)]
        pairs.append(Pair("p", 2 * k, 2 * k + 1, "process"))
    return routes, pairs


def test_calibration_hits_the_target_accuracy_on_synthetic_pairs():
    routes, pairs = _synthetic()
    base = lambda t: t.base  # noqa: E731
    assert process_accuracy(pairs, routes, base) == 1.0
    sigmas = []
    for target in (0.6, 0.7, 0.8, 0.9):
        cal = calibrate_sigma(pairs, routes, target, seed=3, base=base, draws=40)
        assert cal["expected"] == pytest.approx(target, abs=2e-3)  # the bisection's quantity
        # the unit's own draw on 300 pairs: within sampling noise of the target (sd about 0.03)
        assert abs(cal["reached"] - target) < 0.1
        own = NoisyOracleScorer(cal["sigma"], 3, base=base)
        assert process_accuracy(pairs, routes, own.score) == pytest.approx(cal["reached"])
        assert (cal["n_process_pairs"], cal["base_accuracy"]) == (300, 1.0)
        sigmas.append(cal["sigma"])
    assert sigmas == sorted(sigmas, reverse=True) and sigmas[-1] > 0  # less accuracy, more noise
    # chance: the widest noise, a coin per route (clipped to 0 or 1 on nearly every route), ordering about half
    coin = calibrate_sigma(pairs, routes, 0.5, seed=3, base=base, draws=40)
    assert coin["sigma"] == SIGMA_MAX and coin["expected"] == pytest.approx(0.5, abs=0.02)
    scores = [NoisyOracleScorer(coin["sigma"], 3, base=base).score(t) for t in routes]
    assert sum(s in (0.0, 1.0) for s in scores) >= 0.95 * len(scores)
    assert 0.4 < sum(s == 1.0 for s in scores) / len(scores) < 0.6
    # an outcome pair is no process pair: it is not calibrated on
    with pytest.raises(ValueError, match="no process pairs"):
        calibrate_sigma([Pair("p", 0, 1, "outcome")], routes, 0.8, seed=3, base=base)
    with pytest.raises(ValueError, match=r"expected a number in \(0, 1\]"):
        calibrate_sigma(pairs, routes, 1.2, seed=3, base=base)


def test_noise_is_a_pure_function_of_the_route_and_the_seed():
    routes, all_lrm = _routes("parity")
    again, _ = _routes("parity")  # the same routes, built anew
    for a in routes:
        assert route_noise(routes[a], 5) == route_noise(again[a], 5)
    zs = [route_noise(t, 5) for t in routes.values()]
    assert len(set(zs)) == len(zs)  # distinct routes, distinct draws
    assert all(route_noise(t, 5) != route_noise(t, 6) for t in routes.values())
    s1, s2 = NoisyOracleScorer(0.3, 5), NoisyOracleScorer(0.3, 5)
    trajs = list(routes.values())
    first = s1.scores(trajs)
    assert s1.scores(trajs) == first == s2.scores(trajs)  # the same at every call and in every instance
    assert all(0.0 <= s <= 1.0 for s in first)
    assert first != NoisyOracleScorer(0.3, 6).scores(trajs)
    # the hand-computed model: clip(base + sigma * z, 0, 1); a missing base stays missing
    assert noisy_score(0.5, -1.0, 0.2) == pytest.approx(0.3)
    assert noisy_score(0.9, 1.0, 0.2) == 1.0 and noisy_score(0.1, -1.0, 0.2) == 0.0
    assert noisy_score(None, 1.0, 0.2) is None
    # standard normal draws
    draws = [route_noise(FakeRoute(str(i), True, 0.0), 1) for i in range(4000)]
    assert abs(statistics.fmean(draws)) < 0.06 and statistics.stdev(draws) == pytest.approx(1.0, abs=0.05)


def test_target_one_is_the_oracle():
    routes, _ = _routes("parity")
    trajs = list(routes.values())
    pairs = [Pair("p", i, j, "process") for i in range(len(trajs)) for j in range(len(trajs))
             if trajs[i].outcome == trajs[j].outcome and trajs[i].lrm_calls == trajs[j].lrm_calls
             and oracle_process_score(trajs[i]) > oracle_process_score(trajs[j])]
    assert pairs
    cal = calibrate_sigma(pairs, trajs, 1.0, seed=9, draws=5)
    assert (cal["sigma"], cal["reached"], cal["expected"]) == (0.0, 1.0, 1.0)
    assert NoisyOracleScorer(cal["sigma"], 9).scores(trajs) == OracleScorer().scores(trajs)
    with pytest.raises(ValueError, match="finite number >= 0"):
        NoisyOracleScorer(float("nan"), 9)


def test_exact_reader_reads_each_family_literally():
    routes, _ = _routes("value")
    t = routes[(0, 1, 0, 0)]  # the LRM writes step 2 (the SLM's slip), the SLM the rest; every step right
    rubric = [
        criterion("risky step to LRM", 0.4, "1.0 if step 2 is by the LRM"),
        criterion("uncertain steps to LRM", 0.3, "1.0 if no SLM step has u above 0"),
        criterion("few LRM steps", 0.2, "1.0 if at most 0 LRM steps"),
        criterion("steps are right", 0.1, "1.0 if every step is right"),
    ]
    # step 2 by the LRM: yes (0.4); no SLM step above digit 0: yes, the kept SLM steps have u 0.05 (digit 0)
    # (0.3); at most 0 LRM steps: no; every step right: yes (0.1)
    assert literal_score(rubric, t) == pytest.approx(0.8)
    assert literal_score([replace(rubric[0], guidance="free text")], t) is None
    scorer = ReaderScorer({t.problem_id: Parsed("ok", rubric)})
    assert scorer.scores([t]) == [pytest.approx(0.8)] and scorer.failures == 0
    failed = ReaderScorer({t.problem_id: Parsed("failed", reason="x")})
    assert failed.scores([t, t]) == [None, None] and failed.failures == 2


def test_dose_methods_are_router_runs_of_their_own():
    rc = config_from_dict({}, overrides={"roro.router.methods": ["oracle-noisy", "exact-reader", "outcome-only"],
                                         "roro.router.noisy_target_acc": 0.7,
                                         "roro.router.sweep_cost_weights": [0.1, 0.2]}).roro
    runs = {r.tag: r for r in router_runs(rc)}
    assert set(runs) == {"noisy0.7-cw0.1", "noisy0.7-cw0.2", "reader-cw0.1", "reader-cw0.2", "outcome-cw0.1",
                         "outcome-cw0.2"}
    assert runs["noisy0.7-cw0.1"].method == "oracle-noisy" and runs["reader-cw0.2"].process_weight == 0.5
    with pytest.raises(Exception, match="noisy_target_acc"):
        config_from_dict({}, overrides={"roro.router.noisy_target_acc": 0.49})
    assert config_from_dict({}, overrides={"roro.router.noisy_target_acc": 0.5}).roro.router.noisy_target_acc == 0.5
    spec = judge_dose_spec()
    assert spec.seeds == [11, 22] and spec.method == "roro_dose"
    assert {v: o.get("roro.router.noisy_target_acc") for v, o in spec.variants.items() if v.startswith("noisy")} == {
        "noisy-0.6": 0.6, "noisy-0.7": 0.7, "noisy-0.8": 0.8, "noisy-0.9": 0.9}
    assert all(c.exploratory for c in spec.claims)  # two seeds: described, not claimed


def test_the_router_loop_reads_the_noisy_score(tmp_path):
    """Same seed, same first rollouts: the oracle and the noisy routers see the same routes at step 1 and differ
    only in the process score the loop read for them."""
    env_routes = [_problem(*KEEPS, "parity"), _problem(2, [("add", 1), ("add", 2), ("add", 1)], "parity")]
    from rubricflow.methods.roro.env.routing import RoutingEnv

    env = RoutingEnv(Chain("slm", slip=1), Chain("lrm"), "slm:x", "lrm:x", max_steps=6)
    rcfg = config_from_dict({}, overrides={"roro.router.grpo.steps": 2, "roro.router.grpo.group_size": 4,
                                           "roro.router.grpo.prompts_per_step": 2,
                                           "roro.router.grpo.checkpoint_every": 0}).roro.router
    noisy = NoisyOracleScorer(0.4, 1)
    out = {}
    for method, scorer in (("oracle-process", OracleScorer()), ("oracle-noisy", noisy)):
        _, summ = train_router(RouterRun(f"{method}-cw0.2", 0.5, 0.2, method), env, env_routes, rcfg, scorer,
                               tmp_path / "ckpt", seed=3)
        out[method] = summ
    h_o, h_n = out["oracle-process"]["history"], out["oracle-noisy"]["history"]
    assert len(h_o) == len(h_n) == 2 and out["oracle-noisy"]["missing_rewards"] == 0
    assert h_o[0]["accuracy"] == h_n[0]["accuracy"] and h_o[0]["lrm_cost_frac"] == h_n[0]["lrm_cost_frac"]
    assert h_o[0]["process_mean"] != h_n[0]["process_mean"]
    assert 0.0 <= h_n[0]["process_mean"] <= 1.0 and noisy.failures == 0


def test_dose_table_pairs_each_level_with_the_references():
    def unit(variant, seed, pts, val_acc=None, target=None):
        anchors = {"all-slm": 0.2, "all-lrm": 1.0}
        return {"variant": variant, "seed": seed, "cost_range": [0.2, 0.8],
                "overrides": {"roro.router.noisy_target_acc": target} if target else {},
                "chain_points": pts, "chain_anchors": anchors, "val_chain_points": pts, "val_chain_anchors": anchors,
                "metrics": {"scorer_val_process_acc": val_acc, "chain_range_auc": 0.5}}

    line = [(0.1, 0.3), (0.9, 0.95)]
    better = [(0.1, 0.4), (0.5, 0.8), (0.9, 0.98)]
    results = [unit("outcome-only", s, line) for s in (1, 2)] + [unit("noisy-0.8", s, better, 0.8, 0.8)
                                                                 for s in (1, 2)]
    t = dose_table(results)
    row = t["noisy-0.8"]
    assert row["target"] == 0.8 and row["scorer_val_process_acc"]["mean"] == 0.8
    d = row["test_minus_outcome-only"]
    assert d["values"][0] == d["values"][1] > 0 and row["val_minus_outcome-only"]["values"] == d["values"]
    assert row["test_minus_threshold"]["values"] == []  # no threshold unit: no pair


def test_the_long_dose_study_differs_from_roro_long_checked_only_in_the_process_score():
    """Fresh seeds; outcome-only, threshold and the oracle exactly as roro_long_checked runs them (environment, router
    start, sweep); each noisy level adds only its scorer, the coin (noisy-0.5) among them; three registered claims."""
    import json
    from pathlib import Path

    from rubricflow.methods.roro.study.judge_dose import LONG_CLAIMS
    from rubricflow.registry import studies

    dose, long = studies()["roro_long_dose"][1].spec(), studies()["roro_long_checked"][1].spec()
    for v in ("outcome-only", "threshold", "oracle-process"):
        assert dose.variants[v] == long.variants[v], v
    for t in (0.5, 0.6, 0.7, 0.8, 0.9):
        o = dose.variants[f"noisy-{t:g}"]
        assert o == {**long.variants["oracle-process"], "roro.router.methods": ["oracle-noisy"],
                     "roro.router.noisy_target_acc": t}
    ledger = json.loads((Path(__file__).parents[2] / "reports/studies/seed_ledger.json").read_text())
    used = {s for e in ledger if e["study"] != "roro_long_dose" for s in e["seeds"]}
    assert len(dose.seeds) == 5 and not set(dose.seeds) & (used | set(long.seeds))
    registered = [(c.a, c.b, c.metric) for c in dose.claims if not c.exploratory]
    assert registered == [(a, b, "chain_pair_range_auc") for a, b in LONG_CLAIMS]
    (coin,) = dose.preconditions  # the coin's claims need the coin at chance
    assert (coin.variant, coin.metric, coin.direction) == ("noisy-0.5", "scorer_val_expected_acc", "lower")
    assert coin.gates == [c.key for c in dose.claims if not c.exploratory and "noisy-0.5" in (c.a, c.b)] and \
        len(coin.gates) == 2


def test_a_long_dose_oracle_unit_measures_its_scorer_on_routes_it_builds_after_its_routers(tmp_path):
    """In the long-chain environment the oracle unit (whose router reads no pairs) builds its own routes and pairs
    after its routers, so its scorer's accuracy is measured on this seed's environment and its routers train as the
    roro study's oracle unit does; the coin unit's scorer orders its pairs about as a coin does."""
    import json

    from rubricflow.study.harness import run_study

    study = {"seeds": [5], "out_dir": str(tmp_path / "studies"), "report_dir": str(tmp_path / "reports")}
    small = {"task": {"n_train": 4, "n_test": 4}, "router": {"grpo": {"steps": 1, "group_size": 2,
                                                                      "prompts_per_step": 2, "checkpoint_every": 0},
                                                             "checkpoint_dir": str(tmp_path / "ckpt")},
             "eval": {"judge_problems": 2}, "data_dir": str(tmp_path / "data"), "out_dir": str(tmp_path / "out")}
    cfg = config_from_dict({"reports_dir": str(tmp_path / "reports"), "roro": small,
                            "study": {"roro_long_dose": study}})
    out = run_study(cfg, "roro_long_dose", variants=["oracle-process", "noisy-0.5"])
    assert (out["units"], out["ran"]) == (2, 2)
    units = {v: json.loads((tmp_path / "studies" / v / "seed5" / "result.json").read_text())
             for v in ("oracle-process", "noisy-0.5")}
    for u in units.values():
        assert u["environment"]["pairs"]  # built under the unit's own data directory
        assert (tmp_path / "studies" / u["variant"] / "seed5" / "data" / "pairs.parquet").exists()
    oracle, coin = units["oracle-process"]["metrics"], units["noisy-0.5"]["metrics"]
    assert oracle["scorer_val_process_acc"] == 1.0 and oracle["noise_sigma"] == 0.0  # on this seed's val pairs
    assert coin["noise_sigma"] == SIGMA_MAX and coin["scorer_val_expected_acc"] == pytest.approx(0.5, abs=0.1)
