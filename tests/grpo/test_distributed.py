"""Two local processes (torchrun, gloo) train the tiny text policy with the DeepSpeed engine (ZeRO-2; ZeRO-3 in
bf16). RuCL, DeltaRubric and RoRo under ZeRO-3 on two ranks: tests/grpo/test_zero3.py."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_two_process_deepspeed_grpo(tmp_path):
    steps = 3
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "tests.grpo.toy_train",
           "--out", str(tmp_path), "--steps", str(steps), "--engine", "deepspeed", "--zero-stage", "2",
           "--checkpoint-every", "0"]
    env = {**os.environ, "RUBRICFLOW_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    logs = {r: [json.loads(line) for line in (tmp_path / f"log-rank{r}.jsonl").read_text().splitlines()]
            for r in (0, 1)}
    done = {r: json.loads((tmp_path / f"done-rank{r}.json").read_text()) for r in (0, 1)}
    assert {d["world_size"] for d in done.values()} == {2}
    for r in (0, 1):  # both ranks ran every step
        assert [x["step"] for x in logs[r]] == list(range(steps))
        assert all(math.isfinite(x["loss"]) for x in logs[r])
    for a, b in zip(logs[0], logs[1]):
        assert a["pid"] != b["pid"]
        assert not set(a["prompt_ids"]) & set(b["prompt_ids"])  # each rank rolls out its own prompts
        assert a["param_sha"] == b["param_sha"]  # parameters identical across ranks after every step
    assert done[0]["final_param_sha"] == done[1]["final_param_sha"]
    assert done[0]["final_param_sha"] != done[0]["init_param_sha"]  # and they changed from the init
    assert abs(done[0]["final_param_sum"] - done[0]["init_param_sum"]) > 1e-3
    # a final checkpoint written collectively: ZeRO-2 optimizer partitions of both ranks
    ck = tmp_path / "checkpoints" / f"step-{steps:08d}"
    assert json.loads((ck / "meta.json").read_text())["world_size"] == 2
    parts = sorted(p.name for p in (ck / "engine" / "engine").iterdir())
    assert sum("optim_states" in p for p in parts) == 2, parts
    assert (ck / "state-rank0.pt").exists() and (ck / "state-rank1.pt").exists()


@pytest.mark.slow
def test_two_process_zero3_bf16_grpo(tmp_path):
    """bf16 mixed precision with partitioned parameters: both ranks generate (synced), update and end identical."""
    steps = 2
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "tests.grpo.toy_train",
           "--out", str(tmp_path), "--steps", str(steps), "--engine", "deepspeed", "--zero-stage", "3", "--bf16",
           "--checkpoint-every", "0"]
    env = {**os.environ, "RUBRICFLOW_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    logs = {r: [json.loads(line) for line in (tmp_path / f"log-rank{r}.jsonl").read_text().splitlines()]
            for r in (0, 1)}
    done = {r: json.loads((tmp_path / f"done-rank{r}.json").read_text()) for r in (0, 1)}
    for a, b in zip(logs[0], logs[1]):
        assert math.isfinite(a["loss"]) and a["param_sha"] == b["param_sha"]
        assert not set(a["prompt_ids"]) & set(b["prompt_ids"])
    assert done[0]["final_param_sha"] == done[1]["final_param_sha"] != done[0]["init_param_sha"]
