"""The end-of-run summary reads every pipeline's report and prints its key numbers."""

import json

from rubricflow.config import load_config
from rubricflow.pipeline.summary import key_lines


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, sort_keys=True))


def test_summary_has_a_line_per_pipeline(tmp_path):
    cfg = load_config("params.yaml", overrides={"reports_dir": str(tmp_path)})
    r = tmp_path
    _write(r / "sft.json", {"accuracy_before": {"overall": 0.0}, "accuracy_after": {"overall": 0.47},
                            "majority_baseline": {"overall": 0.32}})
    _write(r / "stratify.json", {"n_candidates": 20, "n_low_coverage": 3, "n_kept": 6, "n_foundational": 2,
                                 "n_advanced": 4, "mean_pass_foundational": 0.84, "mean_pass_advanced": 0.21,
                                 "n_judge_failed": 0, "mean_pass_perception": 0.31, "mean_pass_deduction": 0.34,
                                 "perception_first": 0.0, "tiers_perception_first": 0.0})
    _write(r / "rubrics" / "stratification.json", [
        {"id": "C08", "tier": "foundational"}, {"id": "C11", "tier": "foundational"},
        {"id": "C01", "tier": "advanced"}, {"id": "C02", "tier": None}])
    _write(r / "rucl.json", {"steps": 40, "transition_step": 14, "lambda_final": 0.5, "curriculum_threshold": 0.62,
                             "lambda_positive_share": 0.625,
                             "hacking": {"window": 10, "warn": True, "message": "reward hacking? (...)",
                                         "rubric_first": 0.5, "rubric_last": 0.8, "relevant_sound_first": 0.9,
                                         "relevant_sound_last": 0.6, "rubric_to_wrong_first": 0.1,
                                         "rubric_to_wrong_last": 0.2},
                             "accuracy_before": {"overall": 0.5}, "accuracy_after": {"overall": 0.5625},
                             "sampled_before": {"sampled_accuracy/overall": 0.41, "pass_at_k/overall": 0.9},
                             "sampled_after": {"sampled_accuracy/overall": 0.52}})
    _write(r / "rucl_eval.json", {"eval_samples": 192,
                                  "sft": {"accuracy": 0.46875, "sampled_accuracy": 0.40, "clean_pass_at_k": 0.7,
                                          "diff_sampled_accuracy": 0.25, "correct_but_flawed": 0.12},
                                  "outcome": {"accuracy": 0.479},
                                  "rucl": {"accuracy": 0.484, "sampled_accuracy": 0.51, "clean_pass_at_k": 0.75,
                                           "diff_sampled_accuracy": 0.375, "correct_but_flawed": 0.08}})
    _write(r / "deltarubric_eval.json", {
        "grpo/synthetic-test": {"no_rubric": 0.5, "deltarubric": 0.385, "deltarubric_format_violation": 0.24},
        "sft/synthetic-test": {"no_rubric": 0.5, "deltarubric": 0.5}, "duration_s": 20.0})
    _write(r / "roro_rubricor_judge.json", {"rounds": [{"val_pairwise_acc": 0.365},
                                                       {"val_pairwise_acc": 0.535}],
                                            "selected_phase": "1/judge"})
    _write(r / "roro_eval.json", {"rows": [{"method": "all-slm", "param": None, "accuracy": 0.328},
                                           {"method": "all-lrm", "param": None, "accuracy": 0.969},
                                           {"method": "threshold", "param": 0.1, "accuracy": 0.9}],
                                  "roro_accuracy": 0.891, "roro_lrm_cost_frac": 0.673,
                                  "outcome_only_accuracy_at_roro_cost": 0.892,
                                  "auc": {"roro": 0.812, "outcome-only": 0.8, "threshold": 0.79},
                                  "judge_test": {"pairwise_acc": 0.61, "acc_process": 0.66}})
    text = "\n".join(key_lines(cfg.reports_dir))
    assert "after:  overall 47%" in text
    assert "foundational C08/C11 (pass 0.84), advanced C01 (pass 0.21)" in text
    assert "curriculum switch at step 14 (S_F threshold 0.62), lambda_t > 0 on 62.5% of steps (at end 0.50)" in text
    assert "start passes perception 0.31, deduction 0.34: perception first no; tiers perception-first no" in text
    assert ("hacking monitor (first -> last 10 steps): rubric reward 0.50 -> 0.80, paid to wrong answers 0.10 -> "
            "0.20, answer-relevant sound share of correct answers 0.90 -> 0.60  WARNING: reward hacking?") in text
    # greedy and sampled val accuracy before -> after; a number the run did not report reads n/a, never nan
    assert "val greedy 50.0% -> 56.2%, sampled 41.0% -> 52.0%, pass@k 90.0% -> n/a" in text
    assert "sft 46.9% / 40.0% / 70.0%, outcome 47.9% / n/a / n/a, rucl 48.4% / 51.0% / 75.0%" in text
    assert "difference question (sampled): sft 25.0%, outcome n/a, rucl 37.5%" in text
    assert "correct but flawed (strict verifier): sft 0.12, outcome n/a, rucl 0.08" in text
    assert "nan" not in text
    dr = [line for line in text.splitlines() if "synthetic-test" in line]
    assert dr[0].split()[1].startswith("sft/") and dr[1].strip().startswith("grpo/")  # before, then after
    assert "no_rubric 50.0%, deltarubric 38.5%" in dr[1] and "format" not in dr[1]
    assert "0.36 -> 0.54 (kept 1/judge)" in text
    assert "all-slm 32.8%, all-lrm 96.9%; RoRo 89.1% at LRM cost 0.67 vs outcome-only 89.2%" in text
    assert "AUC of accuracy vs cost: roro 0.812, outcome-only 0.800, threshold 0.790" in text
    assert "kept Judge on test pairs: 0.61 overall, process 0.66" in text


def test_summary_skips_pipelines_that_did_not_run(tmp_path):
    cfg = load_config("params.yaml", overrides={"reports_dir": str(tmp_path)})
    assert key_lines(cfg.reports_dir) == []


def test_the_readme_block_is_rewritten_between_its_markers_only(tmp_path):
    import pytest

    from rubricflow.pipeline.summary import README_BEGIN, README_END, readme_block, write_readme_block

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "data.json").write_text('{"n_samples": 12, "splits": {"train": 10, "test": 2}}')
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{README_BEGIN}\nhand-typed numbers\n{README_END}\nafter\n")
    assert write_readme_block(readme, reports) is True
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n") and text.endswith("\nafter\n")
    assert "hand-typed" not in text and readme_block(reports) in text
    assert text.count("```text") == 1
    assert write_readme_block(readme, reports) is False  # idempotent
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="expected one block"):
        write_readme_block(readme, reports)
