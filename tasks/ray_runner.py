"""Ray as a flow's task runner: prefect-ray's ``RayTaskRunner`` (the ``ray`` extra), the address forms the CLI and
the flows accept, and the resources each task asks for.

Addresses (``rubricflow study NAME --ray ADDRESS``, the ``study`` flow's ``ray`` field):

* ``auto``: the Ray cluster this machine is part of (``ray start`` ran here; Ray finds it);
* ``ray://host:10001``: a remote cluster through Ray Client (KubeRay's head service, for example);
* ``host:port``: the GCS address of a cluster (``ray start --head`` prints it);
* ``local``: a Ray instance started on this machine for the flow run, every listener on 127.0.0.1, shut down
  after it.

Nothing here schedules: Ray places each task where its resource request fits, reruns a task whose worker or node
died (``max_retries``), and Prefect retries a task that raised.
"""

from __future__ import annotations

import os
import re
from typing import Any

from rubricflow.sections import ConfigError

LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
RAY_FORMS = "`auto`, `local`, `ray://host:port` or `host:port`"
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def check_address(address: str, field: str = "ray") -> str:
    """``address`` stripped, if it is one of :data:`RAY_FORMS`; else a one-line ConfigError naming ``field``."""
    a = str(address).strip()
    rest = a[len("ray://"):] if a.startswith("ray://") else a
    if a in ("auto", "local") or (_HOST_PORT.match(rest) and 0 < int(_HOST_PORT.match(rest).group(2)) < 65536):
        return a
    raise ConfigError(f"{field}: expected a Ray address ({RAY_FORMS}), got {address!r}")


def task_runner(address: str):
    """A ``RayTaskRunner`` for ``address`` (:func:`check_address`). Raises a ConfigError naming the extra when
    prefect-ray is not installed."""
    address = check_address(address)
    if address == "local":
        os.environ.setdefault(LOOPBACK_VAR, "0")  # read when ray is imported; its processes inherit it
    try:
        import ray  # noqa: F401  (imported whole before prefect_ray's lazy import of it and the submodule below)
        from prefect_ray import RayTaskRunner
        from ray._private import ray_constants
    except ImportError as e:
        raise ConfigError(f"ray: running on Ray needs the `ray` extra (pip install -e '.[ray]'): {e}") from None
    quiet = {"include_dashboard": False, "log_to_driver": True}
    if address == "local":
        # Ray binds the machine's interface address unless LOOPBACK_VAR was 0 when it was imported
        if ray_constants.ENABLE_RAY_CLUSTER:
            raise ConfigError(f"ray: `local` starts Ray on 127.0.0.1 only, which needs {LOOPBACK_VAR}=0 before ray "
                              f"is imported (it is {os.environ.get(LOOPBACK_VAR)!r}); unset it, or start a cluster "
                              f"and give its address")
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
