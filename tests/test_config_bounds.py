"""Inputs are bounded and validated before any work (issue 37, item 9): alias bombs, repeated ``--set`` keys,
absurd sizes and a GRPO group of one end in one line naming the key, in milliseconds, before a model is loaded."""

import time

import pytest
from typer.testing import CliRunner

from flows.cli import app
from rubricflow.config import ConfigError, config_from_dict, load_config
from rubricflow.util.yamlload import AliasExpansionError, NestingTooDeepError, load_yaml


def laughs(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs" document: each anchor repeats the previous one ``width`` times (no loop)."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


# -- YAML aliases ----------------------------------------------------------------------------------------------------
def test_exponential_aliases_are_refused_before_expansion_naming_the_key():
    t0 = time.monotonic()
    with pytest.raises(AliasExpansionError) as e:
        load_yaml(laughs())
    assert time.monotonic() - t0 < 2
    assert e.value.key == "a4[0]" and "expands to" in str(e.value)


def test_many_medium_aliases_are_bounded_in_all():
    anchor = "base: &b [" + ", ".join(["x"] * 900) + "]\n"
    doc = anchor + "".join(f"k{i}: *b\n" for i in range(200))  # each alias is small, together 180,000 nodes
    with pytest.raises(AliasExpansionError, match="the document with its aliases"):
        load_yaml(doc)


def test_ordinary_aliases_and_merges_still_load():
    doc = load_yaml("base: &b {steps: 2, lr: 0.1}\nsft:\n  <<: *b\n  steps: 5\nother: *b\n")
    assert doc["sft"] == {"steps": 5, "lr": 0.1} and doc["other"] == {"steps": 2, "lr": 0.1}


def test_deep_nesting_is_a_yaml_error_not_a_recursion_traceback():
    with pytest.raises(NestingTooDeepError):
        load_yaml("[" * 100_000 + "]" * 100_000)


def test_alias_bomb_in_a_params_file_is_a_config_error(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(laughs())
    with pytest.raises(ConfigError, match=r"params.yaml: key `a4\[0\]` \(line 5\): an alias expands to"):
        load_config(p)


def test_alias_bomb_through_set_is_one_line():
    value = "{" + ", ".join(laughs().strip().splitlines()) + "}"
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["--set", f"study={value}", "show-config"])
    assert time.monotonic() - t0 < 10
    assert res.exit_code == 2, res.output
    assert "expands to" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_deep_nesting_through_set_is_one_line():
    res = CliRunner().invoke(app, ["--set", "sft.steps=" + "[" * 50_000, "show-config"])
    assert res.exit_code == 2, res.output
    assert "nests lists or mappings too deeply" in res.output and "Traceback" not in res.output


# -- repeated --set keys -----------------------------------------------------------------------------------------
def test_a_key_set_twice_is_refused_not_last_wins():
    res = CliRunner().invoke(app, ["--set", "seed=1", "--set", "seed=2", "show-config"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == "error: --set 'seed=2': key `seed` is set twice; give each key once"
    res = CliRunner().invoke(app, ["--set", "seed=1", "--set", " seed =2", "show-config"])
    assert res.exit_code == 2 and "set twice" in res.output


# -- upper bounds of sizes and counts ----------------------------------------------------------------------------
@pytest.mark.parametrize("key, value, bound", [
    ("rucl.grpo.prompts_per_step", 10**9, 4096),
    ("rucl.grpo.group_size", 10**6, 256),
    ("rucl.grpo.max_new_tokens", 10**9, 131072),
    ("sft.batch_size", 10**9, 4096),
    ("generation.eval_batch_size", 10**9, 4096),
    ("deltarubric.train.n_checklists", 10**6, 256),
    ("sft.steps", 10**9, 1000000),  # no bound of its own: the generic one
    ("data.splits.train", 10**9, 1000000),
])
def test_absurd_sizes_fail_at_validation_naming_the_key(key, value, bound):
    with pytest.raises(ConfigError) as e:
        load_config("params.yaml", overrides={key: value})
    assert f"key `{key}`: Input should be less than or equal to {bound}" in str(e.value)


def test_the_bounds_leave_every_profile_of_the_repo_params_valid():
    for profile in ("tiny", "gpu", "smol"):
        load_config("params.yaml", profile=profile)


def test_seeds_are_not_counts():
    assert config_from_dict({"seed": 2**40}).seed == 2**40


def test_a_field_with_its_own_bound_keeps_it():
    with pytest.raises(ConfigError, match=r"key `data\.image_size`: Input should be less than or equal to 1024"):
        config_from_dict({"data": {"image_size": 2048}})


def test_absurd_size_through_the_cli_is_one_line_before_any_work():
    res = CliRunner().invoke(app, ["--set", "rucl.grpo.prompts_per_step=1000000000", "show-config"])
    assert res.exit_code == 2, res.output
    assert "key `rucl.grpo.prompts_per_step`: Input should be less than or equal to 4096" in res.output
    assert len(res.output.strip().splitlines()) == 2 and "Traceback" not in res.output


# -- GRPO needs a group ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["rucl.grpo.group_size", "roro.router.grpo.group_size"])
def test_a_grpo_group_of_one_is_refused(key):
    assert load_config("params.yaml", overrides={key: 2})
    with pytest.raises(ConfigError, match=rf"key `{key}`: Input should be greater than or equal to 2"):
        load_config("params.yaml", overrides={key: 1})
