"""DeltaRubric stages end to end on a toy-sized model (slow), plus fast checks of the config, the evaluation table
and the CLI wiring."""

import json

import pytest

import rubricflow.config  # noqa: F401  (compose Config first)
from rubricflow.config import Config, config_from_dict
from rubricflow.methods.deltarubric.config import DeltaRubricConfig, effective_grpo
from rubricflow.methods.deltarubric.evaluate import format_table, summarize, Judged


def _cfg(tmp_path, **dr_over) -> Config:
    dr = {
        "pairs": {"out_dir": str(tmp_path / "pairs"), "tasks": ["counting"], "train": 12, "val": 4, "test": 6,
                  "balance_tol": 0.2},
        "sft": {"out_dir": str(tmp_path / "sft"), "base_dir": str(tmp_path / "base"), "steps": 6, "batch_size": 8,
                "warmup_steps": 1, "hidden_size": None, "perception_images": 4, "perception_steps": 2,
                "perception_batch_size": 2},
        "train": {"out_dir": str(tmp_path / "policy"), "n_checklists": 2, "m_verdicts": 2, "k_no_rubric": 2,
                  "planner_max_tokens": 12, "verifier_max_tokens": 12, "probe_every": 1, "probe_pairs": 2,
                  "grpo": {"steps": 2, "prompts_per_step": 1, "lr": 1e-3, "scale_rewards": "batch"}},
        "eval": {"out_dir": str(tmp_path / "eval"), "test_pairs": 4, "batch_size": 16},
    }
    for k, v in dr_over.items():
        dr[k].update(v)
    raw = {
        "artifacts_dir": str(tmp_path / "artifacts"),
        "reports_dir": str(tmp_path / "reports"),
        "models": {"policy": {"source": "tiny", "hidden_size": 32, "num_layers": 1, "num_heads": 2,
                              "vision_hidden_size": 32, "vision_depth": 1, "vocab_size": 400}},
        "deltarubric": dr,
    }
    return config_from_dict(raw)


def test_config_section_defaults_and_algorithm_switch():
    dr = DeltaRubricConfig()
    t = dr.train
    assert (t.n_checklists, t.m_verdicts, t.guidance_lambda, t.planner_reward) == (5, 5, 0.4, "improvement")
    assert (t.guidance, t.judge) == ("paired", "deltarubric")
    g = effective_grpo(t)
    assert (g.loss_agg, g.clip_high) == ("grpo", g.clip_low)
    g2 = effective_grpo(t.model_copy(update={"algorithm": "dapo"}))
    assert (g2.loss_agg, g2.clip_high) == ("dapo", t.grpo.clip_high) and g2.clip_high > g2.clip_low
    # every field documents itself
    for section in (dr.pairs, dr.sft, dr.train, dr.eval):
        for name, f in type(section).model_fields.items():
            assert f.description, f"{type(section).__name__}.{name} has no description"
    # a partial override of the GRPO block keeps DeltaRubric's defaults (not the generic GRPO ones)
    g3 = config_from_dict({"deltarubric": {"train": {"grpo": {"seed": 3}}}}).deltarubric.train.grpo
    assert (g3.seed, g3.steps, g3.prompts_per_step, g3.scale_rewards) == (3, 20, 2, "batch")
    with pytest.raises(Exception, match="planner_reward"):
        config_from_dict({"deltarubric": {"train": {"planner_reward": "ratio"}}})


def test_summary_and_table():
    res = [Judged("a", "counting/count", "A", True, True, True),
           Judged("b", "counting/count", None, False, False, False),
           Judged("c", "barchart/value", "B", False, True, True), Judged("d", "barchart/value", "A", True, True, True)]
    s = summarize(res)
    assert s["accuracy"] == 0.5 and s["format_violation"] == 0.25 and s["planner_format_violation"] == 0.25
    assert s["by_category"] == {"barchart/value": 0.5, "counting/count": 0.5}
    table = format_table({"sft/test": {"n": 4, "modes": {"no_rubric": {"accuracy": 0.5, "format_violation": 0.0},
                                                          "deltarubric": s}}})
    lines = table.splitlines()
    assert lines[0].split() == ["set", "n", "no_rubric", "deltarubric"]
    assert lines[2].split() == ["sft/test", "4", "50.0", "(0%", "fmt)", "50.0", "(25%", "fmt)"]


def test_cli_registers_the_commands():
    from typer.testing import CliRunner

    from flows.cli import app

    names = {c.name for c in app.registered_commands}
    assert {"deltarubric-pairs", "deltarubric-sft", "deltarubric-train", "deltarubric-eval", "eval-judge"} <= names
    out = CliRunner().invoke(app, ["eval-judge", "--help"])
    assert out.exit_code == 0 and "--pairs" in out.output


@pytest.mark.slow
def test_stages_end_to_end(tmp_path):
    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.deltarubric.stages import eval_stage, pairs_stage, sft_stage, train_stage

    cfg = _cfg(tmp_path)
    m = pairs_stage(cfg, track=False)
    assert m["n_pairs"] == 22 and m["splits"] == {"train": 12, "val": 4, "test": 6}
    assert m["frac_a"] == {"test": 0.5, "train": 0.5, "val": 0.5}
    assert len(read_pairs(tmp_path / "pairs", "train")) == 12

    logged = []
    m = sft_stage(cfg, track=False, log_fn=lambda s, x: logged.append(s))
    # a reading phase (2 steps on the 4 reading examples), then the role examples (6 steps)
    # per pair: planner, verifier, one verifier variant, no-rubric, static, reading judge
    assert logged == list(range(8)) and m["pair_examples"] == 12 * 6 and m["train_examples"] == 12 * 6
    assert (m["reading_examples"], m["reading_steps"]) == (4, 2)
    assert m["final_loss"] < m["first_loss"]
    assert (tmp_path / "sft" / "config.json").exists() and (tmp_path / "base" / "config.json").exists()
    assert json.loads((tmp_path / "base" / "config.json").read_text())["text_config"]["hidden_size"] == 32
    curve = json.loads((tmp_path / "reports" / "plots" / "deltarubric_sft_loss.json").read_text())
    assert [(c["step"], c["phase"]) for c in curve] == ([(0, "reading"), (1, "reading")]
                                                        + [(i, "roles") for i in range(2, 8)])

    steps = []
    m = train_stage(cfg, track=False, log_fn=lambda s, x: steps.append((s, x)))
    assert m["steps"] == 2 and m["resumed_from"] is None
    per_step = [x for s, x in steps if "verifier/accuracy" in x or "planner/format_violation" in x]
    assert len(per_step) == 2
    for x in per_step:  # per-role metrics for MLflow, from the rollout and from the updater
        assert {"planner/format_violation", "no_rubric/accuracy", "reward_mean/planner", "n_episodes/planner"} <= set(x)
        assert x["n_episodes/planner"] == 2.0  # N = 2 checklists x 1 pair
    probes = [s for s, x in steps if "probe/accuracy" in x]
    assert probes == [0, 1, 2]  # probe_every=1 and the final probe
    # the step-0 precondition of planner RL, reported by the stage
    assert 0.0 <= m["planner_flat_groups_step0"] <= 1.0 and 0.0 <= m["planner_separating_step0"] <= 1.0
    curve = json.loads((tmp_path / "reports" / "plots" / "deltarubric_train.json").read_text())
    assert [r["step"] for r in curve] == [0, 1]
    assert (tmp_path / "policy" / "config.json").exists()
    # a second run with the same settings resumes from the finished checkpoint instead of retraining, and still
    # reports the whole curve (kept next to the checkpoints)
    m2 = train_stage(cfg, track=False)
    assert m2["resumed_from"] == 2 and m2["probe_accuracy_start"] == m["probe_accuracy_start"]
    curve2 = json.loads((tmp_path / "reports" / "plots" / "deltarubric_train.json").read_text())
    assert curve2 == curve

    m = eval_stage(cfg, track=False)
    assert set(m) == {"sft/synthetic-test", "grpo/synthetic-test", "duration_s"}
    assert set(k for k in m["grpo/synthetic-test"] if not k.endswith("_format_violation")) - {"agreed"} == {
        "no_rubric", "static", "reading", "generative", "deltarubric", "exhaustive", "oracle",
        "deltarubric_separating", "deltarubric_deciding"}  # `agreed` when a test pair has two agreed claims
    g = m["grpo/synthetic-test"]
    assert 0.0 <= g["deltarubric_deciding"] <= g["deltarubric_separating"] <= 1.0  # deciding implies separating
    table = (tmp_path / "eval" / "eval.txt").read_text()
    assert "grpo/synthetic-test" in table and "deltarubric" in table.splitlines()[0]


def test_gate_blocks_training_on_bad_pairs(tmp_path):
    from rubricflow.data.pairs import PairDataError, read_pairs, write_pairs
    from rubricflow.methods.deltarubric.stages import pairs_stage, sft_stage

    cfg = _cfg(tmp_path)
    pairs_stage(cfg, track=False)
    pairs = read_pairs(tmp_path / "pairs")
    pairs[0].preferred = "C"
    write_pairs(tmp_path / "pairs", pairs)
    with pytest.raises(PairDataError, match="preferred: expected 'A' or 'B', got 'C'"):
        sft_stage(cfg, track=False)
