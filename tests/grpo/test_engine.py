"""Engines: DeepSpeed (ZeRO 0-3, one process, gloo) updates exactly like the plain torch engine, and its state
round-trips through a checkpoint. DeepSpeed runs in a child process (it initialises torch.distributed)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_engine_config_validation():
    from pydantic import ValidationError

    from rubricflow.grpo.config import EngineConfig, GRPOConfig
    from rubricflow.grpo.engine import deepspeed_config, warmup_constant

    with pytest.raises(ValidationError, match="offload_optimizer needs zero_stage"):
        EngineConfig(kind="deepspeed", offload_optimizer=True)
    with pytest.raises(ValidationError):
        GRPOConfig(loss_agg="mean")
    ds = deepspeed_config(EngineConfig(kind="deepspeed", zero_stage=2, offload_optimizer=True), max_grad_norm=0.5)
    assert ds["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": False},
                                       "overlap_comm": False}
    assert ds["gradient_clipping"] == 0.5 and ds["managed_gradient_accumulation"] is False
    f = warmup_constant(4)
    assert [f(i) for i in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_torch_engine_refuses_several_processes(monkeypatch):
    import torch

    from rubricflow.grpo import GRPOConfig
    from rubricflow.grpo.engine import TorchEngine

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="engine.kind=deepspeed"):
        TorchEngine(torch.nn.Linear(2, 2), GRPOConfig())


def test_engine_device_is_checked_not_ignored(monkeypatch):
    import torch
    from pydantic import ValidationError

    from rubricflow.grpo.config import EngineConfig, GRPOConfig
    from rubricflow.grpo.engine import TorchEngine

    with pytest.raises(ValidationError, match="device applies to kind=torch only"):
        EngineConfig(kind="deepspeed", device="cuda")
    with pytest.raises(ValidationError, match="'cpu' or 'cuda'"):
        EngineConfig(kind="torch", device="gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on CI; also where a GPU is present
    with pytest.raises(RuntimeError, match="engine.device=cuda but torch .* sees no CUDA device"):
        TorchEngine(torch.nn.Linear(2, 2), GRPOConfig(engine=EngineConfig(kind="torch", device="cuda")))


def test_make_engine_takes_the_grpo_section_whole(monkeypatch):
    """make_engine(module, grpo): the engine kind comes from grpo.engine and the optimizer settings from grpo."""
    import torch

    from rubricflow.grpo import engine as engine_mod
    from rubricflow.grpo.config import EngineConfig, GRPOConfig
    from rubricflow.grpo.engine import TorchEngine, make_engine

    grpo = GRPOConfig(
        lr=0.0123, weight_decay=0.05, warmup_steps=4, max_grad_norm=0.25,
        engine=EngineConfig(kind="torch", adam_betas=(0.8, 0.95), adam_eps=1e-6),
    )
    eng = make_engine(torch.nn.Linear(2, 2), grpo)
    eng.backward(eng.module(torch.ones(1, 2)).sum())
    assert isinstance(eng, TorchEngine) and eng.max_grad_norm == 0.25
    group = eng.optimizer.param_groups[0]
    assert group["initial_lr"] == 0.0123 and group["lr"] == pytest.approx(0.0123 / 4)  # warmup step 0 of 4
    assert group["weight_decay"] == 0.05 and group["betas"] == (0.8, 0.95) and group["eps"] == 1e-6
    assert eng.step()["lr"] == pytest.approx(0.0123 / 4)

    made = []
    monkeypatch.setattr(engine_mod, "DeepSpeedEngine", lambda module, g: made.append((module, g)) or "ds")
    ds_grpo = grpo.model_copy(update={"engine": EngineConfig(kind="deepspeed")})
    lin = torch.nn.Linear(2, 2)
    assert make_engine(lin, ds_grpo) == "ds" and made == [(lin, ds_grpo)]
    with pytest.raises(ValueError, match="engine.kind"):
        make_engine(lin, grpo.model_copy(update={"engine": EngineConfig.model_construct(kind="jax")}))


def test_reference_module_follows_the_policy_device():
    """The updater moves the frozen reference to wherever the engine put the policy (meta device here: any
    device other than the reference's own shows the move without a GPU)."""
    import torch

    from rubricflow.grpo import GRPOConfig, GRPOUpdater

    class Adapter:
        pass

    class MetaEngine:
        kind, rank, world_size = "meta", 0, 1
        module = torch.nn.Linear(2, 2, device="meta")

    ref = torch.nn.Linear(2, 2)
    GRPOUpdater(Adapter(), MetaEngine(), GRPOConfig(beta=0.1), ref_module=ref)
    assert ref.weight.device.type == "meta" and not ref.weight.requires_grad
    ref2 = torch.nn.Linear(2, 2)
    GRPOUpdater(Adapter(), MetaEngine(), GRPOConfig(beta=0.0), ref_module=ref2)  # no KL: reference unused, untouched
    assert ref2.weight.device.type == "cpu"


def child(out: str) -> None:
    """Run in a fresh process: torch vs DeepSpeed ZeRO 0-3 on the same tiny policy and episodes."""
    import rubricflow.util.env

    rubricflow.util.env.configure_threads()
    import copy
    import time

    import torch

    from rubricflow.grpo import CausalLMAdapter, Episode, GRPOConfig, GRPOUpdater
    from rubricflow.grpo.config import EngineConfig
    from rubricflow.grpo.engine import DeepSpeedEngine, TorchEngine
    from rubricflow.testing.toy_task import build_toy_policy, chat_prompt

    base, tok = build_toy_policy("text", seed=1)
    g = torch.Generator().manual_seed(0)
    eps = []
    for q in range(3):
        p = chat_prompt(tok, f"Say yes please. ({q})")
        for k in range(4):
            acts = torch.randint(3, 300, (3 + k,), generator=g).tolist()
            eps.append(Episode(p, acts, float((q + k) % 3), f"q{q}"))
    cfg = GRPOConfig(lr=1e-2, warmup_steps=2, max_grad_norm=0.5, minibatch_size=6, max_new_tokens=8)

    def flat(m):
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    def train(engine, model):
        up = GRPOUpdater(CausalLMAdapter(model, tok), engine, cfg)
        ms = [up.update(eps) for _ in range(2)]
        return ms

    res = {}
    ref_model = copy.deepcopy(base)
    ref_ms = train(TorchEngine(ref_model, cfg), ref_model)
    ref = flat(ref_model)
    res["torch"] = {"lr": ref_ms[-1]["lr"], "grad_norm": ref_ms[-1]["grad_norm"],
                    "moved": float((ref - flat(base)).abs().max())}
    for stage in (0, 1, 2, 3):
        model = copy.deepcopy(base)
        t0 = time.perf_counter()
        eng = DeepSpeedEngine(model,
                              cfg.model_copy(update={"engine": EngineConfig(kind="deepspeed", zero_stage=stage)}))
        init_s = time.perf_counter() - t0
        ms = train(eng, eng.module)
        if stage == 3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(eng.module.parameters())):
                got = flat(eng.module).clone()
        else:
            got = flat(eng.module)
        entry = {"max_diff": float((got - ref).abs().max()), "lr": ms[-1]["lr"], "grad_norm": ms[-1]["grad_norm"],
                 "init_s": init_s, "timings": eng.timings}
        if stage == 2:  # checkpoint round trip: save, keep training, load -> back to the saved params/optimizer
            ck = Path(out).parent / "ds_ck"
            eng.save(ck)
            saved = flat(eng.module).clone()
            train(eng, eng.module)
            eng.load(ck)
            entry["after_load_diff"] = float((flat(eng.module) - saved).abs().max())
            train(eng, eng.module)  # the optimizer state came back too: continues like the reference run would
        res[f"zero{stage}"] = entry
    Path(out).write_text(json.dumps(res))


@pytest.mark.slow
def test_deepspeed_zero_stages_match_torch_engine(tmp_path):
    out = tmp_path / "res.json"
    env = {**os.environ, "RUBRICFLOW_THREADS": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, __file__, str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["torch"]["moved"] > 1e-3
    assert res["torch"]["lr"] == pytest.approx(1e-2)  # warmup: steps 0,1 at 0.5, 1.0 x lr; 4 optimizer steps
    for stage in (0, 1, 2, 3):
        e = res[f"zero{stage}"]
        assert e["max_diff"] < 1e-5, (stage, e)
        assert e["lr"] == pytest.approx(res["torch"]["lr"])
        assert e["grad_norm"] == pytest.approx(res["torch"]["grad_norm"], rel=1e-4), (stage, e)
    assert res["zero2"]["after_load_diff"] == 0.0


if __name__ == "__main__":
    child(sys.argv[1])
