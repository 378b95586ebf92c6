"""No listener beyond loopback from the training engine's rendezvous (rubricflow/grpo/engine.py,
``init_process_group``; issue 37 item 2): torch's ``env://`` store listens on every interface (``*:PORT``) even
with ``MASTER_ADDR=127.0.0.1``; one process needs no store port at all, several on one machine a store on loopback.

Each check runs in a child process (a process group is once per process) and reads that process's listening
sockets from /proc while it holds the engine or the process group."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.listeners import beyond_loopback

ROOT = Path(__file__).resolve().parents[2]
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
             "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")

pytestmark = pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads listeners from /proc (Linux)")

ENGINE_CHILD = """
import rubricflow.util.env, json, sys
import torch
from rubricflow.grpo.config import GRPOConfig
from rubricflow.grpo.engine import make_engine
from tests.listeners import listeners
eng = make_engine(torch.nn.Linear(4, 4), GRPOConfig.model_validate({"engine": {"kind": "deepspeed"}}))
loss = eng.module(torch.ones(1, 4)).sum()
eng.backward(loss)
eng.step()
print(json.dumps({"kind": eng.kind, "world": eng.world_size, "rendezvous": getattr(eng, "rendezvous", None),
                  "listeners": listeners()}))
"""

GROUP_CHILD = """
import json, os
import torch, torch.distributed as dist
from rubricflow.grpo.engine import init_process_group
from tests.listeners import listeners
how = init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
mine = listeners()  # while every rank holds the group
dist.barrier()
print(json.dumps({"how": how, "sum": t.item(), "listeners": mine}))
dist.destroy_process_group()
"""


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    return {**env, "RUBRICFLOW_THREADS": "1", **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_single_process_deepspeed_engine_listens_on_loopback_only():
    """Old: the engine's process listened on ``*:PORT`` (torch's TCP store). New: no store port; what gloo
    listens on is on 127.0.0.1."""
    r = subprocess.run([sys.executable, "-c", ENGINE_CHILD], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert beyond_loopback([tuple(x) for x in got["listeners"]]) == [], got["listeners"]
    assert (got["kind"], got["world"], got["rendezvous"]) == ("deepspeed", 1, "hash")


@pytest.mark.parametrize("master_addr", ["127.0.0.1", "localhost"])
def test_two_processes_on_one_machine_rendezvous_on_loopback(master_addr):
    """Two ranks as the deepspeed launcher starts them on one node (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, no
    launcher store): rank 0's store listens on 127.0.0.1:MASTER_PORT, nothing on every interface."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-c", GROUP_CHILD], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR=master_addr,
                                       MASTER_PORT=str(port)))
             for r in (0, 1)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-3000:]
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [o["how"] for o in outs] == ["loopback", "loopback"] and {o["sum"] for o in outs} == {2.0}
    assert ["127.0.0.1", port] in outs[0]["listeners"]  # the store, on loopback
    for o in outs:
        assert beyond_loopback([tuple(x) for x in o["listeners"]]) == [], o["listeners"]


def test_a_taken_master_port_is_one_clear_error():
    """Rank 0 of several cannot listen on MASTER_PORT: one line naming the address, not a hang."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-c", GROUP_CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env=_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                    MASTER_PORT=str(port)))
    assert r.returncode != 0 and time.monotonic() - t0 < 60
    assert f"rendezvous: cannot listen on 127.0.0.1:{port} (MASTER_PORT)" in r.stderr


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                            ("::1", True), ("[::1]", True), ("10.0.0.1", False), ("0.0.0.0", False),
                                            ("gpu-node-0.invalid", False)])
def test_which_master_addresses_are_loopback(host, loopback):
    from rubricflow.grpo.engine import _is_loopback

    assert _is_loopback(host) is loopback


@pytest.mark.parametrize("env, how", [
    ({"WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}, "hash"),
    ({"WORLD_SIZE": "1", "MASTER_ADDR": "gpu-node-0.invalid"}, "hash"),
    ({"WORLD_SIZE": "2", "MASTER_ADDR": "gpu-node-0.invalid"}, "env"),  # the user named another machine
    ({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_USE_AGENT_STORE": "True"}, "launcher"),
])
def test_the_rendezvous_follows_the_launch(monkeypatch, env, how):
    """Which store each launch gets (torch's ``init_process_group`` replaced: only the choice is checked here)."""
    import torch.distributed as dist

    from rubricflow.grpo import engine

    for k in DIST_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in {"RANK": "1", "MASTER_PORT": "29999", **env}.items():
        monkeypatch.setenv(k, v)
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw)))
    if how == "hash":
        monkeypatch.setenv("RANK", "0")
    assert engine.init_process_group("gloo") == how
    (backend, kw), = calls
    assert backend == "gloo" and kw["world_size"] == int(env["WORLD_SIZE"])
    if how == "hash":
        assert isinstance(kw["store"], dist.HashStore)
    else:
        assert kw.get("store") is None and kw["init_method"] == "env://"
    assert ("GLOO_SOCKET_IFNAME" in os.environ) is (env["MASTER_ADDR"] == "127.0.0.1")
