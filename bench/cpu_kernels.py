"""Does the SFT warm start survive another CPU? The same seed's base model and SFT start built under torch's
kernel choices (``ATEN_CPU_CAPABILITY``: ``default`` / ``avx2`` / ``avx512``), each in a fresh process, compared
per task on val and by the weights' content hash.

Another machine's CPU picks other vectorised kernels; the float results differ in their last bits and tiny
training can amplify that. This imitates it on one machine. The baseline is the first capability listed, built in
the same run.

Prints one line per capability: ``cpu_kernels capability=<c> seed=<s> val_overall=<x> val_<task>=<y> ...
weights=<hash>`` and a final ``cpu_kernels max_abs_diff_vs_<baseline>=<d> identical_weights=<n>/<m>``.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/cpu_kernels.py [--seed 101] [--capabilities default,avx2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = """
import json, sys
from pathlib import Path
import rubricflow.env  # noqa: F401
from rubricflow.config import load_config
from rubricflow.hashing import content_hash
from rubricflow.policy_start import build_base, warm_start
cfg = load_config("params.yaml")
seed, out = int(sys.argv[1]), Path(sys.argv[2])
build_base(cfg.models, cfg.data, out / "base", seed)
sft, _ = warm_start(cfg.sft, cfg.models, cfg.data, cfg.generation, out / "base", out / "sft", seed)
print("RESULT " + json.dumps({"val": sft["accuracy_after"], "weights": content_hash(out / "sft" / "model.safetensors")}))
"""


def build(capability: str, seed: int, out: Path) -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(seed), str(out)], env=env, capture_output=True,
                          text=True, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"cpu_kernels: capability {capability} failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no output'}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--capabilities", default="default,avx2", help="comma-separated ATEN_CPU_CAPABILITY values")
    args = ap.parse_args()
    if not Path("data/synthetic/manifest.json").exists():
        raise SystemExit("cpu_kernels: data/synthetic is missing: run `dvc repro validate` first")
    caps = [c.strip() for c in args.capabilities.split(",") if c.strip()]
    results = {}
    with tempfile.TemporaryDirectory(prefix="rubricflow-cpu-kernels-") as tmp:
        for cap in caps:
            r = results[cap] = build(cap, args.seed, Path(tmp) / cap)
            tasks = " ".join(f"val_{k}={v:.3f}" for k, v in r["val"].items())
            print(f"cpu_kernels capability={cap} seed={args.seed} {tasks} weights={r['weights']}", flush=True)
    base = results[caps[0]]
    diff = max(abs(r["val"][k] - base["val"][k]) for r in results.values() for k in base["val"])
    same = sum(r["weights"] == base["weights"] for r in results.values())
    print(f"cpu_kernels max_abs_diff_vs_{caps[0]}={diff:.3f} identical_weights={same}/{len(results)}")


if __name__ == "__main__":
    main()
