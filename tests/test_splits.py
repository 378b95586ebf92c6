"""Choose on val, report on test: only the final evaluation (and data) stages may read the test split; every
other stage runs under the guard, which raises naming the stage."""

from __future__ import annotations

import pytest

from rubricflow.data.synthetic import build_synthetic_dataset
from rubricflow.pipeline.splits import TestSplitAccess, check_split, forbid_test_split

# Stages allowed to read test: generating and gating the data, and the final evaluations. A stage added here must be
# an evaluation that chooses nothing.
READS_TEST = {"data", "validate", "deltarubric_pairs", "rucl_eval", "deltarubric_eval", "roro_eval"}


def test_only_data_and_final_evaluation_stages_may_read_test():
    from rubricflow.registry import stages

    STAGES = stages()
    assert {name for name, spec in STAGES.items() if spec.reads_test} == READS_TEST
    # every training / selection stage of every pipeline is guarded
    assert {"sft", "stratify", "rucl", "rucl_outcome", "deltarubric_train", "roro_rubricor_judge",
            "roro_router"} <= {name for name, spec in STAGES.items() if not spec.reads_test}


def test_the_guard_refuses_test_rows_and_all_rows_naming_the_stage(tmp_path):
    from rubricflow.data.schema import read_dataset

    build_synthetic_dataset(tmp_path, ["counting"], {"train": 2, "val": 2, "test": 2, "calib": 0}, 0, 56)
    with forbid_test_split("rucl"):
        assert len(read_dataset(tmp_path, split="val")) == 2 and len(read_dataset(tmp_path, split="train")) == 2
        with pytest.raises(TestSplitAccess, match="stage rucl: read the test split of"):
            read_dataset(tmp_path, split="test")
        with pytest.raises(TestSplitAccess, match=r"stage rucl: read every split \(test included\)"):
            read_dataset(tmp_path)
    assert len(read_dataset(tmp_path, split="test")) == 2  # outside a guarded stage
    check_split(None, "anything")  # no guard: no error


def test_a_guarded_stage_that_reads_test_fails_and_an_evaluation_stage_may(tmp_path):
    from rubricflow.config import load_config
    from rubricflow.data.schema import read_dataset
    from rubricflow.pipeline.stage import StageContext, stage
    from rubricflow.sections import DataConfig

    build_synthetic_dataset(tmp_path / "d", ["counting"], {"train": 1, "val": 1, "test": 1, "calib": 0}, 0, 56)

    def peek(data: DataConfig, ctx: StageContext) -> dict:
        """Reads test."""
        return {"n": len(read_dataset(data.out_dir, split="test"))}

    cfg = load_config(overrides={"data.out_dir": str(tmp_path / "d"), "reports_dir": str(tmp_path / "r")})
    with pytest.raises(TestSplitAccess, match="stage sneaky"):
        stage("sneaky")(peek)(cfg, track=False)
    assert stage("final_eval", reads_test=True)(peek)(cfg, track=False)["n"] == 1


def test_deltarubric_pairs_and_roro_problems_are_guarded():
    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.roro.config import RoRoConfig
    from rubricflow.methods.roro.env.problems import problems

    probs = problems(RoRoConfig())
    with forbid_test_split("roro_router"):
        assert probs["train"] and probs["val"] and probs["sft"]
        with pytest.raises(TestSplitAccess, match="stage roro_router: read the test split of RoRo problems"):
            probs["test"]
        with pytest.raises(TestSplitAccess, match="deltarubric_train"):
            with forbid_test_split("deltarubric_train"):
                read_pairs("does/not/matter", "test")
    assert probs["test"]
