"""The multi-seed study harness (rubricflow.study): t-intervals and verdicts by hand, per-unit configs, skipping
finished units on a rerun, a small end-to-end run with an injected unit function, and the CLI refusing to start
without the main pipeline's shared outputs."""

import json
import math

import pytest
from typer.testing import CliRunner

from rubricflow.config import ConfigError, config_from_dict
from rubricflow.study import (
    RESULT_FILE,
    SharedOutputsMissing,
    Unit,
    aggregate,
    plan,
    require_shared,
    run_study,
    t_interval,
    unit_config,
    unit_dir,
    verdict,
)
from rubricflow.study_config import Claim, StudySpec

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


def test_aggregate_rejects_a_duplicate_unit():
    with pytest.raises(ValueError, match="two results for variant 'a' seed 1"):
        aggregate(_results({"a": {1: {"acc": 1}}}) * 2, [], ["acc"])


# ------------------------------------------------------------------------------------------------------------
# configs and the harness on a throw-away project


def _cfg(tmp_path, study=None, **top):
    raw = {
        "reports_dir": str(tmp_path / "reports"),
        "data": {"out_dir": str(tmp_path / "data")},
        "rucl": {"init_from": str(tmp_path / "sft"), "tiers_path": str(tmp_path / "tiers.json"),
                 "checkpoint_dir": str(tmp_path / "ckpt" / "rucl")},
        "study": {"rucl": {"seeds": [11, 22, 33], "out_dir": str(tmp_path / "studies" / "rucl"),
                           "report_dir": str(tmp_path / "reports" / "studies"), **(study or {})}},
        **top,
    }
    return config_from_dict(raw)


def _make_shared(tmp_path):
    from rubricflow.foundation import stamp_path

    stamp = stamp_path(tmp_path / "reports", tmp_path / "data").relative_to(tmp_path)
    for p in ("data/manifest.json", str(stamp), "sft/config.json", "tiers.json"):
        f = tmp_path / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")


def test_default_section_seeds_and_variants():
    spec = StudySpec()
    assert spec.seeds == [101, 202, 303, 404, 505] and 1234 not in spec.seeds
    assert spec.variants["outcome"] == {"rucl.reward.mode": "outcome"}
    assert spec.variants["rucl-linear"]["rucl.curriculum.shape"] == "linear"
    assert spec.variants["shuffled"]["rucl.reward.shuffle_control"] is True
    assert spec.untrained == ["sft"]
    with pytest.raises(ValueError, match="'nope' is not a variant"):
        StudySpec(claims=[Claim(a="nope", b="outcome", metric="accuracy", direction="higher")])


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
    for p in ("data/manifest.json", "reports/validation/", "sft/config.json", "tiers.json"):
        assert str(tmp_path) in msg and p in msg, p
    _make_shared(tmp_path)
    require_shared(cfg, "rucl", cfg.study.rucl, units)  # no error once they exist


# Per-variant effect on accuracy and a seed-dependent wobble: rucl-sigmoid beats outcome by 0.1 +- 0.01 on every
# seed, uniform and rucl-sigmoid are equal up to +-0.02 wobble, and rucl-sigmoid has *more* flawed answers.
BASE = {"sft": 0.40, "outcome": 0.45, "uniform": 0.55, "rucl-sigmoid": 0.55, "rucl-linear": 0.50, "shuffled": 0.30}
WOBBLE = {11: 0.01, 22: -0.01, 33: 0.0}


class FakeUnit:
    def __init__(self, fail_on=None):
        self.calls, self.fail_on = [], fail_on

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        self.calls.append(unit.key)
        if unit.key == self.fail_on:
            raise RuntimeError("killed")
        assert ucfg.seed == unit.seed and str(udir) in ucfg.rucl.out_dir
        w = WOBBLE[unit.seed] * (1 if unit.variant != "uniform" else -1)
        flawed = 0.3 + (0.1 if unit.variant == "rucl-sigmoid" else 0.0) + WOBBLE[unit.seed]
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


def test_cli_refuses_without_the_shared_outputs(tmp_path, monkeypatch):
    from flows.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    res = CliRunner().invoke(app, ["study", "rucl", "--seeds", "1,2", "--variants", "outcome", "--no-track"])
    assert res.exit_code == 1, res.output
    assert "data/synthetic/manifest.json" in res.output
    assert "artifacts/models/sft/config.json" in res.output
    assert "artifacts/rubrics/tiers.json" in res.output
    assert not (tmp_path / "reports" / "studies").exists()
    res = CliRunner().invoke(app, ["study", "deltarubric", "--no-track"])
    assert res.exit_code == 2 and "unknown study 'deltarubric'" in res.output
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
                "artifacts/rubrics/tiers.json", "reports/params/study.json", "rubricflow/study.py"):
        assert dep in st["deps"], dep
    outs = {k: v for o in st["outs"] for k, v in o.items()}
    assert outs["artifacts/studies/rucl"]["persist"] is True  # finished units survive a `dvc repro`
    assert [next(iter(m)) for m in st["metrics"]] == ["reports/studies/rucl.json"]
    assert "rucl_study" not in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]  # `make run` skips it
