"""The stage wrapper under a multi-process launch: every rank runs the stage, rank 0 alone publishes."""

from __future__ import annotations

import json


def _stage_and_cfg(tmp_path):
    from rubricflow.config import load_config
    from rubricflow.pipeline.stage import StageContext, stage
    from rubricflow.sections import DataConfig

    calls = []

    def work(data: DataConfig, ctx: StageContext) -> dict:
        """Counts its calls."""
        calls.append(ctx.seed)
        return {"n": len(calls)}

    cfg = load_config(overrides={"reports_dir": str(tmp_path / "r")})
    return stage("ranked")(work), cfg, calls


def test_rank_0_writes_the_report(tmp_path, monkeypatch):
    spec, cfg, calls = _stage_and_cfg(tmp_path)
    monkeypatch.setenv("RANK", "0")
    assert spec(cfg, track=False)["n"] == 1
    assert json.loads((tmp_path / "r" / "ranked.json").read_text())["n"] == 1


def test_other_ranks_run_the_stage_but_publish_nothing(tmp_path, monkeypatch):
    import rubricflow.tracking

    spec, cfg, calls = _stage_and_cfg(tmp_path)
    monkeypatch.setenv("RANK", "1")

    def no_run(*a, **kw):
        raise AssertionError("rank 1 opened an MLflow run")

    monkeypatch.setattr(rubricflow.tracking, "stage_run", no_run)
    assert spec(cfg, track=True)["n"] == 1 and calls == [cfg.seed]  # the work ran (the ranks train together)
    assert not (tmp_path / "r" / "ranked.json").exists()


def test_process_rank_prefers_the_initialised_process_group(monkeypatch):
    from rubricflow.training.ranks import process_rank

    monkeypatch.setenv("RANK", "3")
    assert process_rank() == 3  # no process group in this test process: the launcher's RANK
    monkeypatch.delenv("RANK")
    assert process_rank() == 0
