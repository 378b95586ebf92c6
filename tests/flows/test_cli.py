from typer.testing import CliRunner

from flows.cli import app


def test_help_lists_one_subcommand_per_stage():
    res = CliRunner().invoke(app, ["--help"])
    assert res.exit_code == 0
    for cmd in ("data", "validate", "ingest", "base-model", "sft", "summary", "show-config"):
        assert cmd in res.output, cmd


def test_bad_override_fails_before_work(tmp_path):
    res = CliRunner().invoke(app, ["--set", "sft.steps=-5", "--no-track", "data"])
    assert res.exit_code == 2
    assert "sft.steps" in res.output


def test_show_config_applies_profile():
    res = CliRunner().invoke(app, ["--profile", "gpu", "show-config"])
    assert res.exit_code == 0 and "Qwen/Qwen2.5-VL-7B-Instruct" in res.output


def test_study_help_lists_every_study_with_one_line():
    from typer.testing import CliRunner

    from flows.cli import app
    from rubricflow import registry

    res = CliRunner().invoke(app, ["study", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    listed = [line.strip() for line in res.output.splitlines() if ": " in line]
    for name in registry.studies():
        (line,) = [x for x in listed if x.startswith(f"{name}: ")]
        assert len(line) < 140, line


def test_compare_takes_one_pipeline_run(monkeypatch):
    from typer.testing import CliRunner

    import rubricflow.tracking.compare as compare
    from flows.cli import app

    seen = {}

    def fake(exp, stage, metrics, max_runs, pipeline=None):
        seen.update(stage=stage, pipeline=pipeline)
        raise ValueError("nothing to compare here")

    monkeypatch.setattr(compare, "compare_runs", fake)
    res = CliRunner().invoke(app, ["--no-track", "compare", "--stage", "rucl", "--pipeline", "latest"])
    assert res.exit_code == 1 and "nothing to compare here" in res.output
    assert seen == {"stage": "rucl", "pipeline": "latest"}


def test_study_carry_refuses_an_unknown_action_an_unknown_study_and_nothing_carried(tmp_path):
    res = CliRunner().invoke(app, ["study-carry", "pack", "rucl"])
    assert res.exit_code == 2 and "must be save or restore, got 'pack'" in res.output
    res = CliRunner().invoke(app, ["study-carry", "save", "nope"])
    assert res.exit_code == 2 and "unknown study 'nope'" in res.output
    res = CliRunner().invoke(app, ["study-carry", "restore", "rucl", "--dir", str(tmp_path)])
    assert res.exit_code == 1 and "no carried progress of study rucl" in res.output
    res = CliRunner().invoke(app, ["study-carry", "restore", "rucl", "--leave-out", "base"])
    assert res.exit_code == 2 and "--leave-out applies to save only" in res.output
