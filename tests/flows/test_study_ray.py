"""Studies on Ray (flows/study.py with ``ray=ADDRESS``, tasks/ray_runner.py, ``rubricflow study NAME --ray``).

The cluster tests start a real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``, 1 CPU per node,
every listener on 127.0.0.1) and a temporary Prefect server, once per module; the units are the toy unit of
``rubricflow.testing.study_units`` (no training), which records the Ray node of every attempt.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rubricflow.sections import ConfigError
from rubricflow.testing.study_units import ToyUnit, attempts, metric_value
from tests.ops_helpers import make_project, share_placeholder_rucl_start

# Loaded by the Ray workers, which import the installed package (not this test tree).
UNIT = "rubricflow.testing.study_units:ONE_SECOND"
LONG_UNIT = "rubricflow.testing.study_units:EIGHT_SECONDS"
SEEDS, VARIANTS = [11, 22], ["sft", "outcome"]

# ------------------------------------------------------------------------------------------------------------
# without a cluster


@pytest.mark.parametrize("address", ["auto", "local", "ray://head.example:10001", "127.0.0.1:6379", "head-0:6379"])
def test_ray_addresses_accepted(address):
    from tasks.ray_runner import check_address

    assert check_address(f" {address} ") == address


@pytest.mark.parametrize("address", ["", "head", "127.0.0.1", "http://head:6379", "head:0", "head:70000", "ray://"])
def test_a_bad_ray_address_is_refused_in_one_line(address):
    from tasks.ray_runner import check_address

    with pytest.raises(ConfigError) as e:
        check_address(address)
    msg = str(e.value)
    assert msg.startswith("ray: expected a Ray address (`auto`, `local`, `ray://host:port` or `host:port`)")
    assert repr(address) in msg and "\n" not in msg


def test_a_local_ray_instance_stays_on_loopback():
    """``local`` starts Ray on this machine with every listener on 127.0.0.1 (Ray reads the variable at import)."""
    pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    from ray._private import ray_constants
    from ray._private.services import get_node_ip_address

    from tasks.ray_runner import task_runner

    runner = task_runner("local")
    assert runner.address is None and runner.init_kwargs["_node_ip_address"] == "127.0.0.1"
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and not ray_constants.ENABLE_RAY_CLUSTER
    assert get_node_ip_address() == "127.0.0.1"

    # in a fresh process, where ray is first imported by the runner (as the CLI does)
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    code = ("from tasks.ray_runner import task_runner; task_runner('local'); import ray; "
            "from ray._private.services import get_node_ip_address; "
            "print(ray.is_initialized(), get_node_ip_address())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["False", "127.0.0.1"]


def test_unit_resources_follow_the_profile():
    """tiny: one CPU and no GPU per unit; gpu: 8 CPUs and one GPU; Ray reruns a unit whose node died, Prefect
    retries one that raised."""
    from rubricflow.config import load_config
    from tasks.ray_runner import unit_resources

    root = Path(__file__).resolve().parents[2]
    tiny = unit_resources(load_config(root / "params.yaml", profile="tiny").cluster)
    gpu = unit_resources(load_config(root / "params.yaml", profile="gpu").cluster)
    assert tiny == {"num_cpus": 1, "num_gpus": 0, "max_retries": 3, "retry_exceptions": False}
    assert (gpu["num_cpus"], gpu["num_gpus"]) == (8, 1)


def test_the_cli_refuses_a_bad_ray_address_in_one_line(tmp_path, monkeypatch):
    from flows.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    res = CliRunner().invoke(app, ["study", "rucl", "--ray", "headnode", "--no-track"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == ("error: --ray: expected a Ray address (`auto`, `local`, `ray://host:port` or "
                                  "`host:port`), got 'headnode'")


def test_the_cli_refuses_ray_with_report_only(tmp_path, monkeypatch):
    from flows.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    res = CliRunner().invoke(app, ["study", "rucl", "--ray", "local", "--report-only", "--no-track"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == "error: --ray and --report-only: --report-only runs no unit; give one of them"


def test_the_cli_hands_ray_runs_to_the_study_flow(tmp_path, monkeypatch):
    """``study NAME --ray ADDRESS`` runs the Prefect ``study`` flow with the selection, the profile, the ``--set``
    overrides and the address."""
    import flows.study
    import tasks.ray_runner
    from flows.cli import app

    pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    monkeypatch.delenv("RUBRICFLOW_PARAMS", raising=False)
    calls = []
    monkeypatch.setattr(flows.study, "study", lambda **kw: calls.append(kw) or {"units": 4, "ran": 4})
    monkeypatch.setattr(tasks.ray_runner, "check_reachable", lambda address: None)  # no cluster at head:10001
    res = CliRunner().invoke(app, ["--set", "rucl.grpo.lr=0.01", "study", "rucl", "--seeds", "11,22",
                                   "--variants", "sft,outcome", "--ray", "ray://head:10001", "--no-track"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"units": 4, "ran": 4}
    assert calls == [{"name": "rucl", "profile": "tiny", "seeds": [11, 22], "variants": ["sft", "outcome"],
                      "overrides": {"rucl.grpo.lr": 0.01}, "ray": "ray://head:10001", "track": False,
                      "report_name": None, "exploratory": False}]
    monkeypatch.delenv("RUBRICFLOW_PARAMS", raising=False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_cluster_here(monkeypatch):
    """No Ray cluster on this machine as `auto` looks for one (RAY_ADDRESS, `ray start`'s file, running GCS
    processes), whatever else runs here."""
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: [])
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)


def test_auto_without_a_cluster_is_one_clear_error(tmp_path, monkeypatch):
    """Old: `--ray auto` with no cluster running started a new Ray instance on the machine's interface address
    (prefect-ray reads `auto` as "create"). New: one line saying there is none and what to do; nothing starts."""
    ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    import flows.study
    from flows.cli import app
    from tasks.ray_runner import task_runner

    _no_cluster_here(monkeypatch)
    with pytest.raises(ConfigError) as e:
        task_runner("auto")
    msg = str(e.value)
    assert msg.startswith("ray: `auto` found no running Ray cluster on this machine (no `ray start` ran here and "
                          "RAY_ADDRESS is unset): start one (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head")
    assert "`local`" in msg and "\n" not in msg and not ray.is_initialized()

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    calls = []
    monkeypatch.setattr(flows.study, "study", lambda **kw: calls.append(kw) or {})
    res = CliRunner().invoke(app, ["study", "rucl", "--ray", "auto", "--no-track"])
    assert res.exit_code == 2 and res.output.strip() == f"error: {msg}" and calls == []
    monkeypatch.delenv("RUBRICFLOW_PARAMS", raising=False)


def test_auto_connects_to_the_cluster_named_by_ray_address(monkeypatch):
    """`auto` means the existing cluster: RAY_ADDRESS (or `ray start`'s record) is the address the runner uses."""
    pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    import tasks.ray_runner
    from tasks.ray_runner import task_runner

    _no_cluster_here(monkeypatch)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    probed = []
    monkeypatch.setattr(tasks.ray_runner, "check_reachable", probed.append)
    assert task_runner("auto").address == "127.0.0.1:6379" and probed == ["127.0.0.1:6379"]


def test_an_address_where_nothing_answers_is_one_clear_error_in_seconds(tmp_path, monkeypatch):
    """Old: `--ray 127.0.0.1:PORT` with nothing listening there retried for minutes with no error (at the
    interface address Ray rewrote it to). New: refused within seconds in one line naming the address; the flow never
    starts."""
    pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    import flows.study
    from flows.cli import app

    port = _closed_port()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    calls = []
    monkeypatch.setattr(flows.study, "study", lambda **kw: calls.append(kw) or {})
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        t0 = time.monotonic()
        res = CliRunner().invoke(app, ["study", "rucl", "--ray", address, "--no-track"])
        assert time.monotonic() - t0 < 15 and res.exit_code == 2 and calls == []
        assert res.output.strip() == (f"error: ray: no Ray cluster answers at {address} (connection refused): start "
                                      "one (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --port 6379` on this "
                                      "machine) and give its address, give the address of a running cluster, or use "
                                      "`local`")
    monkeypatch.delenv("RUBRICFLOW_PARAMS", raising=False)


def test_an_address_that_never_answers_is_bounded(monkeypatch):
    """A host that drops the connection attempt: the error names the bound instead of waiting on."""
    import socket as socket_module

    from tasks.ray_runner import check_reachable

    seen = []

    def silent(addr, timeout):
        seen.append((addr, timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket_module, "create_connection", silent)
    with pytest.raises(ConfigError) as e:
        check_reachable("127.0.0.1:6379")
    assert seen == [(("127.0.0.1", 6379), 5.0)]
    assert str(e.value).startswith("ray: no Ray cluster answers at 127.0.0.1:6379 (no answer within 5 s): ")


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n"])
def test_an_address_that_is_not_a_ray_cluster_is_one_clear_error(reply):
    """Something listens at the address but is no Ray cluster (silent, or another protocol): Ray would retry for
    minutes; the check says so within its bound."""
    from tasks.ray_runner import check_reachable

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer():
            conn, _ = server.accept()
            with conn:
                conn.recv(64)
                conn.sendall(reply) if reply else time.sleep(2)

        threading.Thread(target=answer, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(ConfigError) as e:
            check_reachable(f"127.0.0.1:{port}", timeout_s=1)
    assert time.monotonic() - t0 < 5
    assert str(e.value).startswith(f"ray: 127.0.0.1:{port} accepts connections but does not answer as a Ray cluster "
                                   "(no gRPC reply within 1 s): ")


RUNNER_CHILD = """
import json, sys, time
from tasks.ray_runner import task_runner
from tests.listeners import listeners
t0 = time.monotonic()
try:
    with task_runner(sys.argv[1]):
        import ray
        print(json.dumps({"nodes": sorted({n["NodeManagerAddress"] for n in ray.nodes()}), "listeners": listeners(),
                          "s": time.monotonic() - t0}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}", "s": time.monotonic() - t0}))
"""


def _runner_in_a_fresh_process(address: str, timeout: float, **env) -> dict:
    """``with task_runner(address)`` in a new process that did not set the loopback variable (as the CLI runs)."""
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
    try:
        out = subprocess.run([sys.executable, "-c", RUNNER_CHILD, address], env={**clean, **env}, capture_output=True,
                             text=True, timeout=timeout, cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail(f"with task_runner({address!r}) neither connected nor failed within {timeout} s")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_fresh_process_refuses_a_closed_loopback_address_in_seconds():
    """The attack as the CLI meets it (Ray imported fresh, no loopback variable): old, Ray rewrote 127.0.0.1 to the
    interface address and retried there for minutes; new, one ConfigError within seconds naming 127.0.0.1."""
    pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    port = _closed_port()
    got = _runner_in_a_fresh_process(f"127.0.0.1:{port}", timeout=90)
    assert got["error"].startswith(f"ConfigError: ray: no Ray cluster answers at 127.0.0.1:{port} (connection "
                                   "refused)") and got["s"] < 30, got


@pytest.mark.parametrize("uri, hosts, refused", [
    ("sqlite:///x/mlflow.db", ["10.0.0.1"], False),  # every node on the driver's machine
    ("sqlite:///x/mlflow.db", ["10.0.0.1", "10.0.0.2"], True),
    ("/shared/mlruns", ["10.0.0.1", "10.0.0.2"], True),
    ("http://mlflow:5000", ["10.0.0.1", "10.0.0.2"], False),
])
def test_units_on_other_machines_need_an_mlflow_server(monkeypatch, uri, hosts, refused):
    import flows.study
    import tasks.ray_runner
    from rubricflow.config import config_from_dict

    pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    import ray.util

    monkeypatch.setattr(tasks.ray_runner, "cluster_hosts", lambda: hosts)
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "10.0.0.1")
    cfg = config_from_dict({"tracking": {"tracking_uri": uri}})
    flows.study._check_tracking(cfg, track=False)  # nothing logged: nothing to check
    if not refused:
        flows.study._check_tracking(cfg, track=True)
        return
    with pytest.raises(ConfigError) as e:
        flows.study._check_tracking(cfg, track=True)
    assert str(e.value).startswith("tracking.tracking_uri: the units run on other machines (10.0.0.2) but MLflow "
                                   f"logs to {uri!r} on this one")


def test_the_toy_unit_is_deterministic_and_records_its_attempts(tmp_path):
    from rubricflow.study.adapter import Unit

    out = [ToyUnit()(None, Unit("sft", 11), tmp_path, None, None) for _ in range(2)]
    assert out[0] == out[1] == {"metrics": {"accuracy": metric_value("sft", 11, "accuracy"),
                                            "correct_but_flawed": metric_value("sft", 11, "correct_but_flawed")},
                                "eval_samples": 12}
    assert attempts(tmp_path) == [("local", os.getpid())] * 2


# ------------------------------------------------------------------------------------------------------------
# on a two-node loopback cluster


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes of 1 CPU on 127.0.0.1 (the head and one worker node); the flows connect to its address."""
    ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (make install installs it)")
    from ray.cluster_utils import Cluster

    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0"  # tests/conftest.py: loopback only
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A throw-away project whose shared study inputs exist (placeholders: the toy unit does not read them)."""
    proj = make_project(tmp_path / "proj")
    share_placeholder_rucl_start(proj)
    monkeypatch.chdir(proj)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RUBRICFLOW_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    monkeypatch.delenv("RUBRICFLOW_PIPELINE_ID", raising=False)
    monkeypatch.delenv("RUBRICFLOW_PARAMS", raising=False)
    return proj


def _out_dir() -> Path:
    from rubricflow.config import load_config

    return Path(load_config().study.rucl.out_dir).resolve()


def _unit_dirs(out: Path) -> dict[str, Path]:
    return {f"{v}/seed{s}": out / v / f"seed{s}" for v in VARIANTS for s in SEEDS}


def _result(udir: Path) -> dict:
    doc = json.loads((udir / "result.json").read_text())
    return {k: v for k, v in doc.items() if k not in ("duration_s", "mlflow_run_id", "sha256")}


def _nodes(cluster) -> tuple[str, str]:
    """The Ray node ids of the head and the worker node."""
    return cluster.head_node.node_id, next(iter(cluster.worker_nodes)).node_id


@pytest.mark.slow
@pytest.mark.ray
def test_ray_local_starts_ray_for_the_run_and_stops_it(prefect_api, project):
    """``ray="local"``: the units run in Ray worker processes of an instance the flow started and shut down."""
    import ray

    import flows.study as study_flow

    out = study_flow.study(name="rucl", seeds=[11], variants=VARIANTS, ray="local", track=False,
                           unit_fn=UNIT)
    assert (out["units"], out["ran"]) == (2, 2) and not ray.is_initialized()
    for v in VARIANTS:
        (node, pid), = attempts(_out_dir() / v / "seed11")
        assert node != "local" and pid != os.getpid()


@pytest.mark.slow
@pytest.mark.ray
def test_a_study_on_two_nodes_gives_the_sequential_results(prefect_api, cluster, project):
    """Four units as Ray tasks over both nodes (each listening on 127.0.0.1): the same unit results and the same
    report numbers as the sequential run; one MLflow child run per unit under one parent, logged from the workers."""
    import flows.study as study_flow
    from rubricflow.config import load_config
    from rubricflow.study.harness import run_study

    assert cluster.address.startswith("127.0.0.1:")
    assert {n.node_ip_address for n in cluster.list_all_nodes()} == {"127.0.0.1"}

    serial = run_study(load_config(), "rucl", seeds=SEEDS, variants=VARIANTS, unit_fn=ToyUnit(), report_name="serial")
    out_dir = _out_dir()
    serial_dir = out_dir.with_name("rucl-serial")
    os.rename(out_dir, serial_dir)

    head, worker = _nodes(cluster)
    out = study_flow.study(name="rucl", seeds=SEEDS, variants=VARIANTS, ray=cluster.address, report_name="ray",
                           unit_fn=UNIT)
    assert (out["units"], out["ran"]) == (4, 4) and out["claims"] == serial["claims"]
    ran_on = {}
    for key, udir in _unit_dirs(out_dir).items():
        assert _result(udir) == _result(_unit_dirs(serial_dir)[key]), key
        (node, pid), = attempts(udir)  # one attempt each, in a Ray worker process
        assert pid != os.getpid()
        ran_on[key] = node
    assert set(ran_on.values()) == {head, worker}, ran_on
    print(f"\nunits per node: head {list(ran_on.values()).count(head)}, worker {list(ran_on.values()).count(worker)}")

    a, b = (json.loads(Path(run["reports"]["json"]).read_text()) for run in (serial, out))
    for key in ("variants", "claims"):
        assert b[key] == a[key], key

    import mlflow

    client = mlflow.tracking.MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("rubricflow")
    children = [r for r in client.search_runs([exp.experiment_id], max_results=100)
                if r.data.tags.get("study") == "rucl" and "mlflow.parentRunId" in r.data.tags]
    assert sorted(c.data.tags["mlflow.runName"] for c in children) == sorted(f"study_rucl/{k}" for k in ran_on)
    assert len({c.data.tags["mlflow.parentRunId"] for c in children}) == 1


@pytest.mark.slow
@pytest.mark.ray
def test_a_worker_that_cannot_see_an_input_refuses_it_by_name(prefect_api, cluster, project):
    """A unit checks its inputs where it runs: a missing shared input, or a project folder the node does not have,
    fails the study naming the unit and the path, without a retry and without running the unit."""
    from flows.study import UnitsFailed, units_on_ray
    from rubricflow.config import load_config
    from rubricflow.study.adapter import Unit

    cfg = load_config()
    worker = {"root": str(project), "params": str(project / "params.yaml"), "threads": 1, "env": {}}
    args = dict(profile="tiny", overrides={}, track=False, flow_run_id=None, unit_fn=UNIT)
    (project / "artifacts/models/sft/config.json").unlink()  # after the driver's check: only the worker sees it gone
    with pytest.raises(UnitsFailed) as e:
        units_on_ray(cluster.address, "rucl", [(Unit("sft", 11), None)], {**args, "worker": worker}, cfg.cluster)
    msg = str(e.value)
    assert msg.startswith("study rucl: 1 of 1 units failed (the others' results are kept): sft/seed11: "
                          "SharedOutputsMissing:") and "artifacts/models/sft/config.json (stage `sft`)" in msg
    assert "\n" not in msg

    elsewhere = project.parent / "not-on-this-node"
    with pytest.raises(UnitsFailed) as e:
        units_on_ray(cluster.address, "rucl", [(Unit("sft", 11), None)],
                     {**args, "worker": {**worker, "root": str(elsewhere)}}, cfg.cluster)
    assert "sft/seed11: ProjectNotShared: study unit sft/seed11 on " in str(e.value)
    assert f"the project folder {elsewhere} does not exist on this worker" in str(e.value)
    assert attempts(_out_dir() / "sft" / "seed11") == []  # never ran


@pytest.mark.slow
@pytest.mark.ray
def test_a_loopback_cluster_is_reached_on_loopback_from_a_fresh_process(cluster):
    """Old: a fresh process given the loopback cluster's address (or `auto` with RAY_ADDRESS) connected to the
    interface address instead and retried for minutes. New: it connects to the nodes on 127.0.0.1 and the driver
    listens on loopback only."""
    from tests.listeners import beyond_loopback

    for address, env in ((cluster.address, {}), ("auto", {"RAY_ADDRESS": cluster.address})):
        got = _runner_in_a_fresh_process(address, timeout=180, **env)
        assert got.get("nodes") == ["127.0.0.1"], got
        assert beyond_loopback([tuple(x) for x in got["listeners"]]) == [], got


@pytest.mark.slow
@pytest.mark.ray
def test_a_study_survives_losing_a_node(prefect_api, cluster, project):
    """The worker node's raylet is killed while it runs a unit: Ray reruns that unit on the head node and the study
    ends complete, every unit's result as the sequential run gives it. (Runs last: the cluster keeps one node.)"""
    import flows.study as study_flow

    head, worker = _nodes(cluster)
    victim = next(iter(cluster.worker_nodes))
    dirs = _unit_dirs(_out_dir())
    lost: list[str] = []

    def kill_when_busy():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            busy = [k for k, d in dirs.items() if any(n == worker for n, _ in attempts(d))
                    and not (d / "result.json").exists()]
            if busy:
                lost.extend(busy)
                cluster.remove_node(victim, allow_graceful=False)  # kills the node's raylet and its workers
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_when_busy, daemon=True)
    killer.start()
    out = study_flow.study(name="rucl", seeds=SEEDS, variants=VARIANTS, ray=cluster.address, track=False,
                           unit_fn=LONG_UNIT)
    killer.join(timeout=5)
    assert lost, "the worker node never ran a unit"
    assert (out["units"], out["ran"]) == (4, 4)
    for key, udir in dirs.items():
        v, s = key.split("/seed")
        assert _result(udir)["metrics"] == {m: metric_value(v, int(s), m) for m in ("accuracy", "correct_but_flawed")}
    for key in lost:
        nodes = [n for n, _ in attempts(dirs[key])]
        assert nodes[0] == worker and nodes[-1] == head, (key, nodes)  # rerun on the surviving node
    print(f"\nlost node ran {lost}; attempts: { {k: [n[:8] for n, _ in attempts(d)] for k, d in dirs.items()} }")
