"""Checkpoints keyed by what they were trained on; fsynced, checksummed saves; corrupt-checkpoint fallback; a full
disk named as such."""

import copy
import errno
import json
import logging
import os

import pytest
import torch

from rubricflow.grpo import CausalLMAdapter, Episode, GRPOConfig, GRPOUpdater, TorchEngine
from rubricflow.grpo.checkpoint import (
    CheckpointManager,
    CheckpointSaveError,
    code_hash,
    part_hashes,
    resume_key,
)
from rubricflow.grpo.trainer import GRPOTrainer
from rubricflow.judge.config import JudgeConfig
from rubricflow.methods.rucl.config import RuCLConfig
from rubricflow.methods.rucl.train import resume_parts
from rubricflow.testing.toy_task import build_toy_policy, chat_prompt, toy_prompts

# ----------------------------------------------------------------------------------------------------------------
# the key


@pytest.fixture
def inputs(tmp_path):
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "model.safetensors").write_bytes(b"weights-v1")
    (tmp_path / "tiers.json").write_text('{"rubrics": []}')
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "samples.parquet").write_bytes(b"rows-v1")
    code = tmp_path / "code.py"
    code.write_text("x = 1\n")
    cfg = RuCLConfig.model_validate({"init_from": str(tmp_path / "sft"), "tiers_path": str(tmp_path / "tiers.json")})
    return tmp_path, cfg, code


def _parts(root, cfg, judge_cfg=None, **kw):
    return resume_parts(cfg, 0, root / "data", judge_cfg=judge_cfg or JudgeConfig(), **kw)


def _changed(a, b):
    ha, hb = part_hashes(a), part_hashes(b)
    return sorted(k for k in ha if ha[k] != hb[k])


def test_key_changes_with_each_input_and_names_it(inputs, monkeypatch):
    root, cfg, code = inputs
    monkeypatch.setattr("rubricflow.methods.rucl.train.TRAINING_CODE", (str(code),))
    base = _parts(root, cfg)
    assert resume_key(base) == resume_key(_parts(root, cfg))  # deterministic

    judge = JudgeConfig.model_validate({"applicability": "response"})
    assert JudgeConfig().applicability != "response"
    after = _parts(root, cfg, judge)
    assert resume_key(after) != resume_key(base) and _changed(base, after) == ["judge"]

    changes = {
        "init_policy": lambda: (root / "sft" / "model.safetensors").write_bytes(b"weights-v2 (retrained)"),
        "tiers": lambda: (root / "tiers.json").write_text('{"rubrics": [1]}'),
        "data": lambda: (root / "data" / "samples.parquet").write_bytes(b"rows-v2, more"),
        "code": lambda: code.write_text("x = 2  # edited\n"),
    }
    prev = base
    for part, change in changes.items():
        change()
        now = _parts(root, cfg)
        assert resume_key(now) != resume_key(prev), part
        assert _changed(prev, now) == [part]
        prev = now


def test_key_ignores_output_only_and_operational_fields(inputs):
    root, cfg, _ = inputs
    base = resume_key(_parts(root, cfg))
    moved = cfg.model_copy(update={"name": "other", "out_dir": "elsewhere", "checkpoint_dir": "ck2",
                                   "eval_samples": 3,
                                   "grpo": cfg.grpo.model_copy(update={"steps": 999, "checkpoint_every": 7})})
    assert resume_key(_parts(root, moved)) == base
    ops = JudgeConfig.model_validate({"cache_enabled": False, "openai": {"concurrency": 3, "timeout_s": 5.0}})
    assert resume_key(_parts(root, cfg, ops)) == base
    assert resume_key(_parts(root, cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"lr": 0.5})}))) != base


def test_code_hash_follows_the_file_contents(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("a = 1\n")
    h1 = code_hash(str(pkg))
    assert code_hash(str(pkg)) == h1
    (pkg / "a.py").write_text("a = 2\n")
    assert code_hash(str(pkg)) != h1
    assert code_hash("rubricflow.grpo") != code_hash("rubricflow.methods.rucl")
    # a file left out ("-<path>") changes nothing; the rest still counts
    (pkg / "decl.py").write_text("STUDY = 1\n")
    h2 = code_hash(str(pkg), f"-{pkg / 'decl.py'}")
    (pkg / "decl.py").write_text("STUDY = 2\n")
    assert code_hash(str(pkg), f"-{pkg / 'decl.py'}") == h2 and code_hash(str(pkg)) != h2
    (pkg / "a.py").write_text("a = 3\n")
    assert code_hash(str(pkg), f"-{pkg / 'decl.py'}") != h2
    with pytest.raises(FileNotFoundError, match="nothing to leave out"):
        code_hash(str(pkg), f"-{pkg / 'typo.py'}")
    # a module left out by its dotted name
    assert code_hash("rubricflow.methods.deltarubric", "-rubricflow.methods.deltarubric.study_specs") != \
        code_hash("rubricflow.methods.deltarubric")


# ----------------------------------------------------------------------------------------------------------------
# the trainer: refusal, corrupt checkpoints, a full disk

_POLICY = {}


def make(root, steps=4, key_parts=None, checkpoint_every=2, keep=2):
    if not _POLICY:
        _POLICY["v"] = build_toy_policy("text", seed=0)
    model, tok = copy.deepcopy(_POLICY["v"][0]), _POLICY["v"][1]
    cfg = GRPOConfig(steps=steps, prompts_per_step=2, group_size=2, checkpoint_every=checkpoint_every,
                     keep_checkpoints=keep, lr=1e-2, max_new_tokens=4)
    up = GRPOUpdater(CausalLMAdapter(model, tok), TorchEngine(model, cfg), cfg)
    logged = []

    def rollout(step, prompts):
        g = torch.Generator().manual_seed(step)
        eps = [Episode(chat_prompt(tok, p["question"]), torch.randint(3, 300, (3,), generator=g).tolist(),
                       float(k), p["id"]) for p in prompts for k in range(2)]
        return eps, {}

    tr = GRPOTrainer(up, toy_prompts(5), rollout, cfg, root, log_fn=lambda s, m: logged.append((s, m["loss"])),
                     key_parts=key_parts)
    return tr, logged


def test_changed_part_starts_fresh_and_names_it(tmp_path, caplog):
    ck = tmp_path / "ck"
    parts = {"judge": {"model": "a"}, "data": "h1"}
    tr, _ = make(ck, steps=2, key_parts=parts)
    assert tr.run()["resumed_from"] is None
    key = json.loads((ck / "key.json").read_text())
    assert key == {"key": resume_key(parts), "parts": part_hashes(parts)}

    tr, _ = make(ck, steps=4, key_parts=dict(parts))  # same inputs: resumes
    out = tr.run()
    assert out["resumed_from"] == 2 and out["resume_refused"] is None

    with caplog.at_level(logging.WARNING, logger="rubricflow.grpo.checkpoint"):
        tr, logged = make(ck, steps=4, key_parts={**parts, "judge": {"model": "b"}})
        out = tr.run()
    assert out["resumed_from"] is None and out["resume_refused"] == "judge changed"
    assert [s for s, _ in logged] == [0, 1, 2, 3]  # trained from step 0
    assert f"checkpoint {ck} was trained on a different judge; starting fresh" in caplog.text
    assert (tmp_path / "ck.stale" / "step-00000004").is_dir()  # the old checkpoints are moved aside, not lost
    assert json.loads((ck / "key.json").read_text())["key"] == resume_key({**parts, "judge": {"model": "b"}})


def test_checkpoints_without_a_key_are_not_resumed_by_a_keyed_run(tmp_path, caplog):
    ck = tmp_path / "ck"
    make(ck, steps=2)[0].run()  # no key_parts: nothing recorded
    with caplog.at_level(logging.WARNING):
        out = make(ck, steps=2, key_parts={"data": "h"})[0].run()
    assert out["resumed_from"] is None and out["resume_refused"] == "no key.json"
    assert "has no key.json" in caplog.text


def test_checkpoint_files_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    import rubricflow.grpo.checkpoint as ckmod

    events = []
    real_fsync, real_rename = ckmod._fsync_file, os.rename
    monkeypatch.setattr(ckmod, "_fsync_file", lambda p: (events.append(("fsync", p.name)), real_fsync(p)))
    monkeypatch.setattr(ckmod.os, "rename", lambda a, b: (events.append(("rename", os.path.basename(a))),
                                                          real_rename(a, b)))
    CheckpointManager(tmp_path / "ck").save(3, {"x": 1})
    renamed = events.index(("rename", ".tmp-step-00000003"))
    assert ("fsync", "state-rank0.pt") in events[:renamed] and ("fsync", "meta.json") in events[:renamed]
    meta = json.loads((tmp_path / "ck" / "step-00000003" / "meta.json").read_text())
    assert set(meta["files"]) == {"state-rank0.pt"} and len(meta["files"]["state-rank0.pt"]) == 32


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("checksums", [True, False])
def test_truncated_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, checksums):
    ck = tmp_path / "ck"
    tr, ref = make(ck, steps=3, checkpoint_every=1)
    tr.run()
    latest = ck / "step-00000003"
    _truncate(latest / "state-rank0.pt")
    if not checksums:  # a checkpoint without recorded checksums: torch.load itself fails on the truncated file
        meta = json.loads((latest / "meta.json").read_text())
        del meta["files"]
        (latest / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="rubricflow.grpo.trainer"):
        tr2, logged = make(ck, steps=3, checkpoint_every=1)
        out = tr2.run()
    assert out["resumed_from"] == 2 and out["corrupt_checkpoints"] == [str(latest)]
    why = "does not match its checksum" if checksums else "does not load"
    assert f"checkpoint {latest} is corrupt: state-rank0.pt {why}" in caplog.text
    assert "trying the previous checkpoint" in caplog.text
    assert logged == [ref[2]]  # step 2 replayed from step 2's checkpoint: the same loss as the first time
    assert CheckpointManager(ck).load(latest)[0] == 3  # the corrupt one was replaced by a good one


def test_no_valid_checkpoint_starts_fresh_with_a_warning(tmp_path, caplog):
    ck = tmp_path / "ck"
    make(ck, steps=2, checkpoint_every=1)[0].run()
    for step in ("step-00000001", "step-00000002"):
        _truncate(ck / step / "state-rank0.pt")
    with caplog.at_level(logging.WARNING, logger="rubricflow.grpo.trainer"):
        tr, logged = make(ck, steps=2, checkpoint_every=1)
        out = tr.run()
    assert out["resumed_from"] is None and [s for s, _ in logged] == [0, 1]
    assert f"no valid checkpoint under {ck} (corrupt: step-00000002, step-00000001); starting fresh" in caplog.text


def test_full_disk_names_the_checkpoint_and_keeps_the_earlier_ones(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    tr, _ = make(ck, steps=4)
    real_save = torch.save

    def save(obj, f, *a, **k):
        if "step-00000004" in str(f):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(CheckpointSaveError, match=r"checkpoint .*step-00000004: the disk is full \(ENOSPC") as ei:
        tr.run()
    assert ei.value.errno == errno.ENOSPC
    assert "the earlier checkpoints are intact" in str(ei.value)
    mgr = CheckpointManager(ck)
    assert [s for s, _ in mgr.checkpoints()] == [2]
    assert mgr.load(ck / "step-00000002")[0] == 2  # verifies and loads
    assert not list(ck.glob(".tmp-*"))  # the partial directory is gone


# ----------------------------------------------------------------------------------------------------------------
# the RuCL training path


@pytest.fixture(scope="module")
def rucl_setup(tmp_path_factory):
    """A small counting dataset, an untrained tiny Qwen2.5-VL as the "SFT" policy and a tiers file."""
    import dataclasses

    from models.tiny import TinyDims, build_tiny_vl, save
    from rubricflow.data.synthetic import build_synthetic_dataset
    from rubricflow.data.traces import render_trace
    from rubricflow.methods.rucl.rubrics.pool import RubricPool, load_default_pool, save_pool

    root = tmp_path_factory.mktemp("rucl_keys")
    samples = build_synthetic_dataset(root / "data", ["counting"], {"train": 6, "test": 2}, seed=1, image_size=56)
    corpus = [s.question for s in samples] + [render_trace(s.facts, s.answer) for s in samples]
    model, proc = build_tiny_vl(corpus, TinyDims(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                                                 vocab_size=300, vision_hidden_size=16, vision_depth=1))
    save(model, proc, root / "sft")
    tiers = {"C17": "foundational", "C08": "advanced"}
    rub = [dataclasses.replace(r, tier=tiers[r.id]) for r in load_default_pool().rubrics if r.id in tiers]
    save_pool(RubricPool(rub, {"source": "test"}), root / "tiers.json")
    return root


@pytest.mark.slow  # trains a tiny VL policy (a few seconds per step on a loaded CPU)
def test_rucl_training_resumes_same_inputs_and_starts_fresh_when_the_tiers_change(rucl_setup, caplog):
    from rubricflow.judge.programmatic import ProgrammaticJudge
    from rubricflow.methods.rucl.rubrics.pool import load_tiers
    from rubricflow.methods.rucl.train import train_rucl

    root = rucl_setup
    cfg = RuCLConfig.model_validate({
        "init_from": str(root / "sft"), "tiers_path": str(root / "tiers.json"), "out_dir": str(root / "model"),
        "checkpoint_dir": str(root / "ck"), "eval_samples": 0, "reward": {"mode": "rucl", "alpha": 0.7},
        "grpo": {"group_size": 2, "prompts_per_step": 2, "steps": 2, "max_new_tokens": 6, "checkpoint_every": 1},
    })

    def train(steps):
        return train_rucl(cfg, root / "data", ProgrammaticJudge(), load_tiers(root / "tiers.json"),
                          root / "reports", seed=0, steps=steps)

    first = train(1)
    assert first["resumed_from"] is None and first["resume_refused"] is None
    assert first["checkpoint_dir"] == str(root / "ck" / "rucl-seed0")
    again = train(2)
    assert again["resumed_from"] == 1 and again["resume_refused"] is None
    tiers = json.loads((root / "tiers.json").read_text())
    tiers["rubrics"] = tiers["rubrics"][:1]  # the tiers file was rebuilt: one rubric fewer
    (root / "tiers.json").write_text(json.dumps(tiers))
    with caplog.at_level(logging.WARNING, logger="rubricflow.grpo.checkpoint"):
        fresh = train(2)
    assert fresh["resumed_from"] is None and fresh["resume_refused"] == "tiers changed"
    assert fresh["steps"] == 2
    assert f"checkpoint {root / 'ck' / 'rucl-seed0'} was trained on a different tiers; starting fresh" in caplog.text


def test_deltarubric_key_covers_the_sft_policy_pairs_and_generation(tmp_path):
    from rubricflow.methods.deltarubric.config import DeltaRubricConfig
    from rubricflow.methods.deltarubric.train import resume_parts as dr_parts
    from rubricflow.sections import GenerationConfig, ModelsConfig

    for d, f in (("sft", "model.safetensors"), ("pairs", "pairs.parquet")):
        (tmp_path / d).mkdir()
        (tmp_path / d / f).write_bytes(b"v1")
    dr = DeltaRubricConfig.model_validate({"sft": {"out_dir": str(tmp_path / "sft")},
                                           "pairs": {"out_dir": str(tmp_path / "pairs")}})
    base = dr_parts(dr, ModelsConfig(), GenerationConfig(), 0)
    (tmp_path / "sft" / "model.safetensors").write_bytes(b"v2 retrained")
    now = dr_parts(dr, ModelsConfig(), GenerationConfig(), 0)
    assert _changed(base, now) == ["init_policy"]
    (tmp_path / "pairs" / "pairs.parquet").write_bytes(b"v2 regenerated")
    later = dr_parts(dr, ModelsConfig(), GenerationConfig.model_validate({"top_p": 0.5}), 0)
    assert _changed(now, later) == ["data", "generation"]
    ops = GenerationConfig.model_validate({"top_p": 0.5, "vllm_gpu_memory_utilization": 0.9})
    assert resume_key(dr_parts(dr, ModelsConfig(), ops, 0)) == resume_key(later)


def test_roro_router_key_covers_the_problems_models_and_sections():
    from rubricflow.methods.roro.config import RouterConfig
    from rubricflow.methods.roro.router.train import RouterRun
    from rubricflow.methods.roro.router.train import resume_parts as router_parts
    from rubricflow.methods.roro.env.task import make_problems

    run, rcfg = RouterRun("roro-cw0.4", 0.5, 0.4), RouterConfig()
    probs = make_problems(4, "train", 0)
    base = router_parts(run, rcfg, 0, ["slm:a", "lrm:b"], probs, {"task": {"n_train": 4}})
    assert _changed(base, router_parts(run, rcfg, 0, ["slm:a", "lrm:B"], probs, {"task": {"n_train": 4}})) == ["models"]
    assert _changed(base, router_parts(run, rcfg, 0, ["slm:a", "lrm:b"], make_problems(4, "train", 1),
                                       {"task": {"n_train": 4}})) == ["problems"]
    assert _changed(base, router_parts(run, rcfg, 0, ["slm:a", "lrm:b"], probs, {"task": {"n_train": 5}})) == ["task"]
    moved = rcfg.model_copy(update={"checkpoint_dir": "elsewhere", "sweep_cost_weights": [0.1]})
    assert resume_key(router_parts(run, moved, 0, ["slm:a", "lrm:b"], probs, {"task": {"n_train": 4}})) == \
        resume_key(base)
