"""DeltaRubric's study adapter: per-unit configs, the shared outputs it needs, a report with the planner probe curve
from injected unit functions, and one tiny real unit (slow)."""

import json

import pytest

from rubricflow.config import ConfigError, config_from_dict
from rubricflow.study.harness import SharedOutputsMissing, Unit, plan, require_shared, run_study, unit_config
from tests.deltarubric.test_pipeline import _cfg as _pipeline_cfg


def _cfg(tmp_path, study=None):
    return config_from_dict({
        "reports_dir": str(tmp_path / "reports"),
        "deltarubric": {"pairs": {"out_dir": str(tmp_path / "pairs")}, "sft": {"out_dir": str(tmp_path / "sft")}},
        "study": {"deltarubric": {"seeds": [11, 22, 33, 44, 55], "out_dir": str(tmp_path / "studies" / "dr"),
                                  "report_dir": str(tmp_path / "reports" / "studies"), **(study or {})}},
    })


def _make_shared(tmp_path):
    for d in ("pairs", "sft"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "pairs" / "manifest.json").write_text("{}")
    (tmp_path / "sft" / "config.json").write_text("{}")


def test_default_spec_variants_and_claims():
    spec = config_from_dict({}).study.deltarubric
    assert spec.method == "deltarubric" and spec.seeds == [101, 202, 303, 404, 505] and spec.untrained == ["sft"]
    assert {"sft", "deltarubric", "no-rubric", "static", "reading", "absolute", "lambda0", "lambda0.2",
            "lambda0.6"} <= set(spec.variants)
    assert spec.per_seed_start  # each seed trains its own warm start
    # one RL budget on every variant (>= 40 steps x 4 pairs, N = M = 5), the untrained one too (one start per seed)
    for over in spec.variants.values():
        assert over["deltarubric.train.grpo.steps"] >= 40 and over["deltarubric.train.grpo.prompts_per_step"] >= 4
        assert over["deltarubric.train.n_checklists"] == over["deltarubric.train.m_verdicts"] == 5
    assert spec.variants["no-rubric"]["deltarubric.train.judge"] == "no_rubric"
    assert spec.variants["reading"]["deltarubric.train.judge"] == "reading"
    assert spec.variants["absolute"]["deltarubric.train.planner_reward"] == "absolute"
    claims = {(c.a, c.b, c.metric, c.direction, c.exploratory) for c in spec.claims}
    assert claims >= {
        ("deltarubric", "sft", "accuracy", "higher", False), ("deltarubric", "sft", "sep_deltarubric", "higher", False),
        ("deltarubric", "reading", "accuracy", "higher", False),
        ("deltarubric", "no-rubric", "accuracy", "higher", False),
        ("deltarubric", "absolute", "accuracy", "higher", True), ("deltarubric", "lambda0", "accuracy", "higher", True)}
    assert {"acc_agreed", "acc_reading", "sep_deltarubric", "flat_step0"} <= set(spec.metrics)


def test_unit_configs(tmp_path):
    cfg = _cfg(tmp_path)
    spec = cfg.study.deltarubric
    u = unit_config(cfg, "deltarubric", spec, Unit("lambda0.2", 22))
    tr = u.deltarubric.train
    assert u.seed == 22 and tr.grpo.seed == 22 and tr.guidance_lambda == 0.2
    assert tr.out_dir == str(tmp_path / "studies" / "dr" / "lambda0.2" / "seed22" / "model")
    assert u.deltarubric.eval.split == "test" and u.deltarubric.eval.out_dir.endswith("lambda0.2/seed22/eval")
    start = tmp_path / "studies" / "dr" / "_start" / "seed22"
    assert u.deltarubric.sft.out_dir == str(start / "sft") and u.deltarubric.sft.base_dir == str(start / "base")
    sft = unit_config(cfg, "deltarubric", spec, Unit("sft", 11))
    # an untrained unit evaluates its seed's warm start
    assert sft.deltarubric.train.out_dir == str(tmp_path / "studies" / "dr" / "_start" / "seed11" / "sft")
    shared = _cfg(tmp_path, {"per_seed_start": False})
    sft = unit_config(shared, "deltarubric", shared.study.deltarubric, Unit("sft", 11))
    assert sft.deltarubric.train.out_dir == str(tmp_path / "sft")  # or the main pipeline's, without per_seed_start
    bad = _cfg(tmp_path, {"variants": {"x": {"deltarubric.train.grpo.seed": 3}}, "claims": [], "untrained": []})
    with pytest.raises(ConfigError, match="set by the study per unit"):
        unit_config(bad, "deltarubric", bad.study.deltarubric, Unit("x", 11))


def test_every_variant_of_a_seed_shares_one_start_and_seeds_differ(tmp_path):
    from rubricflow.methods.deltarubric.study import SEED_START
    from rubricflow.study.seed_start import start_inputs

    cfg = _cfg(tmp_path)
    spec = cfg.study.deltarubric
    _make_shared(tmp_path)
    keys = {v: start_inputs(SEED_START, unit_config(cfg, "deltarubric", spec, Unit(v, 11)), 11) for v in spec.variants}
    assert len({json.dumps(k, sort_keys=True) for k in keys.values()}) == 1  # one warm start for all of seed 11
    assert start_inputs(SEED_START, unit_config(cfg, "deltarubric", spec, Unit("sft", 22)), 22) != keys["sft"]


def test_declaring_a_study_keeps_every_cached_start_unit_and_checkpoint():
    # the study declarations reach a unit through its variant's config; the rest of the package is its code
    from rubricflow.methods.deltarubric.study import ADAPTER, SEED_START
    from rubricflow.methods.deltarubric.train import TRAINING_CODE
    from rubricflow.util.hashing import code_hash

    for code in (ADAPTER.code, SEED_START.code, TRAINING_CODE):
        assert "rubricflow.methods.deltarubric" in code and "-rubricflow.methods.deltarubric.study_specs" in code
    assert code_hash(*SEED_START.code) != code_hash(*(c for c in SEED_START.code if not c.startswith("-")))


def test_a_start_group_builds_its_own_start_per_seed(tmp_path):
    """A variant in a start group (e.g. one warm-start recipe of a selection study) trains from its group's start of
    the seed; the other variants keep the default start; the group's start is what its unit evaluates untrained."""
    from pydantic import ValidationError

    from rubricflow.study.spec import StudySpec

    study = {"variants": {"sft": {}, "deltarubric": {}, "wide-sft": {"deltarubric.sft.hidden_size": 96}},
             "untrained": ["sft", "wide-sft"], "claims": [], "preconditions": [],
             "start_groups": {"h96": ["wide-sft"]}}
    cfg = _cfg(tmp_path, study)
    spec = cfg.study.deltarubric
    root = tmp_path / "studies" / "dr" / "_start"
    grouped = unit_config(cfg, "deltarubric", spec, Unit("wide-sft", 22))
    assert grouped.deltarubric.sft.out_dir == str(root / "h96" / "seed22" / "sft")
    assert grouped.deltarubric.train.out_dir == str(root / "h96" / "seed22" / "sft")  # untrained: its own start
    assert grouped.deltarubric.sft.hidden_size == 96
    plain = unit_config(cfg, "deltarubric", spec, Unit("deltarubric", 22))
    assert plain.deltarubric.sft.out_dir == str(root / "seed22" / "sft")
    assert spec.start_group("wide-sft") == "h96" and spec.start_group("sft") is None
    base = {"method": "deltarubric", "out_dir": "x", "variants": {"a": {}, "b": {}}, "metrics": ["accuracy"],
            "per_seed_start": True}
    for groups, match in (({"g": ["c"]}, "not variants"), ({"g": ["a"], "h": ["a"]}, "more than one group"),
                          ({"seed1": ["a"]}, "plain folder name")):
        with pytest.raises(ValidationError, match=match):
            StudySpec(**base, start_groups=groups)
    with pytest.raises(ValidationError, match="per_seed_start"):
        StudySpec(**{**base, "per_seed_start": False}, start_groups={"g": ["a"]})


def test_require_shared_names_the_pairs_and_the_warm_start(tmp_path):
    cfg = _cfg(tmp_path, {"per_seed_start": False})
    units = plan(cfg.study.deltarubric)
    with pytest.raises(SharedOutputsMissing) as e:
        require_shared(cfg, "deltarubric", cfg.study.deltarubric, units)
    msg = str(e.value)
    assert ("pairs/manifest.json (stage `deltarubric_pairs`)" in msg
            and "sft/config.json (stage `deltarubric_sft`)" in msg)
    assert "dvc repro deltarubric_sft" in msg
    _make_shared(tmp_path)
    require_shared(cfg, "deltarubric", cfg.study.deltarubric, units)
    # a study that trains a warm start per seed needs only the pairs
    own = _cfg(tmp_path / "own")
    with pytest.raises(SharedOutputsMissing) as e:
        require_shared(own, "deltarubric", own.study.deltarubric, plan(own.study.deltarubric))
    assert "pairs/manifest.json" in str(e.value) and "sft/config.json" not in str(e.value)


# accuracy per variant, +-0.01 per seed; the probe climbs 0.2 -> 0.4 for DeltaRubric runs
BASE = {"sft": 0.5, "deltarubric": 0.7, "no-rubric": 0.6, "static": 0.72, "absolute": 0.7, "shift": 0.7,
        "lambda0": 0.65, "lambda0.2": 0.68, "lambda0.6": 0.69}
WOBBLE = {11: 0.01, 22: -0.01, 33: 0.0, 44: 0.005, 55: -0.005}


class FakeUnit:
    def __init__(self):
        self.calls = []

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        self.calls.append(unit.key)
        trained = unit.variant != "sft"
        curve = [[0, 0.2], [10, 0.3], [20, 0.4 + WOBBLE[unit.seed]]] if trained and unit.variant not in (
            "no-rubric", "static") else []
        return {"metrics": {"accuracy": BASE[unit.variant] + (WOBBLE[unit.seed] if trained else 0.0),
                            "format_violation": 0.0, "probe_end": curve[-1][1] if curve else None},
                "eval_samples": 96, "probe_curve": curve}


def test_a_study_reports_claims_and_the_probe_curve(tmp_path):
    cfg = _cfg(tmp_path, {"metrics": ["accuracy", "format_violation", "probe_end"], "per_seed_start": False,
                          "claims": [{"a": "deltarubric", "b": b, "metric": "accuracy", "direction": "higher",
                                      "exploratory": b == "absolute"}
                                     for b in ("no-rubric", "static", "absolute", "sft")]})
    _make_shared(tmp_path)
    out = run_study(cfg, "deltarubric", variants=["sft", "deltarubric", "no-rubric", "static", "absolute", "lambda0"],
                    unit_fn=FakeUnit())
    assert out["units"] == 30 and out["ran"] == 30
    claims = out["claims"]
    assert claims["deltarubric vs no-rubric (accuracy)"] == "shown"  # +0.1 on every seed
    assert claims["deltarubric vs static (accuracy)"] == "reversed"  # -0.02 on every seed
    assert claims["deltarubric vs absolute (accuracy)"] == "not shown"  # equal on every seed
    assert claims["deltarubric vs sft (accuracy)"] == "shown"
    md = (tmp_path / "reports" / "studies" / "deltarubric.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| deltarubric vs ")}
    assert rows["deltarubric vs absolute"].rstrip(" |").endswith("exploratory")  # reported, marked exploratory
    assert "exploratory" not in rows["deltarubric vs no-rubric"]
    assert "Planner probe accuracy over training" in md
    row = next(line for line in md.splitlines() if line.startswith("| deltarubric | 0.200"))
    # step 20: mean 0.4 over the wobble (0.01, -0.01, 0, 0.005, -0.005): sd 0.0079, half 2.776 * 0.0079 / 2.236
    assert row.split("|")[3].strip() == "0.300 ± 0.000" and row.split("|")[4].strip() == "0.400 ± 0.010"
    assert not any(line.startswith("| no-rubric | 0.") for line in md.splitlines())  # no planner, no curve
    rep = json.loads((tmp_path / "reports" / "studies" / "deltarubric.json").read_text())
    assert rep["extras"]["deltarubric"]["20"]["mean"] == pytest.approx(0.4)
    assert (tmp_path / "reports" / "studies" / "deltarubric-probe.png").stat().st_size > 1000
    assert out["reports"]["probe_png"].endswith("deltarubric-probe.png")


@pytest.mark.slow
def test_one_real_unit_trains_and_evaluates_every_mode(tmp_path):
    """The tiny pipeline's pairs, then the seed's own warm start (with room) and its readout, one trained unit and
    the untrained one through the harness."""
    from rubricflow.methods.deltarubric.stages import pairs_stage

    base = _pipeline_cfg(tmp_path, sft={"planner_target_noise": 0.5})
    pairs_stage(base, track=False)
    raw = base.model_dump(mode="json")
    raw["study"]["deltarubric"].update({"seeds": [7], "out_dir": str(tmp_path / "studies"),
                                        "variants": {"sft": {}, "deltarubric": {}}, "claims": [], "preconditions": [],
                                        "report_dir": str(tmp_path / "reports" / "studies")})
    cfg = config_from_dict(raw)
    out = run_study(cfg, "deltarubric", variants=["sft", "deltarubric"])
    assert out["ran"] == 2
    assert not (tmp_path / "sft").exists()  # the main pipeline's warm start was never needed
    start = json.loads((tmp_path / "studies" / "_start" / "seed7" / "start.json").read_text())["summary"]
    assert {f"val_{m}" for m in ("no_rubric", "static", "reading", "deltarubric", "oracle")} <= set(start)
    for k in ("flat_groups_improvement", "flat_groups_absolute", "rollout_separating", "val_separating"):
        assert 0.0 <= start[k] <= 1.0
    res = json.loads((tmp_path / "studies" / "deltarubric" / "seed7" / "result.json").read_text())
    m = res["metrics"]
    assert res["own_mode"] == "deltarubric" and res["eval_samples"] == 4
    assert {"acc_no_rubric", "acc_static", "acc_reading", "acc_deltarubric", "acc_oracle"} <= set(m)
    assert m["accuracy"] == m["acc_deltarubric"] and 0.0 <= m["accuracy"] <= 1.0
    assert 0.0 <= m["flat_step0"] <= 1.0 and 0.0 <= m["sep_deltarubric"] <= 1.0
    # the readouts beside the greedy verdict: the own mode sampled, the reading's exactness, the rollouts' groups
    for k in ("acc_sampled", "fmt_sampled", "reading_exact", "flat_mean", "relative_differs"):
        assert 0.0 <= m[k] <= 1.0, k
    assert [s for s, _ in res["probe_curve"]] == [0, 1, 2]  # probe_every 1 over 2 steps, and the final probe
    assert m["probe_end"] == res["probe_curve"][-1][1]
    assert (tmp_path / "studies" / "deltarubric" / "seed7" / "model" / "config.json").exists()
    sft = json.loads((tmp_path / "studies" / "sft" / "seed7" / "result.json").read_text())
    assert sft["probe_curve"] == [] and sft["metrics"]["probe_end"] is None and sft["metrics"]["flat_step0"] is None
    assert 0.0 <= sft["metrics"]["acc_sampled"] <= 1.0 and sft["metrics"]["relative_differs"] is None
    md = (tmp_path / "reports" / "studies" / "deltarubric.md").read_text()
    assert "Start of each seed" in md and "flat_groups_improvement" in md
    # a second run reuses the start and both units (same inputs)
    assert run_study(cfg, "deltarubric", variants=["sft", "deltarubric"])["ran"] == 0


def test_a_units_training_readouts_read_the_trained_roles_groups():
    from rubricflow.methods.deltarubric.study import training_readouts

    rows = [{"step": 0, "planner/flat_groups": 0.5, "planner/relative_differs": 0.25, "generative/flat_groups": 0.9},
            {"step": 1, "planner/flat_groups": 1.0, "planner/relative_differs": 0.75}]
    assert training_readouts(rows, "deltarubric") == {"flat_step0": 0.5, "flat_mean": 0.75, "relative_differs": 0.5}
    gen = [{"step": 0, "generative/flat_groups": 0.875}, {"step": 1, "generative/flat_groups": 0.625}]
    assert training_readouts(gen, "generative") == {"flat_step0": 0.875, "flat_mean": 0.75, "relative_differs": None}
    # a row without the role's share (e.g. rows of another judge): no value, never another role's
    assert training_readouts(rows, "reading") == {"flat_step0": None, "flat_mean": None, "relative_differs": 0.5}
    assert training_readouts([], "deltarubric") == dict.fromkeys(("flat_step0", "flat_mean", "relative_differs"))


def test_the_lr_tune_is_a_val_selection_over_both_trained_judges():
    """`deltarubric_tune` is evaluated on val only, on seeds apart from the study's, with the study's budget; each lr
    is one setting scored over DeltaRubric and the reading judge alike (the control keeps the same settings)."""
    cfg = config_from_dict({})
    tune, study = cfg.study.deltarubric_tune, cfg.study.deltarubric
    assert tune.eval_split == "val" and tune.per_seed_start and not set(tune.seeds) & set(study.seeds)
    assert tune.selection.metric == "accuracy" and tune.selection.direction == "higher"
    assert set(tune.selection.settings) == {"lr3e-5", "lr1e-4", "lr3e-4"}
    for setting, names in tune.selection.settings.items():
        judges = {tune.variants[v]["deltarubric.train.judge"] for v in names}
        lrs = {tune.variants[v]["deltarubric.train.grpo.lr"] for v in names}
        assert judges == {"deltarubric", "reading"} and len(lrs) == 1
    budget = {k: v for k, v in study.variants["deltarubric"].items()}
    for over in tune.variants.values():
        assert {k: over[k] for k in budget} == budget


def test_the_wide_start_selection_gives_each_recipe_its_own_start_and_gates_it_by_its_preconditions(tmp_path,
                                                                                                   monkeypatch):
    """`deltarubric_wide_start` (issue 39, item 2): every recipe untrained, on val, in its own start group; a recipe
    is eligible only where its preconditions hold (bars met, room for the planner, each control deciding)."""
    from rubricflow.methods.deltarubric.study_specs import WIDE_CONTROLS, WIDE_RECIPES, wide_start_spec

    spec = wide_start_spec()
    assert spec.eval_split == "val" and spec.per_seed_start and set(spec.untrained) == set(WIDE_RECIPES)
    assert spec.start_groups == {r: [r] for r in WIDE_RECIPES} and len(spec.seeds) >= 3
    sel = spec.selection
    assert sel.require_preconditions and sel.metric == "acc_oracle" and sel.cost == ["start_steps"]
    for r in WIDE_RECIPES:
        pres = {p.metric: p for p in spec.preconditions if p.variant == r}
        assert pres["start_met"].threshold == 1.0 and pres["dec_deltarubric"].direction == "lower"
        assert pres["acc_oracle"].minus_metric == "acc_deltarubric" and pres["acc_oracle"].threshold == 0.05
        assert all(pres[f"acc_{c}"].threshold > 0.5 for c in WIDE_CONTROLS)
        assert set(WIDE_CONTROLS) == {"exhaustive", "generative"} and "acc_reading" not in pres  # reported only
        assert all(p.min_share == 1.0 and not p.gates for p in pres.values())
    cfg = _cfg(tmp_path, spec.model_dump(exclude={"out_dir"}))
    a, b = (unit_config(cfg, "deltarubric", cfg.study.deltarubric, Unit(r, 11)) for r in WIDE_RECIPES)
    assert a.deltarubric.sft.out_dir != b.deltarubric.sft.out_dir  # one start per recipe and seed
    assert a.deltarubric.train.out_dir == a.deltarubric.sft.out_dir  # evaluated as it is
    # the wide pairs live apart from the main pipeline's; missing, the study says how to build them
    assert a.deltarubric.pairs.form == "wide" and a.deltarubric.pairs.out_dir.endswith("pairs-wide")
    # the lookup tool for the verifier and the generative control alike, with the bars of the development start
    assert a.deltarubric.verifier_quotes and a.deltarubric.sft.generative and a.deltarubric.sft.bar_planner == 0.9
    assert a.deltarubric.sft.perception_images == 9000 and a.deltarubric.sft.bar_generative == 0.8
    monkeypatch.chdir(tmp_path)  # the wide pairs' folder is relative: none here, whatever the checkout holds
    with pytest.raises(SharedOutputsMissing) as e:
        require_shared(cfg, "deltarubric", cfg.study.deltarubric, plan(cfg.study.deltarubric))
    assert "pairs-wide/manifest.json" in str(e.value)
    assert "--set deltarubric.pairs.form=wide --set deltarubric.pairs.image_size=84" in str(e.value)


def test_the_second_wide_start_selection_differs_from_the_first_recipe_in_the_running_verdict_on_fresh_seeds():
    """`deltarubric_wide_start_b`: its recipe is h64-lr3e-3 with `sft.evidence_tally` and a longer phase cap, nothing
    else; its seeds (and their restarts' init seeds, seed + 1000 k) are none of another wide study's; the first
    selection's rule."""
    from rubricflow.methods.deltarubric import study_specs as ss

    first, second = ss.wide_start_spec(), ss.wide_start_spec(ss.WIDE_RECIPES_B, ss.WIDE_START_SEEDS_B,
                                                               "artifacts/studies/deltarubric_wide_start_b")
    (name, over), = second.variants.items()
    base = first.variants["h64-lr3e-3"]
    assert {k: v for k, v in over.items() if base.get(k) != v} == {"deltarubric.sft.evidence_tally": True,
                                                                   "deltarubric.sft.max_steps": 4000}
    assert set(over) - set(base) == {"deltarubric.sft.evidence_tally"} and base["deltarubric.sft.max_steps"] < 4000
    assert second.selection == first.selection.model_copy(update={"settings": {name: [name]}})
    assert [p.model_dump(exclude={"name", "variant", "minus"}) for p in second.preconditions] == [
        p.model_dump(exclude={"name", "variant", "minus"}) for p in first.preconditions if p.variant == "h64-lr3e-3"]
    others = [*ss.WIDE_START_SEEDS, *ss.WIDE_TUNE_SEEDS, *ss.WIDE_RL_SEEDS, *ss.WIDE_RL_SEEDS_B]
    inits = {s + 1000 * k for s in others for k in range(3)}
    assert len(second.seeds) >= 3 and not {s + 1000 * k for s in second.seeds for k in range(3)} & inits
    assert ss.wide_rl_base(name, 30)["deltarubric.sft.evidence_tally"] is True  # the RL studies can start from it


def test_the_wide_rl_studies_differ_from_the_start_in_one_setting_each_and_gate_each_claim(tmp_path, monkeypatch):
    """The RL studies on the wide pairs (issue 39, items 4-5): every variant of a seed shares the seed's start, each
    trained variant differs from DeltaRubric in one setting, the static-exhaustive claim compares two readouts of one
    unit, and every claim in the Holm family is gated by the preconditions that make it a test."""
    from rubricflow.methods.deltarubric import study_specs as ss
    from rubricflow.methods.deltarubric.study import SEED_START
    from rubricflow.study.seed_start import start_inputs

    spec = ss.wide_rl_spec(ss.WIDE_RL_SEEDS, str(tmp_path / "wide"), "h64-lr3e-3", 60, 3e-4)
    base = spec.variants["deltarubric"]
    assert base["deltarubric.train.grpo.lr"] == 3e-4 and base["deltarubric.train.grpo.prompts_per_step"] == 8
    assert base["deltarubric.train.grpo.steps"] == 60 and base["deltarubric.sft.max_restarts"] == 2
    for name, over in spec.variants.items():
        extra = {k: v for k, v in over.items() if base.get(k) != v}
        assert extra == {"absolute": {"deltarubric.train.planner_reward": "absolute"},
                         "generative": {"deltarubric.train.judge": "generative"},
                         "reading": {"deltarubric.train.judge": "reading"}}.get(name, {}), name
    (static,) = [c for c in spec.claims if c.b_metric and not c.exploratory]
    assert (static.a, static.b, static.metric, static.b_metric) == ("deltarubric", "deltarubric", "accuracy",
                                                                     "acc_exhaustive")
    family = [c.key for c in spec.claims if not c.exploratory]
    assert family == ["deltarubric vs sft (accuracy)", static.key, "deltarubric vs generative (accuracy)"]
    # relative > absolute stays out of the family (where M guided verdicts agree the two rewards' advantages match)
    assert "deltarubric vs absolute (accuracy)" in {c.key for c in spec.claims if c.exploratory}
    gated = {g for p in spec.preconditions for g in p.gates}
    assert set(family) <= gated and all(p.min_share == 0.8 for p in spec.preconditions)
    by_name = {p.name: p for p in spec.preconditions}
    assert by_name["the verifier keeps the fixed list"].minus == "sft"
    # the generative claim needs the control's RL to have had groups to learn from, as the planner's claims do
    gen_groups = by_name["generative groups vary"]
    assert (gen_groups.variant, gen_groups.metric, gen_groups.direction) == ("generative", "flat_step0", "lower")
    assert gen_groups.gates == ["deltarubric vs generative (accuracy)", "deltarubric vs generative (acc_sampled)"]
    # sampled decoding: exploratory readouts of the first and third claims, gated as their greedy counterparts
    assert {"deltarubric vs sft (acc_sampled)", "deltarubric vs generative (acc_sampled)"} <= {
        c.key for c in spec.claims if c.exploratory}
    for greedy in ("deltarubric vs sft", "deltarubric vs generative"):
        assert {p.name for p in spec.preconditions if f"{greedy} (accuracy)" in p.gates} == {
            p.name for p in spec.preconditions if f"{greedy} (acc_sampled)" in p.gates}, greedy
    assert {"acc_sampled", "reading_exact", "dec_generative", "relative_differs", "flat_mean"} <= set(spec.metrics)
    assert by_name["planner leaves room: oracle gap"].metric == "start_val_oracle_gap"
    # fresh seeds: none of the tune's, the selection's or the development runs', nor a restart's init seed of theirs
    used = {*ss.WIDE_TUNE_SEEDS, *ss.WIDE_START_SEEDS, 1234, 2345}
    inits = {s + 1000 * k for s in used for k in range(3)}
    for seeds in (ss.WIDE_RL_SEEDS, ss.WIDE_RL_SEEDS_B):
        assert len(seeds) == 5 and not {s + 1000 * k for s in seeds for k in range(3)} & inits
    assert not set(ss.WIDE_RL_SEEDS) & set(ss.WIDE_RL_SEEDS_B)
    # one start per seed for every variant, and for the tune's variants too
    cfg = _cfg(tmp_path, spec.model_dump(exclude={"out_dir"}))
    keys = {v: json.dumps(start_inputs(SEED_START, unit_config(cfg, "deltarubric", cfg.study.deltarubric,
                                                               Unit(v, 2601)), 2601), sort_keys=True)
            for v in spec.variants}
    assert len(set(keys.values())) == 1
    tune = ss.wide_tune_spec("h64-lr3e-3", 60)
    assert tune.eval_split == "val" and not set(tune.seeds) & set(ss.WIDE_RL_SEEDS)
    for names in tune.selection.settings.values():
        assert {tune.variants[v]["deltarubric.train.judge"] for v in names} == set(ss.WIDE_TUNE_JUDGES)
    # a grid in increasing lr, so the report names a winning end (the rule extends the grid past it) and ties go low
    assert tune.selection.grid and list(tune.selection.settings) == list(ss.WIDE_TUNE_LRS)
    assert list(ss.WIDE_TUNE_LRS.values()) == sorted(ss.WIDE_TUNE_LRS.values())
    with pytest.raises(ValueError, match="increasing"):
        ss.lr_tune_spec({}, {"lr1e-3": 1e-3, "lr3e-5": 3e-5}, ("deltarubric",), seeds=[1])
    # registered only once what they need is set: the recipe and the budget (the tune), then the lr (the studies)
    names = lambda: [d.name for d in ss._wide_rl_studies()]  # noqa: E731
    monkeypatch.setattr(ss, "WIDE_RL_RECIPE", "h64-lr3e-3")
    monkeypatch.setattr(ss, "WIDE_RL_STEPS", None)
    assert names() == []
    monkeypatch.setattr(ss, "WIDE_RL_STEPS", 60)
    monkeypatch.setattr(ss, "WIDE_RL_LR", None)
    assert names() == ["deltarubric_wide_tune"]
    monkeypatch.setattr(ss, "WIDE_RL_LR", 3e-4)
    assert names() == ["deltarubric_wide_tune", "deltarubric_wide", "deltarubric_wide_b"]
    decls = {d.name: d for d in ss._wide_rl_studies()}
    assert decls["deltarubric_wide_b"].spec().seeds == ss.WIDE_RL_SEEDS_B


def test_a_unit_reads_its_seeds_start_as_the_starts_val_readout_saw_it(tmp_path):
    from rubricflow.methods.deltarubric.study import START_METRICS, start_metrics
    from rubricflow.util.io import write_json

    write_json(tmp_path / "start" / "start.json", {"seed": 7, "inputs": {}, "summary": {
        "val_oracle": 0.9, "val_deltarubric": 0.6, "val_deciding": 0.25, "val_exhaustive": 0.7,
        "val_generative": 0.5, "val_reading": 0.55, "flat_groups_improvement": 0.4, "flat_groups_absolute": 0.1}})
    got = start_metrics(tmp_path / "start" / "sft", 7)
    assert got == pytest.approx({"start_val_oracle_gap": 0.3, "start_val_deciding": 0.25,
                                 "start_val_exhaustive": 0.7, "start_val_generative": 0.5, "start_val_reading": 0.55,
                                 "start_flat_improvement": 0.4, "start_flat_absolute": 0.1})
    assert set(got) == set(START_METRICS)
    assert start_metrics(tmp_path / "elsewhere" / "sft", 7) == dict.fromkeys(START_METRICS)  # no per-seed start
    assert start_metrics(tmp_path / "start" / "sft", 8) == dict.fromkeys(START_METRICS)  # another seed's start
