"""The method registry: the built-in methods in registration order, names unique across methods, clear errors for a
registration that cannot work."""

import pytest

from rubricflow import registry
from rubricflow.pipeline.stage import StageContext, stage
from rubricflow.sections import Section


def test_the_built_in_methods_in_registration_order():
    assert list(registry.methods())[:5] == ["foundation", "rucl", "deltarubric", "roro", "smol"]
    assert [s.name for s in registry.sections()][:5] == ["rubrics", "rucl", "deltarubric", "roro", "smol"]
    assert set(registry.study_adapters()) >= {"rucl", "deltarubric", "roro"}
    # a study may run another method's units (the smol profile's study is RuCL's)
    method, decl = registry.studies()["rucl_smol"]
    assert method.name == "smol" and decl.spec().method == "rucl"


def _noop(ctx: StageContext) -> dict:
    """Nothing."""
    return {}


def test_a_name_registered_twice_is_refused_naming_both_owners(register_method):
    register_method(registry.Method("dup", "dup", sections=(registry.SectionDecl("rucl", Section, "again"),)))
    with pytest.raises(registry.RegistryError, match="section 'rucl' is registered by both 'rucl' and 'dup'"):
        registry.methods()


def test_a_pipeline_naming_an_unknown_stage_is_refused(register_method):
    register_method(registry.Method("bad", "bad", stages=(stage("bad_one")(_noop),),
                                    pipelines=(registry.Pipeline("bad", "bad", ("bad_one", "nope"), "bad_one"),)))
    with pytest.raises(KeyError, match="unknown stage 'nope'"):
        registry.pipelines()


def test_an_entry_point_that_is_not_a_method_is_refused_by_name(monkeypatch):
    class EP:
        name, value = "broken", "rubricflow.sections:Section"

    monkeypatch.setattr(registry, "entry_points", lambda group: [EP()] if group == registry.ENTRY_POINT_GROUP else [])
    monkeypatch.setattr(registry, "_CACHE", None)
    with pytest.raises(registry.RegistryError, match="entry point 'broken' .*is a ModelMetaclass, expected a "
                                                      "rubricflow.registry.Method"):
        registry.methods()
    monkeypatch.setattr(registry, "_CACHE", None)


def test_loading_every_method_the_config_and_the_cli_imports_no_torch():
    """The registry loads every method's stages, studies and commands on each CLI start: they import their heavy
    logic when it runs, so `rubricflow --help` and `show-config` never pay for torch."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, rubricflow.config, flows.cli; from rubricflow import registry; registry.pipelines(); "
            "print(sorted(m for m in ('torch', 'transformers', 'mlflow', 'prefect.flows') if m in sys.modules))")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_methods_report_lines_and_compare_columns_reach_the_kernels_views(register_method, tmp_path, monkeypatch):
    """The run report and `rubricflow compare` name no method: each shows what the registered methods add
    (RuCL's transition step through the same hooks)."""
    from rubricflow import tracking
    from rubricflow.tracking.compare import compare_runs
    from tasks.artifacts import report_markdown

    toy_stage = stage("toy_train")(_noop)
    register_method(registry.Method(
        "toy", "toy", stages=(toy_stage,),
        report_lines=lambda outcomes: [f"- toy temperature: {o['metrics']['temp']}" for o in outcomes
                                       if "temp" in (o.get("metrics") or {})],
        compare_columns={"temp_tag": lambda rec: rec.get("tags.toy.temp")},
    ))
    outcomes = [{"stage": "toy_train", "status": "ran", "seconds": 1.0, "metrics": {"temp": 0.7}},
                {"stage": "rucl", "status": "ran", "seconds": 2.0, "metrics": {"transition_step": 5}}]
    md = report_markdown("toy", "fr", "pid", outcomes)
    assert "- toy temperature: 0.7" in md and "- curriculum transition: step **5** (stage rucl)" in md

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'ml.db'}")
    with tracking.stage_run("toy_train", experiment="toy", params={"x": 1}) as run:
        run.log_summary({"train/steps": 3})
        run.set_tags({"toy.temp": "hot"})
    cmp = compare_runs("toy", "toy_train", tracking_uri=f"sqlite:///{tmp_path / 'ml.db'}")
    assert cmp.columns[-1] == "temp_tag" and "transition_step" not in cmp.columns  # only the owner's columns
    assert [r["temp_tag"] for r in cmp.rows] == ["hot"]
