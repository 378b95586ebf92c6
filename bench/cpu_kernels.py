"""Does a warm start survive another CPU? The same seed's base model and warm start built under torch's kernel
choices (``ATEN_CPU_CAPABILITY``: ``default`` / ``avx2`` / ``avx512``), each in a fresh process, compared on val and
by the weights' content hash: RuCL's SFT start (``--method rucl``, val accuracy per task), RuCL's make-run demo end to
end (``--method rucl_switch``: the start's perception / deduction pass rates, then the rucl stage's GRPO run: the
curriculum's switch step and the share of steps with lambda > 0) or DeltaRubric's warm start (``--method
deltarubric``, the narrow study's per-seed start, or ``--method deltarubric_wide``, the wide RL studies' start to its
bars: whether it met them, its steps and restarts; each with its val readout: accuracy per judge mode, the separating
and deciding shares, the flat planner groups of a step-0 rollout).

Another machine's CPU picks other vectorised kernels; the float results differ in their last bits and tiny
training can amplify that. This imitates it on one machine. The baseline is the first capability listed, built in
the same run.

Prints one line per capability: ``cpu_kernels method=<m> capability=<c> seed=<s> val_<name>=<x> ...
weights=<hash>`` and a final ``cpu_kernels max_abs_diff_vs_<baseline>=<d> identical_weights=<n>/<m>``.

    RUBRICFLOW_THREADS=1 .venv/bin/python bench/cpu_kernels.py \
        [--method rucl|rucl_switch|deltarubric|deltarubric_wide] [--seed 101] [--capabilities default,avx2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rubricflow.methods.deltarubric.study_specs import WIDE_PAIRS, WIDE_PAIRS_COMMAND

_CHILD = (
    """
import json, sys
from pathlib import Path
import rubricflow.util.env  # noqa: F401
from rubricflow.config import load_config
from rubricflow.util.hashing import content_hash
from rubricflow.training.policy_start import build_base, warm_start
cfg = load_config("params.yaml")
seed, out = int(sys.argv[1]), Path(sys.argv[2])
build_base(cfg.models, cfg.data, out / "base", seed)
sft, _ = warm_start(cfg.sft, cfg.models, cfg.data, cfg.generation, out / "base", out / "sft", seed)
print("RESULT " + json.dumps({"val": sft["accuracy_after"], "weights": """
    """content_hash(out / "sft" / "model.safetensors")}))
"""
)

# DeltaRubric: the study's own per-seed start (rubricflow.methods.deltarubric.study.build_start) under the study's
# settings, so its readout is the one the study reports per seed: the narrow pairs' study (BUDGET) or the wide pairs'
# RL studies (deltarubric_wide, _b: a warm start to its bars, with the restarts it needs)
_CHILD_DR = """
import json, sys
from pathlib import Path
import rubricflow.util.env  # noqa: F401
from rubricflow.config import load_config
from rubricflow.util.hashing import content_hash
from rubricflow.methods.deltarubric import study_specs as ss
from rubricflow.methods.deltarubric.study import build_start
from rubricflow.pipeline.stage import apply_overrides
seed, out, form = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
settings = ss.BUDGET if form == "narrow" else ss.wide_rl_base(ss.WIDE_RL_RECIPE, ss.WIDE_RL_STEPS)
cfg = apply_overrides(load_config("params.yaml"), {"seed": seed, **settings})
r = build_start(cfg, seed, out, out, out)
val = {k[len("val_"):] if k.startswith("val_") else k: v for k, v in r.items()
       if isinstance(v, (float, int)) and k not in ("sft_seconds", "sft_final_loss", "bars_resumes")}
print("RESULT " + json.dumps({"val": val, "weights": content_hash(out / "sft" / "model.safetensors")}))
"""
# RuCL's make-run demo end to end: the seed's start and tiers (the study's per-seed start recipe), then the rucl
# stage's GRPO run on them: does the start still pass perception first, and does the curriculum still switch?
_CHILD_SWITCH = """
import json, sys
from pathlib import Path
import rubricflow.util.env  # noqa: F401
from rubricflow.config import load_config
from rubricflow.util.hashing import content_hash
from rubricflow.methods.rucl.study import build_start
from rubricflow.methods.rucl.train import run_training
cfg = load_config("params.yaml")
seed, out = int(sys.argv[1]), Path(sys.argv[2])
start = build_start(cfg, seed, out, out)
rcfg = cfg.rucl.model_copy(update={"init_from": str(out / "sft"), "tiers_path": str(out / "tiers.json"),
                                   "out_dir": str(out / "rucl"), "checkpoint_dir": str(out / "ck"), "eval_samples": 0})
train = run_training(rcfg, cfg.judge, cfg.data, cfg.generation, out / "reports", seed=seed)
val = {k[len("sft_val_"):]: v for k, v in start.items() if k.startswith("sft_val_")}
val.update({"pass_perception": start["pass_foundational"], "pass_deduction": start["pass_advanced"],
            "switch_step": train["transition_step"], "lambda_positive_share": train["lambda_positive_share"]})
print("RESULT " + json.dumps({"val": val, "weights": content_hash(out / "sft" / "model.safetensors")}))
"""
# method -> (child program, its extra arguments, the input it needs, how to build that input)
CHILDREN = {"rucl": (_CHILD, [], "data/synthetic/manifest.json", "dvc repro validate"),
            "rucl_switch": (_CHILD_SWITCH, [], "data/synthetic/manifest.json", "dvc repro validate"),
            "deltarubric": (_CHILD_DR, ["narrow"], "data/deltarubric/pairs/manifest.json",
                            "dvc repro deltarubric_pairs"),
            "deltarubric_wide": (_CHILD_DR, ["wide"], f"{WIDE_PAIRS['deltarubric.pairs.out_dir']}/manifest.json",
                                 WIDE_PAIRS_COMMAND)}


def build(capability: str, seed: int, out: Path, method: str = "rucl") -> dict:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    program, extra = CHILDREN[method][:2]
    proc = subprocess.run([sys.executable, "-c", program, str(seed), str(out), *extra], env=env,
                          capture_output=True, text=True, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"cpu_kernels: capability {capability} failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no output'}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", choices=sorted(CHILDREN), default="rucl")
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--capabilities", default="default,avx2", help="comma-separated ATEN_CPU_CAPABILITY values")
    ap.add_argument("--work-dir", default=None,
                    help="keep each capability's build here (default: a temporary folder): a DeltaRubric start to a "
                    "bar stopped midway goes on from its last block when run again with the same folder")
    args = ap.parse_args()
    _, _, needed, how = CHILDREN[args.method]
    if not Path(needed).exists():
        raise SystemExit(f"cpu_kernels: {needed} is missing: run `{how}` first")
    caps = [c.strip() for c in args.capabilities.split(",") if c.strip()]
    results = {}
    with contextlib.ExitStack() as stack:
        tmp = args.work_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="rubricflow-cpu-kernels-"))
        for cap in caps:
            r = results[cap] = build(cap, args.seed, Path(tmp) / cap, args.method)
            vals = " ".join(f"val_{k}={v:.3f}" if isinstance(v, float) else f"val_{k}={v}" for k, v in r["val"].items())
            print(f"cpu_kernels method={args.method} capability={cap} seed={args.seed} {vals} "
                  f"weights={r['weights']}", flush=True)
    base = results[caps[0]]
    diff = max(abs(r["val"][k] - base["val"][k]) for r in results.values() for k in base["val"]
               if r["val"].get(k) is not None and base["val"][k] is not None)
    same = sum(r["weights"] == base["weights"] for r in results.values())
    print(f"cpu_kernels max_abs_diff_vs_{caps[0]}={diff:.3f} identical_weights={same}/{len(results)}")


if __name__ == "__main__":
    main()
