"""The multi-seed study harness (rubricflow.study): t-intervals and verdicts by hand, per-unit configs, skipping
finished units on a rerun, a small end-to-end run with an injected unit function, and the CLI refusing to start
without the main pipeline's shared outputs."""

import json
import math

import pytest
from typer.testing import CliRunner

from rubricflow.config import ConfigError, config_from_dict
from rubricflow.methods.rucl.study import rucl_spec
from rubricflow.study.harness import (
    RESULT_FILE,
    SharedOutputsMissing,
    Unit,
    plan,
    require_shared,
    run_study,
    unit_config,
    unit_dir,
)
from rubricflow.study.spec import Claim, StudySpec
from rubricflow.study.stats import aggregate, t_interval, verdict

T_975_DF2 = 4.302652729911275  # Student t quantile 0.975 with 2 degrees of freedom (printed tables: 4.303)


def test_t_interval_by_hand():
    ci = t_interval([0.5, 0.6, 0.7])
    # mean 0.6; sd = sqrt((0.01 + 0 + 0.01) / 2) = 0.1; half = 4.3027 * 0.1 / sqrt(3) = 0.24841
    assert ci["n"] == 3
    assert ci["mean"] == pytest.approx(0.6)
    assert ci["sd"] == pytest.approx(0.1)
    assert ci["half_width"] == pytest.approx(T_975_DF2 * 0.1 / math.sqrt(3))
    assert ci["half_width"] == pytest.approx(0.24841, abs=1e-5)
    assert (ci["ci_low"], ci["ci_high"]) == pytest.approx((0.35159, 0.84841), abs=1e-5)
    # five values, t_{0.975,4} = 2.7764: [1..5] -> mean 3, sd sqrt(2.5), half 2.7764 * 1.5811 / 2.2361 = 1.9632
    assert t_interval([1, 2, 3, 4, 5])["half_width"] == pytest.approx(1.96324, abs=1e-4)
    one = t_interval([0.4])
    assert one["mean"] == 0.4 and one["half_width"] is None and one["ci_low"] is None
    assert t_interval([])["mean"] is None


def test_verdict_rules():
    assert verdict(0.01, 0.2, "higher") == "shown"
    assert verdict(-0.2, -0.01, "higher") == "reversed"
    assert verdict(-0.1, 0.1, "higher") == "not shown"
    assert verdict(-0.2, -0.01, "lower") == "shown"
    assert verdict(0.01, 0.2, "lower") == "reversed"
    assert verdict(0.0, 0.2, "higher") == "not shown"  # an interval touching 0 does not exclude it
    assert verdict(None, None, "higher") == "not shown"


def _results(table):
    """{variant: {seed: {metric: value}}} -> result dicts."""
    return [{"variant": v, "seed": s, "metrics": m} for v, seeds in table.items() for s, m in seeds.items()]


def test_aggregate_means_paired_differences_and_verdicts():
    results = _results({
        "a": {1: {"acc": 0.5, "flaw": 0.30}, 2: {"acc": 0.6, "flaw": 0.20}, 3: {"acc": 0.7, "flaw": 0.25}},
        "b": {1: {"acc": 0.4, "flaw": 0.20}, 2: {"acc": 0.45, "flaw": 0.10}, 3: {"acc": 0.5, "flaw": 0.15}},
        "c": {1: {"acc": 0.6, "flaw": None}, 2: {"acc": 0.5, "flaw": 0.5}, 3: {"acc": 0.7, "flaw": 0.5}},
    })
    claims = [
        Claim(a="a", b="b", metric="acc", direction="higher"),  # diffs .10 .15 .20 -> shown
        Claim(a="a", b="b", metric="acc", direction="lower"),  # same data, opposite claim -> reversed
        Claim(a="a", b="c", metric="acc", direction="higher"),  # diffs -.1 .1 0 -> not shown
        {"a": "a", "b": "b", "metric": "flaw", "direction": "lower"},  # diffs all +.10 (sd 0) -> reversed
        Claim(a="a", b="c", metric="flaw", direction="lower"),  # seed 1 of c has no value: 2 pairs
        Claim(a="a", b="missing", metric="acc", direction="higher"),  # not run: no pairs
    ]
    agg = aggregate(results, claims, ["acc", "flaw"])
    a = agg["variants"]["a"]
    assert a["seeds"] == [1, 2, 3]
    assert a["acc"]["mean"] == pytest.approx(0.6)
    assert a["acc"]["half_width"] == pytest.approx(0.24841, abs=1e-5)
    assert agg["variants"]["c"]["flaw"]["n"] == 2 and agg["variants"]["c"]["flaw"]["mean"] == pytest.approx(0.5)

    c0, c1, c2, c3, c4, c5 = agg["claims"]
    # diffs .10 .15 .20: mean .15, sd .05, half = 4.3027 * .05 / sqrt(3) = 0.12421
    assert c0["diffs"] == pytest.approx({1: 0.1, 2: 0.15, 3: 0.2})
    assert c0["diff_mean"] == pytest.approx(0.15)
    assert (c0["ci_low"], c0["ci_high"]) == pytest.approx((0.02579, 0.27421), abs=1e-5)
    assert c0["verdict"] == "shown"
    assert c0["note"] == "only 3 paired seeds (a claim needs 5)"
    assert c1["verdict"] == "reversed"
    assert c2["diff_mean"] == pytest.approx(0.0) and c2["verdict"] == "not shown"
    assert c3["diff_mean"] == pytest.approx(0.1) and c3["half_width"] == pytest.approx(0.0, abs=1e-12)
    assert c3["verdict"] == "reversed"
    assert c4["n_pairs"] == 2 and c4["diffs"] == pytest.approx({2: -0.3, 3: -0.25})
    assert c5["n_pairs"] == 0 and c5["verdict"] == "not shown" and "no interval" in c5["note"]
    # an exploratory comparison gets its interval and verdict like a claim, and says it is exploratory
    (ex,) = aggregate(results, [Claim(a="a", b="b", metric="acc", direction="higher", exploratory=True)],
                      ["acc"])["claims"]
    assert (ex["verdict"], ex["diff_mean"]) == (c0["verdict"], c0["diff_mean"])
    assert ex["note"] == "exploratory; only 3 paired seeds (a claim needs 5)" and ex["exploratory"] is True


def test_aggregate_rejects_a_duplicate_unit():
    with pytest.raises(ValueError, match="two results for variant 'a' seed 1"):
        aggregate(_results({"a": {1: {"acc": 1}}}) * 2, [], ["acc"])


# ------------------------------------------------------------------------------------------------------------
# configs and the harness on a throw-away project


# The harness tests' own study (independent of RuCL's defaults): six variants, four claims, the shared start.
HARNESS_STUDY = {
    "variants": {"sft": {}, "outcome": {"rucl.reward.mode": "outcome"}, "uniform": {"rucl.reward.mode": "uniform"},
                 "rucl-sigmoid": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "sigmoid"},
                 "rucl-linear": {"rucl.reward.mode": "rucl", "rucl.curriculum.shape": "linear"},
                 "shuffled": {"rucl.reward.mode": "rucl", "rucl.reward.shuffle_control": True}},
    "untrained": ["sft"],
    "metrics": ["accuracy", "correct_but_flawed", "correct_but_flawed_rubric", "s_f", "s_a"],
    "claims": [{"a": "rucl-sigmoid", "b": "outcome", "metric": "accuracy", "direction": "higher"},
               {"a": "rucl-sigmoid", "b": "uniform", "metric": "accuracy", "direction": "higher"},
               {"a": "rucl-sigmoid", "b": "outcome", "metric": "correct_but_flawed", "direction": "lower"},
               {"a": "rucl-sigmoid", "b": "shuffled", "metric": "accuracy", "direction": "higher"}],
    "per_seed_start": False,
}


def _cfg(tmp_path, study=None, **top):
    raw = {
        "reports_dir": str(tmp_path / "reports"),
        "data": {"out_dir": str(tmp_path / "data")},
        "rubrics": {"pool_path": str(tmp_path / "candidates.json")},
        "rucl": {"init_from": str(tmp_path / "sft"), "tiers_path": str(tmp_path / "tiers.json"),
                 "checkpoint_dir": str(tmp_path / "ckpt" / "rucl")},
        "study": {"rucl": {**HARNESS_STUDY, "seeds": [11, 22, 33], "out_dir": str(tmp_path / "studies" / "rucl"),
                           "report_dir": str(tmp_path / "reports" / "studies"), **(study or {})}},
        **top,
    }
    return config_from_dict(raw)


def _make_shared(tmp_path):
    from rubricflow.data.validate import stamp_path

    stamp = stamp_path(tmp_path / "reports", tmp_path / "data").relative_to(tmp_path)
    for p in ("data/manifest.json", str(stamp), "candidates.json", "sft/config.json", "tiers.json"):
        f = tmp_path / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")


def test_default_section_seeds_and_variants():
    spec = rucl_spec()
    assert spec.seeds == [101, 202, 303, 404, 505] and 1234 not in spec.seeds
    assert spec.variants["outcome"] == {"rucl.reward.mode": "outcome"}
    assert spec.variants["rucl-linear"]["rucl.curriculum.shape"] == "linear"
    assert spec.variants["permuted"]["rucl.reward.shuffle_control"] is True
    assert spec.untrained == ["sft"] and spec.per_seed_start  # a seed covers its own SFT start and tiers
    # the pre-registered claims: RL over SFT (sampled and greedy), fewer flawed answers than outcome-only, no more
    # than 0.01 below it in accuracy, above uniform and above outcome on the difference question
    got = {(c.a, c.b, c.metric, c.direction, c.margin) for c in spec.claims}
    assert ("rucl-sigmoid", "outcome", "accuracy", "higher", 0.01) in got
    assert ("rucl-sigmoid", "outcome", "correct_but_flawed", "lower", 0.0) in got
    assert ("rucl-sigmoid", "outcome", "diff_sampled_accuracy", "higher", 0.0) in got
    with pytest.raises(ValueError, match="'nope' is not a variant"):
        StudySpec(**{**spec.model_dump(), "claims": [Claim(a="nope", b="outcome", metric="accuracy",
                                                             direction="higher")]})


def test_unit_configs_have_their_own_dirs_and_seed(tmp_path):
    cfg = _cfg(tmp_path)
    spec = cfg.study.rucl
    a = unit_config(cfg, "rucl", spec, Unit("outcome", 11))
    b = unit_config(cfg, "rucl", spec, Unit("outcome", 22))
    s = unit_config(cfg, "rucl", spec, Unit("sft", 11))
    assert a.seed == 11 and b.seed == 22 and cfg.seed == 1234
    # the seed that drives GRPO (prompt order, rollouts, minibatches) is the unit's too
    assert (a.rucl.grpo.seed, b.rucl.grpo.seed) == (11, 22) and cfg.rucl.grpo.seed == 1234
    assert a.data.seed == cfg.data.seed  # the data is shared, not regenerated per seed
    assert a.rucl.reward.mode == "outcome" and cfg.rucl.reward.mode == "rucl"
    assert a.rucl.out_dir == str(tmp_path / "studies/rucl/outcome/seed11/model")
    assert len({a.rucl.out_dir, b.rucl.out_dir}) == 2 and len({a.rucl.checkpoint_dir, b.rucl.checkpoint_dir}) == 2
    assert a.rucl.checkpoint_dir == str(tmp_path / "ckpt/studies/rucl/outcome/seed11")
    assert a.rucl.eval_policies == {"policy": a.rucl.out_dir}
    assert s.rucl.eval_policies == {"policy": str(tmp_path / "sft")}  # untrained: the shared SFT start
    bad = _cfg(tmp_path, {"variants": {"x": {"seed": 5}}, "claims": [], "untrained": []})
    with pytest.raises(ConfigError, match=r"\['seed'\] are set by the study"):
        unit_config(bad, "rucl", bad.study.rucl, Unit("x", 11))
    typo = _cfg(tmp_path, {"variants": {"x": {"rucl.reward.mood": "outcome"}}, "claims": [], "untrained": []})
    with pytest.raises(ConfigError, match="rucl.reward.mood"):
        unit_config(typo, "rucl", typo.study.rucl, Unit("x", 11))
    with pytest.raises(ConfigError, match="not defined"):
        plan(spec, variants=["outcome", "nope"])


def test_require_shared_names_each_missing_output(tmp_path):
    cfg = _cfg(tmp_path)
    units = plan(cfg.study.rucl)
    with pytest.raises(SharedOutputsMissing) as e:
        require_shared(cfg, "rucl", cfg.study.rucl, units)
    msg = str(e.value)
    for p in ("data/manifest.json", "reports/validation/", "candidates.json", "sft/config.json", "tiers.json"):
        assert str(tmp_path) in msg and p in msg, p
    _make_shared(tmp_path)
    require_shared(cfg, "rucl", cfg.study.rucl, units)  # no error once they exist


# Per-variant effect on accuracy and a seed-dependent wobble: rucl-sigmoid beats outcome by 0.1 +- 0.01 on every
# seed, uniform and rucl-sigmoid are equal up to +-0.02 wobble, and rucl-sigmoid has *more* flawed answers.
BASE = {"sft": 0.40, "outcome": 0.45, "uniform": 0.55, "rucl-sigmoid": 0.55, "rucl-linear": 0.50, "shuffled": 0.30}
WOBBLE = {11: 0.01, 22: -0.01, 33: 0.0}


class FakeUnit:
    def __init__(self, wobble=None, fail_on=None):
        self.calls, self.fail_on, self.wobble = [], fail_on, wobble or WOBBLE

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        self.calls.append(unit.key)
        if unit.key == self.fail_on:
            raise RuntimeError("killed")
        assert ucfg.seed == unit.seed and str(udir) in ucfg.rucl.out_dir
        w = self.wobble[unit.seed] * (1 if unit.variant != "uniform" else -1)
        flawed = 0.3 + (0.1 if unit.variant == "rucl-sigmoid" else 0.0) + self.wobble[unit.seed]
        return {"metrics": {"accuracy": BASE[unit.variant] + w, "correct_but_flawed": flawed, "s_f": 0.9,
                            "s_a": None}, "eval_samples": 12}


def test_rerun_skips_finished_units_and_resumes_after_a_failure(tmp_path):
    cfg = _cfg(tmp_path)
    _make_shared(tmp_path)
    unit = FakeUnit(fail_on="outcome/seed22")
    with pytest.raises(RuntimeError, match="killed"):
        run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=unit)
    assert unit.calls == ["sft/seed11", "sft/seed22", "sft/seed33", "outcome/seed11", "outcome/seed22"]
    spec = cfg.study.rucl
    assert (unit_dir(spec, Unit("outcome", 11)) / RESULT_FILE).exists()
    assert not (unit_dir(spec, Unit("outcome", 22)) / RESULT_FILE).exists()  # failed: no result, rerun

    unit = FakeUnit()
    out = run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=unit)
    assert unit.calls == ["outcome/seed22", "outcome/seed33"]
    assert (out["units"], out["ran"], out["skipped"]) == (6, 2, 4)

    unit = FakeUnit()
    out = run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=unit)
    assert unit.calls == [] and out["ran"] == 0
    saved = json.loads((unit_dir(spec, Unit("outcome", 33)) / RESULT_FILE).read_text())
    assert saved["seed"] == 33 and saved["metrics"]["accuracy"] == pytest.approx(0.45)
    assert saved["overrides"] == {"rucl.reward.mode": "outcome"}


def test_end_to_end_writes_markdown_json_and_plot(tmp_path):
    cfg = _cfg(tmp_path)
    _make_shared(tmp_path)
    unit = FakeUnit()
    out = run_study(cfg, "rucl", unit_fn=unit)
    assert len(unit.calls) == 18 and out["ran"] == 18
    assert out["claims"] == {
        "rucl-sigmoid vs outcome (accuracy)": "shown",  # +0.10 on every seed
        "rucl-sigmoid vs uniform (accuracy)": "not shown",  # diffs +0.02, -0.02, 0
        "rucl-sigmoid vs outcome (correct_but_flawed)": "reversed",  # +0.10 more flawed, claimed lower
        "rucl-sigmoid vs shuffled (accuracy)": "shown",
    }
    reports = tmp_path / "reports" / "studies"
    md = (reports / "rucl.md").read_text()
    assert "| rucl-sigmoid | 3 | 0.550 ± 0.025 |" in md  # wobble .01 -.01 0: sd .01, half 4.303*.01/1.732
    assert "| sft | 3 | 0.400 ± 0.025 |" in md
    assert "| rucl-sigmoid vs outcome | accuracy | higher | 3 | 0.100 | [0.100, 0.100] | **shown** |" in md
    assert "**reversed**" in md and "**not shown**" in md
    assert "seeds: 11, 22, 33" in md and "git commit:" in md and "machine:" in md
    assert "n/a" in md  # s_a is None for every unit
    data = json.loads((reports / "rucl.json").read_text())
    assert data["seeds"] == [11, 22, 33] and len(data["units"]) == 18
    assert data["variants"]["outcome"]["accuracy"]["mean"] == pytest.approx(0.45)
    assert [c["verdict"] for c in data["claims"]] == ["shown", "not shown", "reversed", "shown"]
    assert (reports / "rucl.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # a second seed set reports beside the first, under its own name; the first report is untouched
    first = (reports / "rucl.md").read_bytes()
    out = run_study(cfg, "rucl", seeds=[44, 55], variants=["sft", "outcome"], unit_fn=FakeUnit({44: 0.0, 55: 0.0}),
                    report_name="rucl-seeds-b")
    assert out["reports"]["md"] == str(reports / "rucl-seeds-b.md") and out["ran"] == 4
    assert "seeds: 44, 55" in (reports / "rucl-seeds-b.md").read_text()
    assert (reports / "rucl.md").read_bytes() == first
    with pytest.raises(ConfigError, match="plain file name"):
        run_study(cfg, "rucl", seeds=[44, 55], variants=["sft"], unit_fn=FakeUnit(), report_name="../x")


def test_cli_refuses_without_the_shared_outputs(tmp_path, monkeypatch):
    from flows.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    res = CliRunner().invoke(app, ["study", "rucl", "--seeds", "1,2", "--variants", "outcome", "--no-track"])
    assert res.exit_code == 1, res.output
    assert "data/synthetic/manifest.json" in res.output and "artifacts/rubrics/candidates.json" in res.output
    # the study builds each seed's SFT start and tiers itself: they are not required up front
    assert "artifacts/models/sft/config.json" not in res.output and "tiers.json" not in res.output
    assert not (tmp_path / "reports" / "studies").exists()
    res = CliRunner().invoke(app, ["study", "rucl_tune", "--no-track"])  # a study on the shared start needs them
    assert res.exit_code == 1
    assert "artifacts/models/sft/config.json" in res.output and "artifacts/rubrics/tiers.json" in res.output
    res = CliRunner().invoke(app, ["study", "deltarubric", "--no-track"])
    assert res.exit_code == 1 and "data/deltarubric/pairs/manifest.json" in res.output
    assert "artifacts/deltarubric/sft/config.json" not in res.output  # each seed trains its own warm start
    res = CliRunner().invoke(app, ["study", "roro", "--no-track"])
    assert res.exit_code == 1 and "data/roro/pairs.parquet" in res.output, res.output
    res = CliRunner().invoke(app, ["study", "nosuch", "--no-track"])
    assert res.exit_code == 2 and "unknown study 'nosuch'" in res.output
    res = CliRunner().invoke(app, ["study", "rucl", "--seeds", "1,x", "--no-track"])
    assert res.exit_code != 0 and "--seeds" in res.output


def test_studies_dvc_yaml_runs_the_study_apart_from_the_main_pipeline():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    st = yaml.safe_load((root / "studies" / "dvc.yaml").read_text())["stages"]["rucl_study"]
    assert st["cmd"] == "rubricflow study rucl" and st["wdir"] == ".."
    # the shared outputs the harness checks for are its deps, so the study re-runs when the main pipeline changes
    for dep in ("data/synthetic", "reports/validation/data/synthetic.json", "artifacts/models/sft",
                "artifacts/rubrics/tiers.json", "reports/params/study.json", "rubricflow/study"):
        assert dep in st["deps"], dep
    outs = {k: v for o in st["outs"] for k, v in o.items()}
    assert outs["artifacts/studies/rucl"]["persist"] is True  # finished units survive a `dvc repro`
    assert [next(iter(m)) for m in st["metrics"]] == ["reports/studies/rucl.json"]
    assert "rucl_study" not in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]  # `make run` skips it


# ------------------------------------------------------------------------------------------------------------
# selection studies: evaluated on val, under the test-split guard, naming the setting they choose


def test_selection_scores_each_setting_over_its_variants():
    from rubricflow.study.spec import Selection
    from rubricflow.study.stats import select

    results = _results({
        "o-lo": {1: {"acc": 0.50}, 2: {"acc": 0.52}}, "r-lo": {1: {"acc": 0.60}, 2: {"acc": 0.62}},
        "o-hi": {1: {"acc": 0.70}, 2: {"acc": 0.72}}, "r-hi": {1: {"acc": 0.30}, 2: {"acc": 0.32}},
        "o-mid": {1: {"acc": 0.56}, 2: {"acc": 0.56}}, "r-mid": {1: {"acc": None}, 2: {"acc": None}},
    })
    agg = aggregate(results, [], ["acc"])
    chosen = select(agg, Selection(metric="acc", settings={"lo": ["o-lo", "r-lo"], "hi": ["o-hi", "r-hi"],
                                                          "mid": ["o-mid", "r-mid"]}))
    # lo: (0.51 + 0.61) / 2 = 0.56; hi: (0.71 + 0.31) / 2 = 0.51 (the best single variant is o-hi, but the setting
    # must serve both methods); mid has no value for r-mid: not eligible, though o-mid alone would tie lo
    assert chosen["settings"]["lo"]["score"] == pytest.approx(0.56)
    assert chosen["settings"]["hi"]["score"] == pytest.approx(0.51)
    assert chosen["settings"]["mid"]["score"] is None
    assert chosen["selected"] == "lo"
    lower = select(agg, Selection(metric="acc", direction="lower", settings={"lo": ["o-lo", "r-lo"],
                                                                            "hi": ["o-hi", "r-hi"]}))
    assert lower["selected"] == "hi"
    per_variant = select(agg, {"metric": "acc"})  # no settings: every variant is its own
    assert per_variant["selected"] == "o-hi"
    assert select(agg, None) is None


def test_a_selection_study_must_be_evaluated_on_val():
    with pytest.raises(ValueError, match="must be evaluated on val"):
        StudySpec(**{**rucl_spec().model_dump(), "selection": {"metric": "accuracy"}, "claims": []})
    with pytest.raises(ValueError, match=r"selection.settings.x: \['nope'\] are not variants"):
        StudySpec(**{**rucl_spec().model_dump(), "eval_split": "val", "claims": [],
                     "selection": {"metric": "accuracy", "settings": {"x": ["nope"]}}})
    tune = config_from_dict({}).study.rucl_tune
    assert tune.eval_split == "val" and tune.selection is not None
    assert not set(tune.seeds) & set(config_from_dict({}).study.rucl.seeds)  # tuning seeds are not the study's
    # every setting is trained under both reward modes, so the choice favours neither method
    for setting, members in tune.selection.settings.items():
        assert sorted(tune.variants[v]["rucl.reward.mode"] for v in members) == ["outcome", "rucl"], setting
        assert len({tuple(sorted((k, x) for k, x in tune.variants[v].items() if k != "rucl.reward.mode"))
                    for v in members}) == 1, setting
    # the rule: sampled val accuracy (the RL objective), guarded by greedy val accuracy within 0.02 of the start
    assert (tune.selection.metric, tune.selection.guard_metric, tune.selection.guard_baseline,
            tune.selection.guard_margin) == ("sampled_accuracy", "accuracy", "sft", 0.02)


class SplitReadingUnit:
    """A unit that reads the split its config says it is evaluated on, as the RuCL unit (rubricflow.methods.rucl.study.run_unit) does."""

    def __init__(self, tmp_path):
        self.tmp_path, self.splits = tmp_path, []

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        from rubricflow.data.schema import read_dataset

        self.splits.append(ucfg.rucl.eval_split)
        rows = read_dataset(self.tmp_path / "ds", split=ucfg.rucl.eval_split)
        acc = {"o-a": 0.5, "r-a": 0.7, "o-b": 0.6, "r-b": 0.5}[unit.variant] + 0.01 * (unit.seed % 3)
        return {"metrics": {"accuracy": acc, "correct_but_flawed": 0.1}, "eval_samples": len(rows)}


def _tiny_dataset(path):
    from rubricflow.data.schema import Sample, write_dataset

    samples = [Sample(f"t-{sp}-{i}", [], "q?", "1", "int", "counting", {}, sp, "synthetic/counting")
               for sp in ("train", "val", "test") for i in range(3)]
    write_dataset(path, samples, manifest={"generator": "test"})


def test_a_val_study_never_reads_test_and_reports_its_choice(tmp_path):
    from rubricflow.splits import TestSplitAccess

    _tiny_dataset(tmp_path / "ds")
    variants = {"o-a": {"rucl.reward.mode": "outcome"}, "r-a": {"rucl.reward.mode": "rucl"},
                "o-b": {"rucl.reward.mode": "outcome", "rucl.grpo.lr": 1e-3},
                "r-b": {"rucl.reward.mode": "rucl", "rucl.grpo.lr": 1e-3}}
    study = {"variants": variants, "untrained": [], "claims": [], "metrics": ["accuracy", "correct_but_flawed"],
             "eval_split": "val", "selection": {"metric": "accuracy", "settings": {"a": ["o-a", "r-a"],
                                                                                 "b": ["o-b", "r-b"]}}}
    cfg = _cfg(tmp_path, study)
    _make_shared(tmp_path)
    unit = SplitReadingUnit(tmp_path)
    out = run_study(cfg, "rucl", unit_fn=unit)
    assert set(unit.splits) == {"val"} and out["eval_split"] == "val"
    # a: (0.51 + 0.71) / 2 = 0.61 > b: (0.61 + 0.51) / 2 = 0.56 (seed wobble 11, 22, 33 -> +.02, +.01, 0)
    assert out["selected"] == "a"
    assert out["selected_overrides"] == {"o-a": variants["o-a"], "r-a": variants["r-a"]}
    md = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    assert "val split" in md and "**selected: a**" in md and "test split" not in md
    data = json.loads((tmp_path / "reports" / "studies" / "rucl.json").read_text())
    assert data["selection"]["selected"] == "a" and data["eval_split"] == "val"
    assert data["selection"]["settings"]["b"]["score"] == pytest.approx(0.56)
    saved = json.loads((unit_dir(cfg.study.rucl, Unit("o-b", 22)) / RESULT_FILE).read_text())
    assert saved["eval_split"] == "val"

    # the guard is real: a selection unit that asks for test rows fails, and leaves no result behind
    class Peeking(SplitReadingUnit):
        def __call__(self, ucfg, unit, udir, run, secret_resolver):
            from rubricflow.data.schema import read_dataset

            read_dataset(self.tmp_path / "ds", split="test")

    peek = _cfg(tmp_path, {**study, "out_dir": str(tmp_path / "peek")})
    with pytest.raises(TestSplitAccess, match="study rucl"):
        run_study(peek, "rucl", unit_fn=Peeking(tmp_path))
    assert not list((tmp_path / "peek").rglob(RESULT_FILE))
    # the same unit in a reporting study (eval_split test) may read test
    report = _cfg(tmp_path, {"out_dir": str(tmp_path / "rep"), "variants": {"o-a": variants["o-a"]},
                             "untrained": [], "claims": [], "metrics": ["accuracy"]})
    unit = SplitReadingUnit(tmp_path)
    run_study(report, "rucl", unit_fn=unit)
    assert set(unit.splits) == {"test"}


def test_a_tracked_study_logs_a_parent_and_one_child_per_unit(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RUBRICFLOW_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    monkeypatch.delenv("RUBRICFLOW_PIPELINE_ID", raising=False)
    cfg = _cfg(tmp_path, {"seeds": [11, 22]})
    _make_shared(tmp_path)
    out = run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=FakeUnit(), track=True)
    assert out["ran"] == 4
    client = mlflow.tracking.MlflowClient()
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = client.search_runs([exp.experiment_id], max_results=50)
    children = [r for r in runs if r.data.tags.get("study") == "rucl"]
    parents = [r for r in runs if r.info.run_id not in {c.info.run_id for c in children}]
    assert len(parents) == 1 and len(children) == 4
    assert {(c.data.tags["variant"], c.data.tags["seed"]) for c in children} == {
        ("sft", "11"), ("sft", "22"), ("outcome", "11"), ("outcome", "22")}
    assert all(c.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id for c in children)
    by_key = {(c.data.tags["variant"], c.data.tags["seed"]): c for c in children}
    assert by_key[("outcome", "22")].data.metrics["test/accuracy"] == pytest.approx(0.45 - 0.01)
    assert parents[0].info.status == "FINISHED"
    arts = {a.path for a in client.list_artifacts(parents[0].info.run_id, "study")}
    assert arts == {"study/rucl.md", "study/rucl.json", "study/rucl.png"}
    # the unit results name their child run; the env var the study set for its parent run is gone again
    saved = json.loads((unit_dir(cfg.study.rucl, Unit("sft", 11)) / RESULT_FILE).read_text())
    assert saved["mlflow_run_id"] == by_key[("sft", "11")].info.run_id
    import os

    assert "RUBRICFLOW_PIPELINE_ID" not in os.environ


def test_a_unit_finished_on_other_inputs_is_rerun_and_its_old_result_kept(tmp_path, capsys):
    from rubricflow.study.harness import STALE_FILE

    cfg = _cfg(tmp_path, {"seeds": [11, 22]})
    _make_shared(tmp_path)
    unit = FakeUnit()
    run_study(cfg, "rucl", variants=["outcome"], unit_fn=unit)
    assert unit.calls == ["outcome/seed11", "outcome/seed22"]
    saved = json.loads((unit_dir(cfg.study.rucl, Unit("outcome", 11)) / RESULT_FILE).read_text())
    assert set(saved["inputs"]) == {"config", "seed", "init_policy", "tiers", "data_set", "code"}

    unit = FakeUnit()
    run_study(cfg, "rucl", variants=["outcome"], unit_fn=unit)
    assert unit.calls == []  # same inputs: nothing re-runs

    # the SFT start is retrained (its files change): every unit trained from it is stale
    (tmp_path / "sft" / "config.json").write_text('{"retrained": true}')
    unit = FakeUnit()
    out = run_study(cfg, "rucl", variants=["outcome"], unit_fn=unit)
    assert unit.calls == ["outcome/seed11", "outcome/seed22"] and out["ran"] == 2
    assert "outcome/seed11 finished on other inputs (init_policy changed)" in capsys.readouterr().out
    stale = json.loads((unit_dir(cfg.study.rucl, Unit("outcome", 11)) / STALE_FILE).read_text())
    assert stale["inputs"]["init_policy"] != json.loads(
        (unit_dir(cfg.study.rucl, Unit("outcome", 11)) / RESULT_FILE).read_text())["inputs"]["init_policy"]

    # a config change that reaches the unit (the reward's alpha) re-runs it too, naming the config
    changed = _cfg(tmp_path, {"seeds": [11]}, rucl={"init_from": str(tmp_path / "sft"),
                                                     "tiers_path": str(tmp_path / "tiers.json"),
                                                     "checkpoint_dir": str(tmp_path / "ckpt" / "rucl"),
                                                     "reward": {"alpha": 0.5}})
    unit = FakeUnit()
    run_study(changed, "rucl", variants=["outcome"], unit_fn=unit)
    assert unit.calls == ["outcome/seed11"]
    assert "(config changed)" in capsys.readouterr().out


def test_a_profile_bound_study_is_refused_under_another_profile():
    from rubricflow.config import load_config
    from rubricflow.sections import ConfigError
    from rubricflow.study.harness import study_spec

    with pytest.raises(ConfigError, match=r"study rucl_smol belongs to profile 'smol' .*`rubricflow --profile smol "
                                          r"study rucl_smol` \(the profile now is 'tiny'\)"):
        study_spec(load_config("params.yaml", profile="tiny"), "rucl_smol")
    spec = study_spec(load_config("params.yaml", profile="smol"), "rucl_smol")
    assert spec.untrained == ["sft"] and spec.out_dir == "artifacts/studies/rucl_smol"
    assert set(spec.variants) == {"sft", "outcome", "rucl"}
    assert study_spec(load_config("params.yaml", profile="smol"), "rucl").profile is None  # unbound studies run anywhere


def test_a_non_inferiority_claim_is_judged_against_its_margin():
    # a - b > -0.01 is shown when the whole interval lies above -0.01, reversed when it lies below
    assert verdict(-0.008, 0.004, "higher", margin=0.01) == "shown"
    assert verdict(-0.008, 0.004, "higher") == "not shown"
    assert verdict(-0.05, -0.02, "higher", margin=0.01) == "reversed"
    assert verdict(-0.004, 0.008, "lower", margin=0.01) == "shown"


def test_the_selection_guard_makes_a_setting_that_breaks_the_start_ineligible():
    from rubricflow.study.spec import Selection
    from rubricflow.study.stats import select

    rows = [{"variant": v, "seed": s, "metrics": {"sampled": sm, "greedy": g}}
            for s in (1, 2) for v, sm, g in (("sft", 0.50, 0.80), ("fast", 0.70, 0.70), ("slow", 0.60, 0.79))]
    agg = aggregate(rows, [], ["sampled", "greedy"])
    sel = Selection(metric="sampled", settings={"fast": ["fast"], "slow": ["slow"]}, guard_metric="greedy",
                    guard_baseline="sft", guard_margin=0.02)
    chosen = select(agg, sel)
    # "fast" has the best sampled score but its greedy accuracy fell 0.10 below the start: not eligible
    assert chosen["selected"] == "slow"
    assert chosen["settings"]["fast"]["guard_ok"] is False and chosen["settings"]["slow"]["guard_ok"] is True
    assert select(agg, sel.model_copy(update={"guard_margin": 0.2}))["selected"] == "fast"


def test_report_only_runs_nothing_moves_nothing_and_names_units_on_other_inputs(tmp_path):
    from rubricflow.study.harness import UnitsUnfinished, report_only

    cfg = _cfg(tmp_path)
    _make_shared(tmp_path)
    spec = cfg.study.rucl
    run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=FakeUnit())
    with pytest.raises(UnitsUnfinished, match=r"not finished: uniform/seed11 \(has not finished\)"):
        report_only(cfg, "rucl", variants=["sft", "uniform"])

    first = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    out = report_only(cfg, "rucl", variants=["sft", "outcome"], report_name="again")
    again = (tmp_path / "reports" / "studies" / "again.md").read_text()
    assert out["ran"] == 0 and out["skipped"] == 6
    assert again.split("- machine:")[0] == first.split("- machine:")[0]  # the same tables and verdicts
    assert "every unit's inputs are current" in again

    # another lr: every trained unit finished on other inputs; it is used, named, and left where it is
    changed = _cfg(tmp_path, rucl={"init_from": str(tmp_path / "sft"), "tiers_path": str(tmp_path / "tiers.json"),
                                   "checkpoint_dir": str(tmp_path / "ckpt" / "rucl"), "grpo": {"lr": 0.5}})
    report_only(changed, "rucl", variants=["sft", "outcome"], report_name="changed")
    md = (tmp_path / "reports" / "studies" / "changed.md").read_text()
    assert "6 unit(s) finished on other inputs than the current ones (config differ)" in md
    assert "outcome/seed11" in md.split("--report-only")[1]
    assert (unit_dir(spec, Unit("outcome", 11)) / RESULT_FILE).exists()
    assert not (unit_dir(spec, Unit("outcome", 11)) / "result.stale.json").exists()
