"""RoRo config: partial overrides keep each role's own defaults; bad values name the key."""

import pytest

from rubricflow.config import ConfigError, config_from_dict


def test_partial_role_overrides_merge_onto_the_role_defaults():
    cfg = config_from_dict({"roro": {"slm": {"path": "x"}, "router": {"grpo": {"steps": 5}}}},
                           overrides={"roro.lrm.sft_steps": 10})
    r = cfg.roro
    assert (r.slm.path, r.slm.hidden_size, r.slm.num_layers) == ("x", 64, 2)  # still the small model
    assert (r.lrm.sft_steps, r.lrm.hidden_size, r.lrm.num_layers, r.lrm.lr) == (10, 128, 3, 1e-3)
    assert (r.router.grpo.steps, r.router.grpo.lr, r.router.grpo.group_size) == (5, 1e-3, 8)
    assert r.rubricor_judge.rubricor.warm_steps == 80 and r.rubricor_judge.judge.warm_steps == 500


def test_router_defaults_follow_the_paper():
    r = config_from_dict({}).roro.router
    assert r.hidden == 128 and r.cost_weight in r.sweep_cost_weights


def test_errors_name_the_key():
    with pytest.raises(ConfigError, match="roro.task"):
        config_from_dict({"roro": {"task": {"min_ops": 3, "max_ops": 2}}})
    with pytest.raises(ConfigError, match="gsm8k_path"):
        config_from_dict({"roro": {"task": {"source": "gsm8k"}}})
    with pytest.raises(ConfigError, match="roro.slm.backnd"):
        config_from_dict({"roro": {"slm": {"backnd": "vllm"}}})
    with pytest.raises(ConfigError, match=r"roro\.router.*grpo\.engine\.device.*expected 'cpu'"):
        config_from_dict({"roro": {"router": {"grpo": {"engine": {"device": "cuda"}}}}})


def test_engine_device_errors_name_the_key():
    cfg = config_from_dict({"rucl": {"grpo": {"engine": {"device": "cuda"}}}})  # a single-GPU torch run: accepted
    assert cfg.rucl.grpo.engine.device == "cuda"
    with pytest.raises(ConfigError, match=r"rucl\.grpo\.engine.*device applies to kind=torch only"):
        config_from_dict({"rucl": {"grpo": {"engine": {"kind": "deepspeed", "device": "cuda"}}}})


def test_tiny_profile_judge_warm_start_is_the_val_chosen_one_and_the_old_one_stays_reachable():
    """params.yaml's tiny profile carries the Judge warm start chosen on val by rubricflow.methods.roro.study.judge_tune
    (1500 steps at lr 1e-3); the previous one (500 at 3e-3) is the code default and one override away."""
    from rubricflow.config import load_config
    from rubricflow.methods.roro.study.judge_tune import SETTINGS

    j = load_config("params.yaml").roro.rubricor_judge.judge
    assert (j.warm_steps, j.lr, j.hidden_size, j.num_layers) == (1500, 1e-3, 64, 2)
    assert {"hidden_size": 64, "num_layers": 2, "warm_steps": 1500, "lr": 1e-3} in SETTINGS.values()
    assert (j.rft_steps, j.rft_lr, j.samples) == (40, 1e-3, 4)  # the alternation itself is unchanged
    old = load_config("params.yaml", overrides={"roro.rubricor_judge.judge.warm_steps": 500,
                                                "roro.rubricor_judge.judge.lr": 3e-3}).roro.rubricor_judge.judge
    assert (old.warm_steps, old.lr) == (500, 3e-3)
    d = config_from_dict({}).roro.rubricor_judge.judge  # no profile file: the code defaults are the old values
    assert (d.warm_steps, d.lr) == (500, 3e-3)
    rubricor = load_config("params.yaml").roro.rubricor_judge.rubricor  # the Rubricor keeps its own defaults
    assert (rubricor.warm_steps, rubricor.lr) == (80, 3e-3)
