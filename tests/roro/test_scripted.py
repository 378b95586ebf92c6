"""The long-chain environment (roro.slm.source = roro.lrm.source = scripted; rubricflow.methods.roro.env.scripted)."""

from pathlib import Path

import pytest
import torch

from rubricflow.config import config_from_dict
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.env.routing import ConstantPolicy, ThresholdPolicy
from rubricflow.methods.roro.env.scripted import ScriptedStepModel
from rubricflow.methods.roro.env.step_models import make_env
from rubricflow.methods.roro.env.task import parse_question, render_question
from rubricflow.methods.roro.env.trajectories import _auc
from rubricflow.methods.roro.study.specs import LONG_ENV, roro_long_spec
from rubricflow.methods.roro.study.unit import _shared_outputs, _unit_overrides
from rubricflow.sections import ConfigError
from rubricflow.study.adapter import Unit


def _cfg(**over):
    return config_from_dict({}, overrides={**LONG_ENV, **over})


def _probs(rc, n=96):
    rc = rc.model_copy(update={"task": rc.task.model_copy(update={"n_train": n})})
    return problems(rc)["train"]


class FormulationAware:
    """Calls the LRM on the formulation steps, and on a compute step above an uncertainty threshold."""

    def __init__(self, threshold: float, formulate: int = 2, step_norm: float = 16.0):
        self.threshold, self.formulate, self.step_norm = threshold, formulate, step_norm
        self.name = f"formulation+{threshold:g}"

    def decide(self, states: torch.Tensor) -> list[int]:
        return [int(round(s[4] * self.step_norm) < self.formulate or s[0] > self.threshold) for s in states.tolist()]


def _rate(routes, all_lrm):
    cost = sum(t.lrm_tokens / all_lrm[t.problem_id] for t in routes) / len(routes)
    return cost, sum(bool(t.chain_exact) for t in routes) / len(routes)


def test_questions_round_trip():
    ops = [("add", 3), ("mul", 2), ("sub", 4)]
    assert parse_question(render_question(7, ops)) == (7, ops)
    with pytest.raises(ValueError, match="not a synthetic question"):
        parse_question("What is 2 + 2?")


def test_a_prefix_always_gives_the_same_step_and_the_seed_rebuilds_the_environment():
    rc = _cfg().roro
    m = ScriptedStepModel(rc.scripted, "slm", 1)
    q = render_question(5, [("add", 2)] * 10)
    prefixes = [m.prompt(q) + "".join(f"{5 + 2 * k} + 2 = {7 + 2 * k}\n" for k in range(n)) for n in range(10)]
    assert [o.text for o in m.propose(prefixes)] == [o.text for o in m.propose(prefixes)]
    other = ScriptedStepModel(rc.scripted.model_copy(update={"seed": 1}), "slm", 1)
    assert [o.uncertainty for o in m.propose(prefixes)] != [o.uncertainty for o in other.propose(prefixes)]
    assert m.fingerprint != other.fingerprint  # the step cache never mixes two environments
    assert m.propose([m.prompt(q)])[0].text.startswith("5 + 2 = ")


def test_step_types_set_error_rates_costs_and_which_errors_the_uncertainty_sees():
    rc = _cfg().roro
    env = make_env(rc)
    routes = env.rollout(_probs(rc, 400), ConstantPolicy(0))
    by_type: dict[str, list] = {"formulate": [], "compute": []}
    for t in routes:
        for s in t.steps[:-1]:
            by_type["formulate" if s.index < rc.scripted.formulate_steps else "compute"].append(s)
    err = {k: sum(s.slm_correct is False for s in v) / len(v) for k, v in by_type.items()}
    assert err["formulate"] == pytest.approx(rc.scripted.slm_formulate_error, abs=0.05)
    assert err["compute"] == pytest.approx(rc.scripted.slm_compute_error, abs=0.02)
    assert {s.slm_tokens for s in by_type["formulate"]} == {rc.scripted.formulate_tokens}
    assert {s.slm_tokens for s in by_type["compute"]} == {rc.scripted.compute_tokens}

    def auc(steps):
        return _auc([s.slm_uncertainty for s in steps if s.slm_correct is False],
                    [s.slm_uncertainty for s in steps if s.slm_correct is True])

    assert auc(by_type["formulate"]) == pytest.approx(0.5, abs=0.08)  # confidently wrong: the threshold is blind
    assert auc(by_type["compute"]) > 0.9
    calibrated = make_env(_cfg(**{"roro.scripted.miscalibrated": "none"}).roro)
    form = [s for t in calibrated.rollout(_probs(rc, 400), ConstantPolicy(0)) for s in t.steps[:2]]
    assert auc(form) > 0.9


def test_an_accepted_error_propagates_and_the_lrm_can_repair_it_at_the_final_step():
    rc = _cfg(**{"roro.scripted.lrm_repair": 1.0}).roro
    env = make_env(rc)
    probs = _probs(rc, 64)
    slm = env.rollout(probs, ConstantPolicy(0))
    wrong = [t for t in slm if not t.chain_exact]
    # no repair: a kept error carries into the next step and, unless a later error cancels it, the answer
    assert wrong and sum(t.outcome for t in wrong) <= 0.25 * len(wrong)
    for t in wrong:
        k = t.first_error_step
        assert t.steps[k].on_track is False and (k + 1 == len(t.steps) or t.steps[k + 1].correct is False
                                                 or t.steps[k + 1].on_track is False)

    # the route that keeps every SLM step and calls the LRM on the final one: repaired answers, wrong chains
    lrm_final = []
    for p, t in zip(probs, slm):
        n = len(p.ops)
        pol = type("AtFinal", (), {"name": "at-final", "decide": lambda self, s, n=n: [
            int(round(r[4] * 16) == n) for r in s.tolist()]})()
        lrm_final += env.rollout([p], pol)
    assert all(t.outcome for t in lrm_final)
    assert [bool(t.chain_exact) for t in lrm_final] == [bool(t.chain_exact) for t in slm]
    for p, t in zip(probs, lrm_final):
        assert t.steps[-1].writer == "LRM" and t.lrm_tokens == rc.scripted.verify_tokens_per_op * len(p.ops)
    no_repair = make_env(_cfg(**{"roro.scripted.lrm_repair": 0.0}).roro)
    assert [t.outcome for t in no_repair.rollout(probs, ThresholdPolicy(2.0))] == [t.outcome for t in slm]


def test_a_myopic_threshold_is_far_from_the_best_router_here():
    """The environment's premise: calling the LRM on the formulation steps beats every uncertainty threshold that
    costs as much or more, by a wide margin."""
    rc = _cfg().roro
    env = make_env(rc)
    probs = _probs(rc, 128)
    all_lrm = {t.problem_id: t.lrm_tokens for t in env.rollout(probs, ConstantPolicy(1))}
    cost, chain = _rate(env.rollout(probs, FormulationAware(0.4)), all_lrm)
    thresholds = [_rate(env.rollout(probs, ThresholdPolicy(t)), all_lrm) for t in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)]
    assert all(c >= cost for c, _ in thresholds[:3])  # the low thresholds pay more ...
    assert chain > max(ch for _, ch in thresholds) + 0.1  # ... and reach less, all-LRM included


def test_the_config_refuses_mixed_or_impossible_settings():
    with pytest.raises(ConfigError, match="both step models scripted"):
        _cfg(**{"roro.lrm.source": "tiny"})
    with pytest.raises(ConfigError, match="max_steps"):
        _cfg(**{"roro.steps.max_steps": 10})
    with pytest.raises(ConfigError, match="enumerate_routes"):
        _cfg(**{"roro.trajectories.enumerate_routes": True})
    with pytest.raises(ConfigError, match="n_params"):
        _cfg(**{"roro.slm.n_params": 0})
    with pytest.raises(ConfigError, match="wrong_uncertainty"):
        _cfg(**{"roro.scripted.wrong_uncertainty": [0.9, 0.1]})


def test_a_study_unit_rebuilds_the_scripted_environment_from_its_seed(tmp_path):
    spec = roro_long_spec()
    vcfg = _cfg()
    over = _unit_overrides(vcfg, "roro_long", spec, Unit("oracle-process", 303), tmp_path)
    assert over["roro.scripted.seed"] == over["roro.task.seed"] == 303
    assert Path(over["roro.data_dir"]) == tmp_path / "data"
    assert _shared_outputs(vcfg) == {}
    tiny = config_from_dict({})
    assert "roro.scripted.seed" not in _unit_overrides(tiny, "roro", spec, Unit("oracle-process", 303), tmp_path)
    assert _shared_outputs(tiny)  # the tiny models' environment is the main pipeline's
    assert {c.key for c in spec.claims} >= {"oracle-process vs threshold (chain_acc_at_cost_50)"}
    assert spec.variants["oracle-process"]["roro.router.start"] in ("coin", "threshold")
    assert "roro.router.start" not in spec.variants["threshold"]


def test_the_environment_report_gives_each_seed_its_rules_and_pairs():
    from rubricflow.methods.roro.study.long_env import describe, render

    row = describe(7)
    assert row["steps"]["formulation"]["auc"] < 0.7 < row["steps"]["compute"]["auc"]
    assert row["points"]["all-lrm"]["cost"] == 1.0 and row["points"]["all-slm"]["cost"] == 0.0
    assert row["pairs"]["train_outcome"] > 0 and row["routes"] > 0
    text = render([row])
    assert "| formulation+0.4 | " in text and "| 7 | " in text


def test_routers_on_long_chains_score_their_rollouts_as_they_come(tmp_path, monkeypatch):
    """Where routes are not enumerable the router's GRPO does not pre-score every route of the training problems;
    with an exact scorer the trained router is the same either way."""
    from rubricflow.methods.roro.router.train import OracleScorer, RouterRun, train_router

    rc = _cfg(**{"roro.router.grpo.steps": 2, "roro.router.grpo.group_size": 2,
                 "roro.router.grpo.prompts_per_step": 2, "roro.router.grpo.checkpoint_every": 0}).roro
    probs = _probs(rc, 4)
    run = RouterRun("oracle-cw0.2", 0.5, 0.2, "oracle-process")
    small = _cfg(**{"roro.task.min_ops": 3, "roro.task.max_ops": 4, "roro.steps.max_steps": 6}).roro
    short = _probs(small, 4)
    torch.manual_seed(0)
    pre, _ = train_router(run, make_env(small), short, rc.router, OracleScorer(), tmp_path / "a", seed=3)
    torch.manual_seed(0)
    lazy, _ = train_router(run, make_env(small), short, rc.router, OracleScorer(), tmp_path / "b", seed=3,
                           prescore=False)
    assert all(torch.equal(a, b) for a, b in zip(pre.state_dict().values(), lazy.state_dict().values()))

    env = make_env(rc)
    monkeypatch.setattr(env, "enumerate_routes", lambda *a: pytest.fail("enumerated 2^17 routes per problem"))
    _, summ = train_router(run, env, probs, rc.router, OracleScorer(), tmp_path / "c", seed=3, prescore=False)
    assert summ["steps"] == 2 and len(summ["history"]) == 2 and summ["missing_rewards"] == 0


def test_a_study_unit_can_draw_its_own_problems_with_the_shared_step_models(tmp_path, monkeypatch):
    """roro.task.draw_per_unit: the unit's problems come from its seed and its routes, pairs and step cache live in
    its own directory; only the step models are shared, and the unit's inputs no longer name the pipeline's routes."""
    from rubricflow.methods.roro.study.specs import DOSE_BAR, FRESH_SEEDS, FRESH_SEEDS_B, roro_fresh_spec
    from rubricflow.methods.roro.study.unit import _input_parts

    spec = roro_fresh_spec()
    assert spec.variants["roro"]["roro.task.draw_per_unit"] is True
    assert all(o["roro.task.draw_per_unit"] for o in spec.variants.values())  # baselines route the same draws
    drawn = config_from_dict({"roro": {"task": {"draw_per_unit": True}}})
    over = _unit_overrides(drawn, "roro_fresh", spec, Unit("outcome-only", 1301), tmp_path)
    assert over["roro.task.seed"] == 1301 and Path(over["roro.data_dir"]) == tmp_path / "data"
    assert "roro.scripted.seed" not in over
    assert set(_shared_outputs(drawn)) == {"roro_models (SLM)", "roro_models (LRM)"}
    shared = config_from_dict({})
    assert "roro.task.seed" not in _unit_overrides(shared, "roro", spec, Unit("roro", 1301), tmp_path)

    import rubricflow.methods.roro.study.unit as unit_mod

    hashed = []
    monkeypatch.setattr(unit_mod, "content_hash", lambda p: hashed.append(str(p)) or "h")
    # the inputs hash the step models either way; the pipeline's routes only where the unit routes them
    assert set(_input_parts(drawn, Unit("roro", 1301))) == {"config", "seed", "slm", "lrm"}
    assert set(_input_parts(shared, Unit("roro", 1301))) >= {"trajectories", "pairs", "step_cache"}
    assert any(h.endswith("slm") for h in hashed)

    # the claims of `roro`; RoRo vs outcome-only gated by the dose-response bar, fixed before the units ran
    bar = {p.name: p for p in spec.preconditions}["judge passes the dose bar"]
    assert bar.threshold == DOSE_BAR == 0.7 and bar.metric == "judge_test_process_acc"
    assert set(bar.gates) == {f"roro vs outcome-only ({m})" for m in ("chain_pair_range_auc", "chain_acc_at_cost_50")}
    assert spec.seeds == FRESH_SEEDS and not set(FRESH_SEEDS) & set(FRESH_SEEDS_B)


def test_the_process_selection_study_differs_from_roro_fresh_in_the_judge_phase_rule_and_the_seeds():
    from rubricflow.methods.roro.study.specs import (FRESH_SEEDS, FRESH_SEEDS_B, FRESH_SEEDS_PROCESS,
                                                     roro_fresh_process_spec, roro_fresh_spec)

    a, b = roro_fresh_spec(), roro_fresh_process_spec()
    assert b.seeds == FRESH_SEEDS_PROCESS and not set(b.seeds) & (set(FRESH_SEEDS) | set(FRESH_SEEDS_B))
    assert "roro.rubricor_judge.select_on" not in a.variants["roro"]
    for name, o in b.variants.items():
        assert o == {**a.variants[name], "roro.rubricor_judge.select_on": "val_process"}
    assert [c.key for c in a.claims] == [c.key for c in b.claims]
    assert [p.model_dump() for p in a.preconditions] == [p.model_dump() for p in b.preconditions]
    assert b.out_dir != a.out_dir


def test_the_checked_study_differs_from_roro_fresh_in_what_the_judge_reads_the_seeds_and_the_oracle_gate_cost():
    from rubricflow.methods.roro.study.judge_tune import CHECKED_SEEDS, READS_SEEDS
    from rubricflow.methods.roro.study.specs import (FRESH_SEEDS, FRESH_SEEDS_B, FRESH_SEEDS_CHECKED,
                                                     FRESH_SEEDS_CHECKED_B, FRESH_SEEDS_PROCESS,
                                                     roro_fresh_checked_spec, roro_fresh_spec)

    a, c = roro_fresh_spec(), roro_fresh_checked_spec()
    used = (set(FRESH_SEEDS) | set(FRESH_SEEDS_B) | set(FRESH_SEEDS_PROCESS) | set(READS_SEEDS)
            | set(CHECKED_SEEDS))
    assert c.seeds == FRESH_SEEDS_CHECKED and not set(c.seeds) & used and not set(FRESH_SEEDS_CHECKED_B) & (
        used | set(c.seeds))
    for name, o in c.variants.items():  # every variant routes a draw of its own; only the Judge's input differs
        assert o == {**a.variants[name], "roro.rubricor_judge.judge_reads": "checked"}
    assert [x.key for x in a.claims] == [x.key for x in c.claims]
    pa, pc = ({p.name: p for p in s.preconditions} for s in (a, c))
    assert pa["judge passes the dose bar"] == pc["judge passes the dose bar"]
    gate_a, gate_c = pa["oracle router reaches the threshold"], pc["oracle router reaches the threshold"]
    assert (gate_a.metric, gate_c.metric) == ("chain_range_auc", "chain_acc_at_cost_50")
    assert gate_c.model_dump(exclude={"metric", "description"}) == gate_a.model_dump(exclude={"metric", "description"})


def test_the_long_checked_study_differs_from_roro_long_in_what_the_judge_reads_and_the_seeds():
    import json

    from rubricflow.methods.roro.study.specs import (LONG_SEEDS_CHECKED, LONG_SEEDS_CHECKED_B,
                                                     roro_long_checked_spec, roro_long_spec)
    from rubricflow.registry import studies

    a, c = roro_long_spec(), roro_long_checked_spec()
    ledger = json.loads((Path(__file__).parents[2] / "reports/studies/seed_ledger.json").read_text())
    used = {s for e in ledger if e["study"] != "roro_long_checked" for s in e["seeds"]}  # by any other study
    assert c.seeds == LONG_SEEDS_CHECKED and not set(c.seeds) & used
    assert not set(LONG_SEEDS_CHECKED_B) & (used | set(c.seeds))
    checked = {"roro.rubricor_judge.judge_reads": "checked", "roro.rubricor_judge.tokenizer_reads": "checked"}
    for name, o in c.variants.items():
        assert o == {**a.variants[name], **checked}
    assert [x.model_dump() for x in a.claims] == [x.model_dump() for x in c.claims]
    assert [p.model_dump() for p in a.preconditions] == [p.model_dump() for p in c.preconditions]
    assert c.out_dir != a.out_dir
    registered = studies()["roro_long_checked"][1].spec()  # the reading pin keeps its own
    assert all({k: o[k] for k in checked} == checked for o in registered.variants.values())
