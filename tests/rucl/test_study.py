"""RuCL's study adapter: a unit trains through the same function as the `rucl` stage, so its resume key holds the
judge section (a unit re-run after a judge change must not resume a checkpoint trained under the old judge)."""

import pytest

from rubricflow.config import config_from_dict
from rubricflow.study.harness import Unit, run_unit, study_spec
from rubricflow.testing.judge_server import LoopbackJudgeServer


def _cfg(root, base_url: str, temperature: float):
    return config_from_dict({
        "data": {"out_dir": str(root / "data")},
        "reports_dir": str(root / "reports"),
        "judge": {"backend": "openai", "cache_enabled": False,
                  "openai": {"base_url": base_url, "model": "loopback-judge", "temperature": temperature}},
        "rucl": {"init_from": str(root / "sft"), "tiers_path": str(root / "tiers.json"), "eval_samples": 0,
                 "checkpoint_dir": str(root / "ck" / "rucl"), "eval_split": "test",
                 "grpo": {"group_size": 4, "prompts_per_step": 3, "steps": 4, "max_new_tokens": 28, "lr": 1e-3,
                          "checkpoint_every": 2, "keep_checkpoints": 2}},
        "study": {"rucl": {"variants": {"rucl": {"rucl.reward.mode": "rucl"}}, "untrained": [], "claims": [],
                           "metrics": ["accuracy"], "out_dir": str(root / "studies" / "rucl"),
                           "per_seed_start": False}},  # the shared start: this test is about the judge
    })


@pytest.mark.slow
def test_a_unit_rerun_after_a_judge_change_trains_afresh_instead_of_resuming(setup):
    from rubricflow.data.validate import validate_dataset, write_stamp, stamp_path

    root = setup
    write_stamp(validate_dataset(root / "data", min_split_size=1), stamp_path(root / "reports", root / "data"))
    unit = Unit("rucl", 101)
    with LoopbackJudgeServer() as srv:
        cfg = _cfg(root, srv.base_url, 0.0)
        first = run_unit(cfg, "rucl", study_spec(cfg, "rucl"), unit)
        assert not first["skipped"] and first["train"]["steps"] == 4 and not first["train"].get("resumed_from")

        changed = _cfg(root, srv.base_url, 0.7)  # only the judge's sampling temperature differs
        again = run_unit(changed, "rucl", study_spec(changed, "rucl"), unit)
    assert not again["skipped"]  # the unit's inputs changed: it runs again ...
    # ... from step 0: the checkpoint of the first run was trained under the other judge and is refused
    assert not again["train"].get("resumed_from")
    assert "judge" in (again["train"].get("resume_refused") or "")


def test_a_units_inputs_name_the_judge_server_and_its_failure_settings(tmp_path):
    """Units finished against one judge server are not reused for another (the server is operational for the
    stage cache, not for a study unit's result), nor under other failure settings."""
    from rubricflow.config import config_from_dict
    from rubricflow.methods.rucl.study import input_parts
    from rubricflow.study.adapter import Unit

    def parts(**judge):
        cfg = config_from_dict({"judge": {"backend": "openai", **judge}})
        return input_parts(cfg, Unit("outcome", 11))["config"]["judge"]

    base = parts(openai={"base_url": "http://127.0.0.1:8000/v1"})
    assert parts(openai={"base_url": "http://127.0.0.1:8001/v1"}) != base
    assert parts(openai={"base_url": "http://127.0.0.1:8000/v1"}, max_failed_frac=0.5) != base
    assert parts(openai={"base_url": "http://127.0.0.1:8000/v1"}, failure_window=8) != base
    # what does not change a verdict still does not re-run a unit
    assert parts(openai={"base_url": "http://127.0.0.1:8000/v1", "concurrency": 3}) == base


def test_margin_switches_replay_a_held_run_for_every_margin_of_the_grid(tmp_path):
    """A run with lambda held at 0 records its batch S_F; every margin's switch step is read off that one series
    (the trajectories of all margins agree up to their switch)."""
    import json

    from rubricflow.methods.rucl.config import CurriculumConfig
    from rubricflow.methods.rucl.study import MARGIN_GRID, margin_metric, margin_switches

    series = [0.5] * 5 + [0.53] * 5 + [0.57] * 5 + [0.61] * 5 + [None] + [0.7] * 5
    steps = tmp_path / "steps.jsonl"
    steps.write_text("".join(json.dumps({"step": i, "curriculum/s_f_batch": x}) + "\n" for i, x in enumerate(series)))
    got = margin_switches(steps, CurriculumConfig(window=5, peak=0.0))
    assert set(got) == {margin_metric(m, t) for m in MARGIN_GRID for t in ("every", "mean")}
    assert margin_metric(0.1) == "switch_m10" and margin_metric(0.1, "mean") == "switch_mean_m10"
    # the window's mean: (0.5 + 0.53 * 4) / 5 = 0.524 > 0.52 at step 8; (0.57 * 4 + 0.61) / 5 = 0.578, then 0.586 > 0.58
    assert got["switch_mean_m02"] == 8 and got["switch_mean_m08"] == 16
    # baseline 0.5 (steps 0-4); > 0.52 from step 5 on -> the window of steps 5-9 completes at step 9
    assert got["switch_m02"] == 9
    assert got["switch_m04"] == 14 and got["switch_m06"] == 14 and got["switch_m08"] == 19
    # > 0.65 only from step 21 on (the missing score at step 20 restarts the window): steps 21-25
    assert got["switch_m10"] == 19
    assert got["switch_m15"] == 25 and margin_switches(steps, CurriculumConfig(window=30, peak=0.0))[
        "switch_m02"] is None


def test_start_calibration_reads_the_tiers_files_pass_order(tmp_path):
    from rubricflow.judge.protocol import Rubric
    from rubricflow.methods.rucl.rubrics.pool import RubricPool, save_pool
    from rubricflow.methods.rucl.study import start_calibration

    cal = {"mean_pass_perception": 0.8, "mean_pass_deduction": 0.4, "perception_first": 1.0,
           "tiers_perception_first": 1.0}
    save_pool(RubricPool([Rubric("C05", "counts", tier="foundational")], {"calibration": cal}), tmp_path / "t.json")
    assert start_calibration(tmp_path / "t.json") == {
        "start_pass_perception": 0.8, "start_pass_deduction": 0.4, "start_perception_first": 1.0,
        "start_tiers_perception_first": 1.0}
    save_pool(RubricPool([Rubric("C05", "counts", tier="foundational")], {}), tmp_path / "old.json")
    assert set(start_calibration(tmp_path / "old.json").values()) == {None}  # written before it was recorded
