"""Checkpoint/resume of the generic GRPO loop: kill -9 mid-run, resume, continue exactly like an uninterrupted run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rubricflow.grpo.trainer import PromptIterator

ROOT = Path(__file__).resolve().parents[2]


def test_prompt_iterator_is_deterministic_resumable_and_sharded():
    items = list(range(10))
    a = PromptIterator(items, 4, seed=3)
    batches = [a.next_batch() for _ in range(5)]  # 20 items = 2 epochs exactly
    assert sorted(batches[0] + batches[1] + batches[2][:2]) == items  # epoch 0 is a permutation
    assert batches[2][2:] + batches[3] + batches[4] != batches[0] + batches[1] + batches[2][:2]  # epoch 1 reshuffled
    b = PromptIterator(items, 4, seed=3)
    b.next_batch(), b.next_batch()
    c = PromptIterator(items, 4, seed=3)
    c.load_state_dict(b.state_dict())
    assert [c.next_batch() for _ in range(3)] == batches[2:]
    with pytest.raises(ValueError, match="different order"):
        PromptIterator(items[:9], 4, seed=3).load_state_dict(b.state_dict())
    # two ranks split each global batch of 2 x 4 without overlap, in the single-stream order
    r0, r1 = (PromptIterator(items, 4, seed=3, rank=0, world_size=2),
              PromptIterator(items, 4, seed=3, rank=1, world_size=2))
    assert r0.next_batch() + r1.next_batch() == batches[0] + batches[1]


def _cmd(out, steps, sleep=0.0):
    return [sys.executable, "-m", "tests.grpo.toy_train", "--out", str(out), "--steps", str(steps),
            "--checkpoint-every", "2", "--step-sleep", str(sleep)]


def _log(out):
    f = Path(out) / "log-rank0.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


@pytest.mark.slow
def test_kill_9_and_resume_matches_uninterrupted(tmp_path):
    env = {**os.environ, "RUBRICFLOW_THREADS": "1"}
    steps = 10
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    # the run to be killed starts first; the uninterrupted reference runs in this process meanwhile (process
    # start-up dominates the time of this test)
    proc = subprocess.Popen(_cmd(run_dir, steps, sleep=0.4), cwd=ROOT, env=env)
    from tests.grpo import toy_train

    toy_train.main(_cmd(ref_dir, steps)[3:])
    ref = {r["step"]: r for r in _log(ref_dir)}
    assert sorted(ref) == list(range(steps))
    deadline = time.time() + 240
    while time.time() < deadline and len(_log(run_dir)) < 5:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = len(_log(run_dir))
    assert 5 <= killed_at < steps, "the run must be killed mid-way"
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith("step-"))
    resume_step = int(ckpts[-1].split("-")[1])
    assert 4 <= resume_step < steps

    subprocess.run(_cmd(run_dir, steps), check=True, cwd=ROOT, env=env, timeout=300)
    recs = _log(run_dir)
    pids = {r["pid"] for r in recs}
    assert len(pids) == 2  # two processes wrote the log
    after = [r for r in recs if r["pid"] == recs[-1]["pid"]]
    assert after[0]["step"] == resume_step  # resumed right after the last complete checkpoint
    assert [r["step"] for r in after] == list(range(resume_step, steps))
    for r in after:
        e = ref[r["step"]]
        assert r["prompt_ids"] == e["prompt_ids"]  # the same batches
        assert r["sched"] == e["sched"] and r["lambda_t"] == e["lambda_t"]  # the same curriculum state
        assert r["reward_mean"] == pytest.approx(e["reward_mean"])  # the same rollouts
        assert r["param_sum"] == pytest.approx(e["param_sum"], rel=1e-6)  # the same parameters
    assert after[-1]["param_sha"] == ref[steps - 1]["param_sha"]  # bit-identical on this deterministic CPU run
    done = json.loads((run_dir / "done-rank0.json").read_text())
    assert done["resumed_from"] == resume_step
    # a checkpoint holds the curriculum state and the data cursor
    state = torch.load(run_dir / "checkpoints" / f"step-{steps:08d}" / "state-rank0.pt", weights_only=False)
    assert state["stateful"]["curriculum"] == ref[steps - 1]["sched"]
    assert state["data"]["epoch"] * 16 + state["data"]["pos"] == steps * 4
    assert not list((run_dir / "checkpoints").glob(".tmp-*"))
