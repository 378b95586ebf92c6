import textwrap
from pathlib import Path

import pytest
import yaml

from rubricflow.config import ConfigError, config_from_dict, load_config


def write(tmp_path, text):
    p = tmp_path / "params.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_repo_params_load_for_every_profile():
    tiny = load_config("params.yaml")
    gpu = load_config("params.yaml", profile="gpu")
    assert tiny.profile == "tiny" and tiny.models.policy.source == "tiny"
    assert gpu.models.policy.source == "pretrained"
    assert gpu.models.policy.path == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert gpu.generation.backend == "vllm" and tiny.generation.backend == "transformers"


def test_top_level_keys_override_profile(tmp_path):
    p = write(
        tmp_path,
        """
        profile: tiny
        generation: {max_new_tokens: 7}
        profiles:
          tiny: {generation: {max_new_tokens: 99, temperature: 0.5}}
        """,
    )
    cfg = load_config(p)
    assert cfg.generation.max_new_tokens == 7  # top level wins (what `dvc exp run -S` edits)
    assert cfg.generation.temperature == 0.5  # profile fills the rest
    cfg2 = load_config(p, overrides={"generation.max_new_tokens": 3})
    assert cfg2.generation.max_new_tokens == 3


def test_invalid_value_names_the_dotted_key(tmp_path):
    p = write(tmp_path, "sft: {lr: -1.0}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "sft.lr" in str(e.value) and str(p) in str(e.value)


def test_unknown_key_is_rejected_before_any_work(tmp_path):
    p = write(tmp_path, "data: {splits: {trian: 3}}\n")
    with pytest.raises(ConfigError, match=r"data\.splits\.trian"):
        load_config(p)


def test_unknown_profile_and_bad_enum(tmp_path):
    with pytest.raises(ConfigError, match="unknown profile 'cluster'"):
        config_from_dict({"profile": "cluster", "profiles": {"tiny": {}}})
    with pytest.raises(ConfigError, match=r"generation\.backend"):
        config_from_dict({"generation": {"backend": "tgi"}})


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = write(tmp_path, "data: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_every_field_has_a_description():
    from pydantic import BaseModel

    from rubricflow.config import Config

    missing = []

    def walk(model: type[BaseModel], prefix: str):
        for name, f in model.model_fields.items():
            if not f.description:
                missing.append(prefix + name)
            ann = f.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, prefix + name + ".")

    walk(Config, "")
    assert missing == []


def test_resolved_sections_change_only_where_the_effective_config_changes(tmp_path):
    from rubricflow.config import write_resolved

    base = {"profile": "tiny", "profiles": {"tiny": {"sft": {"steps": 5}}, "gpu": {"sft": {"steps": 500}}}}
    out = tmp_path / "resolved"
    write_resolved(config_from_dict(base), out)
    before = {p.name: p.read_text() for p in out.glob("*.json")}
    assert {"run.json", "data.json", "sft.json", "rucl.json", "judge.json"} <= set(before)
    assert '"steps": 5' in before["sft.json"] and '"profile": "tiny"' in before["run.json"]

    # editing the gpu profile changes nothing the tiny pipeline depends on
    base["profiles"]["gpu"]["sft"]["steps"] = 7
    write_resolved(config_from_dict(base), out)
    assert {p.name: p.read_text() for p in out.glob("*.json")} == before

    # a top-level override changes exactly its section
    base["sft"] = {"steps": 9}
    write_resolved(config_from_dict(base), out)
    after = {p.name: p.read_text() for p in out.glob("*.json")}
    assert [n for n in after if after[n] != before[n]] == ["sft.json"]


def test_no_top_level_key_shadows_a_profile_key():
    """Top-level keys win over the profile, so a key set in both would silently ignore the profile's value."""
    import yaml

    raw = yaml.safe_load(open("params.yaml"))
    profiles = raw.pop("profiles")

    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    top = set(leaves(raw))
    shadowed = {name: sorted(set(leaves(p or {})) & top) for name, p in profiles.items()}
    assert shadowed == {name: [] for name in profiles}


# -- strict reading: duplicate keys, empty files, booleans and non-finite numbers -----------------------------------
def test_duplicate_keys_are_refused_in_every_mapping_with_both_lines(tmp_path):
    p = write(tmp_path, "seed: 1\nprofiles:\n  tiny:\n    sft: {steps: 2}\n    sft: {steps: 3}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == f"{p}: key `profiles.tiny.sft` is defined twice (lines 4 and 5)"
    lst = write(tmp_path, "study:\n  claims:\n    - {a: x, a: y}\n")
    with pytest.raises(ConfigError, match=r"key `study\.claims\[0\]\.a` is defined twice \(lines 3 and 3\)"):
        load_config(lst)


def test_merge_keys_and_overrides_next_to_them_are_not_duplicates(tmp_path):
    from rubricflow.util.yamlload import load_yaml

    doc = load_yaml("base: &b {steps: 2, lr: 0.1}\nsft:\n  <<: *b\n  steps: 5\n")
    assert doc["sft"] == {"steps": 5, "lr": 0.1}
    p = write(tmp_path, "base_sft: &b {steps: 2}\n")
    with pytest.raises(ConfigError, match="base_sft"):  # YAML is fine; the config still refuses the unknown key
        load_config(p)


def test_empty_file_is_an_error_but_an_explicit_empty_mapping_means_defaults(tmp_path):
    p = write(tmp_path, "# only a comment\n")
    with pytest.raises(ConfigError, match="empty parameters file"):
        load_config(p)
    assert load_config(write(tmp_path, "{}\n")).seed == load_config(write(tmp_path, "seed: 1234\n")).seed


def test_a_boolean_is_not_a_number():
    with pytest.raises(ConfigError, match=r"key `sft\.steps`: Input should be a number, not a boolean \(got True\)"):
        config_from_dict({"sft": {"steps": True}})
    with pytest.raises(ConfigError, match=r"key `sft\.lr`: Input should be a number, not a boolean"):
        config_from_dict({"sft": {"lr": False}})
    with pytest.raises(ConfigError, match=r"thresholds`: Input should be a number, not a boolean \(item \[1\]\)"):
        config_from_dict({"roro": {"eval": {"thresholds": [0.5, True]}}})
    cfg = config_from_dict({"sft": {"steps": "7", "lr": "1e-3"}})  # strings still convert, as YAML gives them
    assert cfg.sft.steps == 7 and cfg.sft.lr == 1e-3


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "nan"])
def test_floats_must_be_finite(value):
    with pytest.raises(ConfigError, match=r"key `judge\.openai\.timeout_s`: Input should be a finite number"):
        config_from_dict({"judge": {"openai": {"timeout_s": value}}})


def test_a_field_can_opt_in_to_infinity():
    from pydantic import Field, ValidationError

    from rubricflow.sections import Section

    class Limits(Section):
        budget: float = Field(1.0, allow_inf_nan=True, description="No limit with .inf.")
        rate: float = Field(1.0, description="Finite.")
        flag: bool = Field(False, description="A real boolean.")
        either: int | bool = Field(0, description="A count or a switch.")

    assert Limits(budget=float("inf")).budget == float("inf")
    assert Limits(flag=True, either=True).either is True
    with pytest.raises(ValidationError, match="finite number"):
        Limits(rate=float("inf"))
    lim = Limits()
    with pytest.raises(ValidationError, match="not a boolean"):
        lim.rate = True  # assignments are checked too


def test_every_operational_field_declared_by_a_section_is_one_of_its_fields():
    """Section.operational is the one declaration of the fields that change how results are fetched or served; a
    name that is not a field (a typo, a renamed field) would silently keep that field in every resume key."""
    from pydantic import BaseModel

    from rubricflow.config import Config
    from rubricflow.sections import Section

    seen: list[type] = []

    def walk(model: type) -> None:
        if model in seen:
            return
        seen.append(model)
        for f in model.model_fields.values():
            for tp in getattr(f.annotation, "__args__", ()) or (f.annotation,):
                if isinstance(tp, type) and issubclass(tp, BaseModel):
                    walk(tp)

    walk(Config)
    declared = {m.__name__: m.operational for m in seen if issubclass(m, Section) and m.operational}
    assert {"GenerationConfig", "JudgeConfig", "OpenAIJudgeConfig"} <= set(declared)
    for m in seen:
        if issubclass(m, Section):
            for decl in ("operational", "outputs", "resumable"):
                names = getattr(m, decl)
                assert names <= set(m.model_fields), (m.__name__, decl, names - set(m.model_fields))
    assert {"RuCLConfig", "RubricsConfig", "DRSFTConfig"} <= {m.__name__ for m in seen if getattr(m, "outputs", ())}


def test_the_key_dumps_leave_out_what_each_section_declares_at_every_level():
    """Resume keys and study hashes are derived from the declarations (no hand lists): input_dump drops outputs,
    resume_dump the resumable fields too, each at every level of nested sections."""
    from rubricflow.config import config_from_dict

    r = config_from_dict({}).rucl
    full, inputs, resume = r.model_dump(mode="json"), r.input_dump(), r.resume_dump()
    assert {"out_dir", "checkpoint_dir", "eval_samples"} <= set(full) and not {"out_dir", "eval_samples"} & set(inputs)
    assert inputs["grpo"]["steps"] == full["grpo"]["steps"] and "steps" not in resume["grpo"]
    assert "stream_rewards" not in inputs["grpo"]  # operational, at the nested level
    assert resume["grpo"]["lr"] == full["grpo"]["lr"] and resume["reward"] == full["reward"]


def test_essential_dump_leaves_out_operational_fields_at_every_level():
    from rubricflow.judge.config import JudgeConfig

    j = JudgeConfig.model_validate({"cache_path": "x.sqlite", "openai": {"concurrency": 3, "temperature": 0.5}})
    full, essential = j.model_dump(mode="json"), j.essential_dump()
    assert "cache_path" in full and "cache_path" not in essential
    assert "concurrency" not in essential["openai"] and essential["openai"]["temperature"] == 0.5
    assert {k: v for k, v in full.items() if k not in JudgeConfig.operational and k != "openai"} == \
        {k: v for k, v in essential.items() if k != "openai"}


def test_a_partial_nested_section_keeps_its_owners_defaults():
    """`rucl.grpo` given in part (a profile, --set) keeps RuCL's own GRPO defaults (lr 2e-4, 40 steps, ...), not
    GRPOConfig's class defaults (lr 1e-3): one mechanism (Section._partial_keeps_owner_defaults) for every method."""
    from rubricflow.config import config_from_dict
    from rubricflow.grpo.config import GRPOConfig

    whole = config_from_dict({}).rucl.grpo
    part = config_from_dict({"rucl": {"grpo": {"steps": 5}}}).rucl.grpo
    assert GRPOConfig().lr == 1e-3 and whole.lr == 2e-4
    assert part.steps == 5 and part.lr == whole.lr and part.checkpoint_every == whole.checkpoint_every
    assert part.max_new_tokens == whole.max_new_tokens
    # a key given replaces the default's value; the study section keeps its own rule (a study key replaces whole)
    assert config_from_dict({"rucl": {"grpo": {"lr": 0.5}}}).rucl.grpo.lr == 0.5
    cfg = config_from_dict({"study": {"rucl": {"variants": {"a": {}}, "claims": [], "untrained": []}}})
    assert list(cfg.study.rucl.variants) == ["a"]


@pytest.mark.parametrize("path", ["rucl.grpo", "deltarubric.train.grpo", "roro.router.grpo", "roro.slm", "roro.lrm",
                                  "roro.rubricor_judge.judge", "roro.rubricor_judge.rubricor"])
def test_every_methods_nested_defaults_survive_a_partial_override(path):
    """The same mechanism for the three methods: one key given under a nested section changes that key only."""
    from rubricflow.config import config_from_dict
    from rubricflow.sections import Section

    def at(cfg, dotted):
        for part in dotted.split("."):
            cfg = getattr(cfg, part)
        return cfg

    whole = at(config_from_dict({}), path)
    assert isinstance(whole, Section)
    fields = type(whole).model_fields
    own = {k for k, f in fields.items()
           if f.is_required() or getattr(whole, k) != f.get_default(call_default_factory=True)}
    assert own, f"{path}: its owner sets no defaults of its own"  # else the test would prove nothing
    key = next(k for k in type(whole).model_fields if k not in own and isinstance(getattr(whole, k), int)
               and not isinstance(getattr(whole, k), bool))
    raw: dict = {}
    node = raw
    for part in path.split("."):
        node = node.setdefault(part, {})
    node[key] = getattr(whole, key) + 1
    part = at(config_from_dict(raw), path)
    assert getattr(part, key) == getattr(whole, key) + 1
    assert {k: getattr(part, k) for k in own} == {k: getattr(whole, k) for k in own}


def test_a_profile_is_a_name_from_params_yaml(tmp_path):
    from rubricflow.config import profile_names

    assert profile_names() == ("tiny", "gpu", "smol")  # the project's params.yaml, in file order
    cfg = load_config(profile="smol")
    assert cfg.profile == "smol" and str(cfg.profile) == "smol" and f"{cfg.profile}" == "smol"
    with pytest.raises(ConfigError, match=r"unknown profile 'huge'; expected one of \['gpu', 'smol', 'tiny'\]"):
        load_config(profile="huge")
    # a profile added to params.yaml is a profile: no code names the set
    raw = yaml.safe_load(Path("params.yaml").read_text())
    raw.pop("seed", None)  # (top-level keys win over the profile)
    raw["profiles"]["edge"] = {"seed": 7}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert profile_names(tmp_path / "params.yaml")[-1] == "edge"
    assert load_config(tmp_path / "params.yaml", profile="edge").seed == 7
    (tmp_path / "bare.yaml").write_text("seed: 1\n")
    with pytest.raises(ConfigError, match=r"bare.yaml: key `profiles`: expected a mapping"):
        profile_names(tmp_path / "bare.yaml")
