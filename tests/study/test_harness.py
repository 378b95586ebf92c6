"""The multi-seed study harness (rubricflow.study): per-unit configs, skipping finished units on a rerun, a small
end-to-end run with an injected unit function, tracking, units finished on other inputs, report-only, and the CLI
refusing to start without the main pipeline's shared outputs."""

import json

import pytest
from typer.testing import CliRunner

from rubricflow.config import ConfigError
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
from tests.study.helpers import FakeUnit, harness_cfg, make_shared


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
    cfg = harness_cfg(tmp_path)
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
    bad = harness_cfg(tmp_path, {"variants": {"x": {"seed": 5}}, "claims": [], "untrained": []})
    with pytest.raises(ConfigError, match=r"\['seed'\] are set by the study"):
        unit_config(bad, "rucl", bad.study.rucl, Unit("x", 11))
    typo = harness_cfg(tmp_path, {"variants": {"x": {"rucl.reward.mood": "outcome"}}, "claims": [], "untrained": []})
    with pytest.raises(ConfigError, match="rucl.reward.mood"):
        unit_config(typo, "rucl", typo.study.rucl, Unit("x", 11))
    with pytest.raises(ConfigError, match="not defined"):
        plan(spec, variants=["outcome", "nope"])


def test_require_shared_names_each_missing_output(tmp_path):
    cfg = harness_cfg(tmp_path)
    units = plan(cfg.study.rucl)
    with pytest.raises(SharedOutputsMissing) as e:
        require_shared(cfg, "rucl", cfg.study.rucl, units)
    msg = str(e.value)
    for p in ("data/manifest.json", "reports/validation/", "candidates.json", "sft/config.json", "tiers.json"):
        assert str(tmp_path) in msg and p in msg, p
    make_shared(tmp_path)
    require_shared(cfg, "rucl", cfg.study.rucl, units)  # no error once they exist


def test_rerun_skips_finished_units_and_resumes_after_a_failure(tmp_path):
    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
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
    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
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
    # sd 0: p 0 raw and Holm-adjusted, no effect too small to detect
    assert ("| rucl-sigmoid vs outcome | accuracy | higher | 3 | 0.100 | [0.100, 0.100] | 0.000 | 0.000 | 0.000 | "
            "**shown** |") in md
    assert "Holm-adjusted over the 4 pre-registered testable claim(s)" in md
    assert "params hash: " in md and "unit inputs: digest " in md
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

    root = Path(__file__).resolve().parents[2]
    st = yaml.safe_load((root / "studies" / "dvc.yaml").read_text())["stages"]["rucl_study"]
    assert st["cmd"] == "rubricflow study rucl" and st["wdir"] == ".."
    # the shared outputs the harness checks for are its deps, so the study re-runs when the main pipeline changes
    for dep in ("data/synthetic", "reports/validation/data/synthetic.json", "artifacts/models/sft",
                "artifacts/rubrics/tiers.json", "reports/params/study.json", "rubricflow/study"):
        # the resolved config sections are params files (DVC names the key that changed), the rest plain deps
        assert dep in st["deps"] + [k for it in st["params"] for k in it], dep
    outs = {k: v for o in st["outs"] for k, v in o.items()}
    assert outs["artifacts/studies/rucl"]["persist"] is True  # finished units survive a `dvc repro`
    assert [next(iter(m)) for m in st["metrics"]] == ["reports/studies/rucl.json"]
    assert "rucl_study" not in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]  # `make run` skips it


def test_a_tracked_study_logs_a_parent_and_one_child_per_unit(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RUBRICFLOW_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    monkeypatch.delenv("RUBRICFLOW_PIPELINE_ID", raising=False)
    cfg = harness_cfg(tmp_path, {"seeds": [11, 22]})
    make_shared(tmp_path)
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

    cfg = harness_cfg(tmp_path, {"seeds": [11, 22]})
    make_shared(tmp_path)
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
    changed = harness_cfg(tmp_path, {"seeds": [11]}, rucl={"init_from": str(tmp_path / "sft"),
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
    # unbound studies run anywhere
    assert study_spec(load_config("params.yaml", profile="smol"), "rucl").profile is None


def test_report_only_runs_nothing_moves_nothing_and_names_units_on_other_inputs(tmp_path):
    from rubricflow.study.harness import UnitsUnfinished, report_only

    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
    spec = cfg.study.rucl
    run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=FakeUnit())
    with pytest.raises(UnitsUnfinished, match=r"not finished: uniform/seed11 \(has not finished\)"):
        report_only(cfg, "rucl", variants=["sft", "uniform"])

    first = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    out = report_only(cfg, "rucl", variants=["sft", "outcome"], report_name="again")
    again = (tmp_path / "reports" / "studies" / "again.md").read_text()
    assert out["ran"] == 0 and out["skipped"] == 6
    assert again == first  # nothing in a report depends on how or when it was written
    assert "every unit's inputs are this commit's" in again

    # another lr: every trained unit finished on other inputs; it is used, named, and left where it is
    changed = harness_cfg(tmp_path, rucl={"init_from": str(tmp_path / "sft"),
                                          "tiers_path": str(tmp_path / "tiers.json"),
                                          "checkpoint_dir": str(tmp_path / "ckpt" / "rucl"), "grpo": {"lr": 0.5}})
    report_only(changed, "rucl", variants=["sft", "outcome"], report_name="changed")
    md = (tmp_path / "reports" / "studies" / "changed.md").read_text()
    assert "6 unit(s) finished on other inputs than this commit's (config differ)" in md
    assert "outcome/seed11" in md.split("finished on other inputs")[1]
    assert (unit_dir(spec, Unit("outcome", 11)) / RESULT_FILE).exists()
    assert not (unit_dir(spec, Unit("outcome", 11)) / "result.stale.json").exists()


def test_a_unit_that_ran_while_the_code_changed_is_named_in_the_report_of_the_run(tmp_path, monkeypatch):
    """The code changes while a study runs, after a unit started: the run keeps its result (it ran to the end), and
    the report it writes names that unit and the part that differs instead of calling every input this commit's."""
    import rubricflow.study.harness as harness

    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
    version = {"code": "before"}
    monkeypatch.setattr(harness, "code_hash", lambda *targets: version["code"])

    class EditsTheCode(FakeUnit):
        def __call__(self, ucfg, unit, udir, run, secret_resolver):
            version["code"] = "after"  # an edit lands while the first unit runs
            return super().__call__(ucfg, unit, udir, run, secret_resolver)

    run_study(cfg, "rucl", variants=["sft"], seeds=[11], unit_fn=EditsTheCode())
    md = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    assert "1 unit(s) finished on other inputs than this commit's (code differ)" in md
    assert "sft/seed11" in md.split("finished on other inputs")[1]
    assert "every unit's inputs are this commit's" not in md


def test_two_runs_of_the_same_units_count_each_unit_once(tmp_path):
    """Two study processes on the same units: each unit runs once (the unit lock), and each run counts only the
    units it ran, not the ones it found finished after waiting on their lock."""
    import threading
    import time

    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)

    class Slow(FakeUnit):
        def __call__(self, *a):
            time.sleep(0.05)
            return super().__call__(*a)

    units = [Slow(), Slow()]
    outs = [None, None]

    def go(i):
        outs[i] = run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=units[i])

    threads = [threading.Thread(target=go, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ran = sorted(units[0].calls + units[1].calls)
    assert len(ran) == len(set(ran)) == 6  # every unit exactly once
    assert outs[0]["ran"] + outs[1]["ran"] == 6
    assert outs[0]["ran"] == len(units[0].calls) and outs[1]["ran"] == len(units[1].calls)


def test_a_value_that_is_not_a_finite_number_is_named_not_dropped_silently(tmp_path, capsys):
    """A result whose metric is NaN or a string (a unit that wrote one, or an edit with its checksum recomputed):
    the value is left out of the means and claims, and the report and a warning name it."""
    from rubricflow.study.harness import report_only
    from rubricflow.study.units import write_result

    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
    run_study(cfg, "rucl", variants=["sft", "outcome"], unit_fn=FakeUnit())
    for seed, value in ((22, float("nan")), (33, "0.5")):
        p = unit_dir(cfg.study.rucl, Unit("outcome", seed)) / RESULT_FILE
        r = json.loads(p.read_text())
        r["metrics"]["accuracy"] = value
        write_result(p, r)
    capsys.readouterr()
    report_only(cfg, "rucl", variants=["sft", "outcome"])
    md = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    assert ("**2 value(s) are not finite numbers and are left out of the means and claims:** outcome/seed22 "
            "accuracy = nan; outcome/seed33 accuracy = '0.5'") in md
    assert "| outcome | 3 | 0.460 (n=1) |" in md
    assert "2 metric value(s) are not finite numbers" in capsys.readouterr().err


def test_seeds_out_of_numpys_range_are_refused_in_the_section_too(tmp_path):
    with pytest.raises(ConfigError, match=r"seeds \[-1, 4294967296\]: every seed must lie in \[0, 4294967295\]"):
        harness_cfg(tmp_path, {"seeds": [-1, 5, 2**32]})


def test_a_toy_study_with_a_failing_precondition_prints_its_claim_untestable(tmp_path):
    """The report says "untestable (precondition X failed)" for a gated claim, with the per-seed values, while the
    other claims are Holm-adjusted among themselves."""
    pre = {"name": "flaws stay low", "variant": "rucl-sigmoid", "metric": "correct_but_flawed", "direction": "lower",
           "threshold": 0.35, "min_share": 0.8, "gates": ["rucl-sigmoid vs outcome (accuracy)"],
           "description": "a toy manipulation check"}
    cfg = harness_cfg(tmp_path, {"preconditions": [pre]})
    make_shared(tmp_path)
    out = run_study(cfg, "rucl", unit_fn=FakeUnit())
    assert out["preconditions"] == {"flaws stay low": "fails"}  # 0.41, 0.39, 0.40: no seed meets <= 0.35
    assert out["claims"]["rucl-sigmoid vs outcome (accuracy)"] == "untestable"
    md = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    assert "**untestable (precondition flaws stay low failed)**" in md
    assert ("| flaws stay low: rucl-sigmoid correct_but_flawed | 11: 0.410 no, 22: 0.390 no, 33: 0.400 no "
            "| <= 0.35 on >= 3 of 3 | 0/3 | **fails** |") in md
    assert "Holm-adjusted over the 3 pre-registered testable claim(s)" in md


def test_the_report_names_as_shared_only_what_no_seed_builds_itself(tmp_path):
    """A study that builds each seed's start lists the main pipeline's data as shared, not one seed's start."""
    from rubricflow.study.harness import study_info

    cfg = harness_cfg(tmp_path)
    per_seed = cfg.study.rucl.model_copy(update={"per_seed_start": True})
    units = plan(per_seed)
    assert "sft/config.json" in study_info(cfg, "rucl", cfg.study.rucl, units)["shared"]
    shared = study_info(cfg, "rucl", per_seed, units)["shared"]
    assert "data/manifest.json" in shared and "/_start/" not in shared and "sft/config.json" not in shared
    assert shared.endswith("the start (seed_starts)")


def test_units_that_need_a_start_not_built_yet_wait_for_the_unit_that_builds_it(tmp_path):
    """With a start per seed, the first unit of each seed whose start is not built goes first and the seed's other
    units wait for it (a free worker takes a unit that can run rather than block on the start's lock); a seed whose
    start is built waits for nothing; a study without starts keeps its order."""
    from rubricflow.study.harness import start_order, unit_start_dir
    from rubricflow.study.seed_start import START_FILE

    cfg = harness_cfg(tmp_path)
    spec = cfg.study.rucl.model_copy(update={"per_seed_start": True})
    units = plan(spec, seeds=[11, 22], variants=["sft", "outcome", "uniform"])
    built = unit_start_dir(spec, Unit("sft", 22))
    built.mkdir(parents=True)
    (built / START_FILE).write_text("{}")
    order = start_order(spec, units)
    assert order[0] == (Unit("sft", 11), None)  # the builder of seed 11's start first
    assert sorted(u.key for u, _ in order) == sorted(u.key for u in units)
    waits = {u.key: (w.key if w else None) for u, w in order}
    assert waits["outcome/seed11"] == waits["uniform/seed11"] == "sft/seed11"
    assert waits["sft/seed22"] is waits["outcome/seed22"] is waits["uniform/seed22"] is None
    # every unit comes after the one it waits for
    position = {u.key: i for i, (u, _) in enumerate(order)}
    assert all(position[w.key] < position[u.key] for u, w in order if w)
    assert start_order(cfg.study.rucl, units) == [(u, None) for u in units]
