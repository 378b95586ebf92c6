"""The rollout server (``generation.vllm_mode: server``): vLLM in its own environment, generation over HTTP.

Run it where vLLM is installed (on CPU the project's ``.venv-vllm``), from the project root::

    PYTHONPATH=. .venv-vllm/bin/python -m models.generation.vllm_server --model DIR --port 8001 [--dtype float32]
        [--max-model-len N] [--enforce-eager] [--tensor-parallel-size N] [--gpu-memory-utilization F]

The trainer talks to it with ``models.generation.vllm_client.VLLMServerGenerator`` and never imports vLLM. Routes
(JSON):

* ``GET /health`` -> ``{"status": "ok", "model", "weight_version"}``
* ``POST /generate`` ``{"requests": [{"prompt", "images": [base64 PNG]}], "n", "max_new_tokens", "temperature",
  "top_p", "seed", "logprobs"}`` -> ``{"completions": [[{"token_ids", "text", "finished", "logprobs"}]]}``: the
  same ``VLLMGenerator.generate`` as the colocated mode, so stop tokens, suppression and log-probs agree;
* ``POST /update_weights`` ``{"path", "version"}`` -> ``{"weight_version"}``: loads the ``*.safetensors`` files of
  folder ``path`` (written by the trainer into a folder both processes see) through the worker extension's
  ``load_policy_weights`` (vLLM's in-place ``reload_weights``) on every worker, tensor-parallel ones included.

One engine serves the requests one at a time (a lock): a trainer's ranks may call concurrently.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import threading

from pydantic import BaseModel, Field

from models.generation.contract import GenRequest
from models.generation.vllm_colocated import VLLMGenerator


class Req(BaseModel):
    prompt: str
    images: list[str] = Field(default_factory=list)  # base64 PNG, in placeholder order


class GenerateBody(BaseModel):
    requests: list[Req]
    n: int = 1
    max_new_tokens: int = 48
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    logprobs: bool = False


class UpdateBody(BaseModel):
    path: str
    version: int


def decode_image(b64: str):
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")


def build_app(gen, model: str):
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="rubricflow rollout server")
    lock = threading.Lock()
    state = {"weight_version": 0}

    @app.get("/health")
    def health():
        return {"status": "ok", "model": model, "weight_version": state["weight_version"]}

    @app.post("/generate")
    def generate(body: GenerateBody):
        reqs = [GenRequest(r.prompt, [decode_image(b) for b in r.images]) for r in body.requests]
        with lock:
            outs = gen.generate(reqs, n=body.n, max_new_tokens=body.max_new_tokens, temperature=body.temperature,
                                top_p=body.top_p, seed=body.seed, logprobs=body.logprobs)
        return {"completions": [[c.__dict__ for c in row] for row in outs]}

    @app.post("/update_weights")
    def update_weights(body: UpdateBody):
        if not os.path.isdir(body.path):
            raise HTTPException(400, f"update_weights: {body.path} is not a folder this server can read (the "
                                     "trainer and the server must share generation.vllm_sync_dir)")
        with lock:
            gen.load_weights_file(body.path)
            state["weight_version"] = body.version
        return {"weight_version": body.version}

    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (Hugging Face format) or id")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--dtype", default="auto", help="vLLM dtype (float32 on CPU)")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import uvicorn

    gen = VLLMGenerator(args.model, dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization,
                        tensor_parallel_size=args.tensor_parallel_size, max_model_len=args.max_model_len,
                        enforce_eager=args.enforce_eager, seed=args.seed,
                        in_process=args.tensor_parallel_size == 1)
    uvicorn.run(build_app(gen, args.model), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
