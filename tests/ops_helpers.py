"""Helpers for the orchestration tests: a throw-away project directory and small service utilities.

``make_project(tmp)`` builds a directory that looks like the repository to a stage, a flow or DVC: the code
packages are symlinked, ``params.yaml`` is the real one with tiny sizes merged in, ``dvc.yaml`` is copied, so
stage outputs, reports, MLflow and Prefect state all land in ``tmp`` and never in the checkout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CODE = ("rubricflow", "models", "tasks", "flows")

# Small enough that data + validate take seconds (the validation gate needs >= min_split_size per split).
TINY = {
    "data": {"tasks": ["counting"], "splits": {"train": 8, "val": 4, "test": 4, "calib": 4}, "min_split_size": 4},
    "sft": {"steps": 4, "batch_size": 4, "warmup_steps": 0, "eval_samples": 4},
}


def deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def make_project(tmp: Path, params: dict | None = None, git: bool = False) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    for name in CODE:
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    (tmp / "params.yaml").write_text(yaml.safe_dump(deep_merge(raw, deep_merge(TINY, params or {})), sort_keys=False))
    for f in ("dvc.yaml", "prefect.yaml"):
        if (ROOT / f).exists():
            (tmp / f).write_text((ROOT / f).read_text())
    if git:
        subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    return tmp


# The main pipeline's outputs a `rucl` study unit reads when the study shares one start (not built per seed).
RUCL_SHARED = ("data/synthetic/manifest.json", "reports/validation/data/synthetic.json",
               "artifacts/rubrics/candidates.json", "artifacts/models/sft/config.json", "artifacts/rubrics/tiers.json")


def share_placeholder_rucl_start(project: Path) -> None:
    """``project``'s `rucl` study without a start per seed, its shared inputs placeholders: for tests of how units
    are run (a toy unit function reads none of them), not of the start."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params.setdefault("study", {}).setdefault("rucl", {})["per_seed_start"] = False
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for p in RUCL_SHARED:
        (project / p).parent.mkdir(parents=True, exist_ok=True)
        (project / p).write_text("{}")


def project_env(project: Path, **extra: str) -> dict[str, str]:
    """Environment for a subprocess that must keep all its state in ``project``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "RUBRICFLOW_"))}
    env.update(
        RUBRICFLOW_ROOT=str(project),
        RUBRICFLOW_THREADS="1",
        PREFECT_HOME=str(project / ".rubricflow" / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        MLFLOW_TRACKING_URI=f"sqlite:///{project / '.rubricflow' / 'mlflow' / 'mlflow.db'}",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def empty_dvc_project(project: Path) -> Path:
    """A new folder that is a git repository and a DVC project and nothing else (its state kept inside it)."""
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=project,
                   env=project_env(project, DVC_NO_ANALYTICS="1"), check=True)
    return project


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float, headers: dict | None = None, proc: subprocess.Popen | None = None) -> float:
    """Poll ``url`` until it answers 200; returns the seconds waited. Fails naming the URL (and the process log)."""
    import httpx

    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the server process exited with {proc.returncode} before answering")
        try:
            r = httpx.get(url, headers=headers or {}, timeout=5)
            if r.status_code == 200:
                return time.monotonic() - t0
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f} s (last: {last})")


def dvc_command_mismatches(pipelines, dvc_file: str, root: Path = ROOT, extra: dict | None = None) -> dict:
    """Stages whose command in ``root/dvc_file`` differs from the manifest (the registered pipelines whose
    ``dvc_file`` it is): ``{stage: (dvc.yaml's cmd, the manifest's)}``; empty when they agree."""
    dvc = yaml.safe_load((root / dvc_file).read_text())["stages"]
    expected = {s.name: p.dvc_command(s) for p in pipelines.values() if p.dvc_file == dvc_file for s in p.stages}
    expected.update(extra or {})
    got = {name: st.get("cmd") for name, st in dvc.items()}
    return {k: (got.get(k), expected.get(k)) for k in set(got) | set(expected) if got.get(k) != expected.get(k)}
