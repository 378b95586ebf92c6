"""Register this repository's local deployments and run a process worker for them.

``python -m flows.serve`` (or ``rubricflow serve``), with a Prefect server reachable at ``$PREFECT_API_URL``
(``make ui`` starts one on http://127.0.0.1:4200):

1. creates the ``rubricflow-local`` process work pool and the ``judge-calls`` concurrency limit if missing;
2. registers the ``*-local`` deployments of ``prefect.yaml`` (``prefect --no-prompt deploy -n rucl-local ...``) with
   ``RUBRICFLOW_ROOT`` set to this checkout: Prefect resolves ``{{ $RUBRICFLOW_ROOT }}`` of the pull step when
   deploying, so runs of these deployments execute in this checkout;
3. runs ``prefect worker start --pool rubricflow-local`` in the foreground (Ctrl-C stops it); every flow run
   launched or scheduled from the UI is a subprocess of this worker.

``--no-worker`` stops after step 2 (``rubricflow deploy``). ``make ui`` does the same with the worker in the
background (infra/local/ui.sh).
"""

from __future__ import annotations

import rubricflow.util.env  # noqa: F401  (project-local state before prefect loads)
import tasks  # noqa: F401  (Prefect defaults of the orchestration layer, before prefect loads)

import os
import subprocess
import sys
from pathlib import Path

import yaml

from rubricflow.util.env import PROJECT_ROOT

POOL = "rubricflow-local"


def local_deployments(prefect_yaml: Path | None = None) -> list[str]:
    """Names of the prefect.yaml deployments on the local process pool."""
    path = prefect_yaml or PROJECT_ROOT / "prefect.yaml"
    doc = yaml.safe_load(path.read_text()) or {}
    names = [d["name"] for d in doc.get("deployments") or [] if (d.get("work_pool") or {}).get("name") == POOL]
    if not names:
        raise ValueError(f"{path}: no deployment uses work pool {POOL!r}")
    return names


def _prefect(*args: str, check: bool = True, root: Path = PROJECT_ROOT) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("prefect")
    env = {**os.environ, "RUBRICFLOW_ROOT": str(root)}
    proc = subprocess.run([str(exe), "--no-prompt", *args], cwd=root, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"prefect {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def ensure_pool() -> bool:
    """Create the process pool if missing; True if created now."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(POOL)
            return False
        except ObjectNotFound:
            pass
        try:
            client.create_work_pool(WorkPoolCreate(name=POOL, type="process"))
            return True
        except ObjectAlreadyExists:
            return False


def deploy(names: list[str] | None = None, root: Path = PROJECT_ROOT) -> list[str]:
    """Pool + judge limit + the deployments; returns the deployment names registered."""
    from tasks.concurrency import ensure_judge_limit

    if not os.environ.get("PREFECT_API_URL"):
        raise RuntimeError(
            "PREFECT_API_URL is not set: start a server first (make ui) and export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    ensure_pool()
    ensure_judge_limit()
    names = names or local_deployments(root / "prefect.yaml")
    args = ["deploy"]
    for n in names:
        args += ["-n", n]
    _prefect(*args, root=root)
    return names


def worker(root: Path = PROJECT_ROOT) -> int:
    exe = Path(sys.executable).with_name("prefect")
    env = {**os.environ, "RUBRICFLOW_ROOT": str(root)}
    return subprocess.call([str(exe), "worker", "start", "--pool", POOL, "--type", "process"], cwd=root, env=env)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-worker", action="store_true", help="register the deployments and exit")
    args = ap.parse_args(argv)
    names = deploy()
    print(f"registered deployments on pool {POOL}: {', '.join(names)}")
    if args.no_worker:
        return 0
    print(f"starting a process worker for {POOL} (Ctrl-C to stop)")
    return worker()


if __name__ == "__main__":
    sys.exit(main())
