"""Ray as a flow's task runner: prefect-ray's ``RayTaskRunner`` (the ``ray`` extra), the address forms the CLI and
the flows accept, and the resources each task asks for.

Addresses (``rubricflow study NAME --ray ADDRESS``, the ``study`` flow's ``ray`` field):

* ``auto``: the Ray cluster this machine is part of (``ray start`` ran here, or ``RAY_ADDRESS``; Ray finds it).
  Never starts one: with no cluster running it is a one-line error saying what to do (prefect-ray alone would
  start a new instance on the machine's interface address);
* ``ray://host:10001``: a remote cluster through Ray Client (KubeRay's head service, for example);
* ``host:port``: the GCS address of a cluster (``ray start --head`` prints it). A loopback host stays loopback
  (Ray rewrites ``127.0.0.1``/``localhost`` to the interface address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
  when it is imported, which is set here);
* ``local``: a Ray instance started on this machine for the flow run, every listener on 127.0.0.1, shut down
  after it.

Every address but ``local`` is checked before Ray connects: nothing accepting a TCP connection there within
:data:`CONNECT_TIMEOUT_S` is a one-line error naming the address (Ray alone retries for minutes without one).

Nothing here schedules: Ray places each task where its resource request fits, reruns a task whose worker or node
died (``max_retries``), and Prefect retries a task that raised.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from typing import Any

from rubricflow.sections import ConfigError

LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
RAY_FORMS = "`auto`, `local`, `ray://host:port` or `host:port`"
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
CONNECT_TIMEOUT_S = 5.0  # seconds for a cluster's address to accept a TCP connection
START_HINT = "start one (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --port 6379` on this machine)"


def check_address(address: str, field: str = "ray") -> str:
    """``address`` stripped, if it is one of :data:`RAY_FORMS`; else a one-line ConfigError naming ``field``."""
    a = str(address).strip()
    rest = a[len("ray://"):] if a.startswith("ray://") else a
    if a in ("auto", "local") or (_HOST_PORT.match(rest) and 0 < int(_HOST_PORT.match(rest).group(2)) < 65536):
        return a
    raise ConfigError(f"{field}: expected a Ray address ({RAY_FORMS}), got {address!r}")


def _host_port(address: str) -> tuple[str, int]:
    """``host`` and ``port`` of ``host:port`` or ``ray://host:port`` (an IPv6 host without its brackets)."""
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, port = rest.rsplit(":", 1)
    return host.strip("[]"), int(port)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# An HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, Ray Client) answers with its own
# SETTINGS frame (frame type 4) at once; anything else is not a Ray cluster's address.
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_reachable(address: str, timeout_s: float | None = None) -> None:
    """A one-line ConfigError unless something at ``address`` accepts a TCP connection and answers as a gRPC server
    (Ray's GCS or Ray Client) within ``timeout_s`` (default :data:`CONNECT_TIMEOUT_S`) each."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    host, port = _host_port(address)
    try:
        conn = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as e:
        why = f"no answer within {timeout_s:g} s" if isinstance(e, TimeoutError) else (e.strerror or str(e)).lower()
        raise ConfigError(f"ray: no Ray cluster answers at {address} ({why}): {START_HINT} and give its address, "
                          f"give the address of a running cluster, or use `local`") from None
    head = b""
    with conn:
        try:
            conn.sendall(_H2_HELLO)
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
        except OSError:
            pass
    if len(head) < 9 or head[3] != 4:
        raise ConfigError(f"ray: {address} accepts connections but does not answer as a Ray cluster (no gRPC reply "
                          f"within {timeout_s:g} s): give the GCS address `ray start --head` printed (port 6379 by "
                          f"default) or a Ray Client address ray://host:10001")


def existing_cluster() -> str:
    """The GCS address `auto` means: ``RAY_ADDRESS``, else the cluster ``ray start`` last started here, else a
    running one found on this machine; a one-line ConfigError when there is none (never starts one)."""
    from ray._private.services import get_ray_address_from_environment

    try:
        found = get_ray_address_from_environment("auto", None)
    except ConnectionError:
        found = None
    if not found or found in ("auto", "local"):
        raise ConfigError(f"ray: `auto` found no running Ray cluster on this machine (no `ray start` ran here and "
                          f"RAY_ADDRESS is unset): {START_HINT} and rerun, give a cluster's address, or use `local` "
                          f"for a Ray instance of this run only")
    return check_address(found, field="ray: `auto` found")


def connect_address(address: str) -> str:
    """The address Ray connects to for ``address`` (:func:`check_address`), checked before anything starts:
    ``local`` as it is (Ray on 127.0.0.1 only), ``auto`` resolved to a running cluster (:func:`existing_cluster`),
    and every other address answering a TCP connection (:func:`check_reachable`). Imports ray, after setting
    :data:`LOOPBACK_VAR` to 0 (unless set) for ``local``, ``auto`` and loopback hosts. One-line ConfigErrors; one
    naming the extra when the ``ray`` extra is not installed."""
    address = check_address(address)
    if address in ("local", "auto") or (not address.startswith("ray://") and _is_loopback(_host_port(address)[0])):
        os.environ.setdefault(LOOPBACK_VAR, "0")  # read when ray is imported; its processes inherit it
    try:
        import ray  # noqa: F401  (imported whole before prefect_ray's lazy import of it and the submodule below)
        from ray._private import ray_constants
    except ImportError as e:
        raise ConfigError(f"ray: running on Ray needs the `ray` extra (pip install -e '.[ray]'): {e}") from None
    if address == "local":
        # Ray binds the machine's interface address unless LOOPBACK_VAR was 0 when it was imported
        if ray_constants.ENABLE_RAY_CLUSTER:
            raise ConfigError(f"ray: `local` starts Ray on 127.0.0.1 only, which needs {LOOPBACK_VAR}=0 before ray "
                              f"is imported (it is {os.environ.get(LOOPBACK_VAR)!r}); unset it, or start a cluster "
                              f"and give its address")
        return address
    if address == "auto":
        address = existing_cluster()
    if not address.startswith("ray://") and _is_loopback(_host_port(address)[0]) and ray_constants.ENABLE_RAY_CLUSTER:
        # Ray would connect to the interface address instead, where a loopback cluster does not listen
        raise ConfigError(f"ray: {address} is on loopback, which Ray keeps only with {LOOPBACK_VAR}=0 before ray is "
                          f"imported (it is {os.environ.get(LOOPBACK_VAR)!r}); unset it, or give the cluster's "
                          f"interface address")
    check_reachable(address)
    return address


def task_runner(address: str):
    """A ``RayTaskRunner`` for ``address``, resolved and checked by :func:`connect_address` (``auto`` never starts
    a Ray instance; an address where nothing answers is an error in seconds)."""
    address = connect_address(address)
    try:
        from prefect_ray import RayTaskRunner
    except ImportError as e:
        raise ConfigError(f"ray: running on Ray needs the `ray` extra (pip install -e '.[ray]'): {e}") from None
    quiet = {"include_dashboard": False, "log_to_driver": True}
    if address == "local":
        return RayTaskRunner(init_kwargs={**quiet, "_node_ip_address": "127.0.0.1"})
    return RayTaskRunner(address=address, init_kwargs={} if address.startswith("ray://") else quiet)


def unit_resources(cluster: Any) -> dict[str, Any]:
    """Ray's ``remote`` options of one study unit from the ``cluster`` section: its CPUs and GPUs, and how often
    Ray reruns it when its worker or node dies (``retry_exceptions`` off: an exception is Prefect's to retry)."""
    return {"num_cpus": cluster.unit_cpus, "num_gpus": cluster.unit_gpus, "max_retries": cluster.unit_retries,
            "retry_exceptions": False}


def cluster_hosts() -> list[str]:
    """The IP addresses of the connected cluster's live nodes (sorted)."""
    import ray

    return sorted({n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")})
