"""The rollout server (``generation.vllm_mode: server``): vLLM in its own environment, generation over HTTP.

Run it where vLLM is installed (on CPU the project's ``.venv-vllm``), from the project root::

    PYTHONPATH=. .venv-vllm/bin/python -m models.generation.vllm_server --model DIR --port 8001 [--dtype float32]
        [--max-model-len N] [--enforce-eager] [--tensor-parallel-size N] [--gpu-memory-utilization F]

The trainer talks to it with ``models.generation.vllm_client.VLLMServerGenerator`` and never imports vLLM. Routes
(JSON):

* ``GET /health`` -> ``{"status": "ok", "model", "weight_version"}``, or 503 ``{"status": "broken", "reason"}``
  once the engine is unusable (a failed weight load that could not be undone);
* ``POST /generate`` ``{"requests": [{"prompt", "images": [base64 PNG]}], "n", "max_new_tokens", "temperature",
  "top_p", "seed", "logprobs"}`` -> ``{"completions": [[{"token_ids", "text", "finished", "logprobs"}]]}``: the
  same ``VLLMGenerator.generate`` as the colocated mode, so stop tokens, suppression and log-probs agree;
* ``POST /update_weights`` ``{"path", "version"}`` -> ``{"weight_version"}``: loads the ``*.safetensors`` files of
  folder ``path`` (written by the trainer into a folder both processes see) through the worker extension's
  ``load_policy_weights`` (vLLM's in-place ``reload_weights``) on every worker, tensor-parallel ones included.

One engine serves the requests one at a time (a lock): a trainer's ranks may call concurrently.

Hardening: every request is validated and refused with a 4xx whose one-line ``detail`` names the field (``n``,
``max_new_tokens``, ``temperature``, ``top_p``, an undecodable image). ``/update_weights`` reads only folders under
``--weights-root`` (the trainer's ``generation.vllm_sync_dir``; without it the server takes no updates), checks
the folder's ``*.safetensors`` headers against the served model's tensor names and shapes before touching the
engine, and when a load fails anyway it reloads the last good weights (the model folder, or a hard-linked copy
of the last accepted update) so the engine is never left half-loaded; only if that reload fails too does
``/health`` turn to 503. With ``$RUBRICFLOW_ROLLOUT_TOKEN`` set, ``/generate`` and ``/update_weights`` need
``Authorization: Bearer <token>`` (the client sends it from the same variable); binding beyond loopback without
a token is refused. ``--backend transformers`` serves the transformers backend instead of vLLM (tests, debugging).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import binascii
import hmac
import io
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from fastapi import Request  # module level: FastAPI resolves the dependencies' annotations from here
from pydantic import BaseModel, ConfigDict, Field

from models.generation.contract import GenRequest

TOKEN_ENV = "RUBRICFLOW_ROLLOUT_TOKEN"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class Req(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str
    images: list[str] = Field(default_factory=list)  # base64 PNG, in placeholder order


class GenerateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[Req]
    n: int = Field(1, ge=1, le=1024)
    max_new_tokens: int = Field(48, ge=1)
    temperature: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = None
    logprobs: bool = False


class UpdateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1)
    version: int = Field(ge=0)


class WeightsError(ValueError):
    """A weights folder that must not reach the engine (the message names the file and what is wrong)."""


def decode_image(b64: str):
    from PIL import Image

    img = Image.open(io.BytesIO(base64.b64decode(b64, validate=True)))
    img.load()
    return img.convert("RGB")


def tensor_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` from the headers of the ``*.safetensors`` files of ``folder`` (no tensor is read)."""
    from safetensors import safe_open

    folder = Path(folder)
    files = sorted(f for f in folder.glob("*.safetensors") if not f.name.startswith("."))
    if not files:
        raise WeightsError(f"{folder}: no *.safetensors file")
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():
                    shapes[k] = tuple(st.get_slice(k).get_shape())
        except Exception as e:  # safetensors raises its own error types for a bad header
            raise WeightsError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    if not shapes:
        raise WeightsError(f"{folder}: the *.safetensors files hold no tensor")
    return shapes


def check_weights(folder: Path, expected: dict[str, tuple[int, ...]] | None) -> None:
    """Refuse a folder whose tensors do not fit the served model: unknown names (when every name is unknown) or a
    known name with another shape."""
    got = tensor_shapes(folder)
    if not expected:
        return
    known = [k for k in got if k in expected]
    if not known:
        raise WeightsError(f"{folder}: none of its {len(got)} tensors is a tensor of the served model "
                           f"(first: {next(iter(got))!r})")
    for k in known:
        if got[k] != expected[k]:
            raise WeightsError(f"{folder}: tensor {k!r} has shape {list(got[k])}, the served model's has "
                               f"{list(expected[k])}")


def _field(loc) -> str:
    parts = [str(x) for x in loc if x != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def build_app(gen, model: str, *, weights_root: str | Path | None = None, token: str | None = None,
              restore_path: str | Path | None = None):
    """The FastAPI app around ``gen`` (``generate`` and ``load_weights_file``). ``weights_root``: the only folder
    whose subfolders ``/update_weights`` reads (``None``: no updates); ``token``: the bearer token the write and
    generate routes need; ``restore_path``: a weights folder holding the engine's current weights (the model
    folder), reloaded when an update fails half-way."""
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app = FastAPI(title="rubricflow rollout server")
    lock = threading.Lock()
    root = Path(weights_root).resolve() if weights_root else None
    restore = Path(restore_path).resolve() if restore_path and Path(restore_path).is_dir() else None
    expected = None
    if restore is not None:
        try:
            expected = tensor_shapes(restore)
        except WeightsError:
            restore = None
    state: dict = {"weight_version": 0, "broken": None, "good": restore, "kept": None}

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        lines = []
        for e in exc.errors():
            got = e.get("input")
            shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
            lines.append(f"{_field(e.get('loc', ()))}: {e.get('msg')} (got {shown[:80]})")
        return JSONResponse({"detail": "; ".join(lines)}, status_code=422)

    def authorized(request: Request) -> None:
        if not token:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong bearer token (Authorization: Bearer $" + TOKEN_ENV + ")")

    def usable() -> None:
        if state["broken"]:
            raise HTTPException(503, f"the engine is broken ({state['broken']}); restart the rollout server")

    @app.get("/health")
    def health():
        if state["broken"]:
            return JSONResponse({"status": "broken", "reason": state["broken"], "model": model,
                                 "weight_version": state["weight_version"]}, status_code=503)
        return {"status": "ok", "model": model, "weight_version": state["weight_version"]}

    @app.post("/generate", dependencies=[Depends(authorized)])
    def generate(body: GenerateBody):
        reqs = []
        for i, r in enumerate(body.requests):
            images = []
            for j, b in enumerate(r.images):
                try:
                    images.append(decode_image(b))
                except (binascii.Error, ValueError, OSError) as e:
                    raise HTTPException(400, f"requests[{i}].images[{j}]: not a base64-encoded image "
                                             f"({type(e).__name__}: {str(e)[:120]})") from None
            reqs.append(GenRequest(r.prompt, images))
        with lock:
            usable()
            try:
                outs = gen.generate(reqs, n=body.n, max_new_tokens=body.max_new_tokens,
                                    temperature=body.temperature, top_p=body.top_p, seed=body.seed,
                                    logprobs=body.logprobs)
            except Exception as e:
                raise HTTPException(500, f"generate failed: {type(e).__name__}: {str(e)[:300]}") from None
        return {"completions": [[c.__dict__ for c in row] for row in outs]}

    def keep(folder: Path) -> Path:
        """A private copy of an accepted update (hard links where the filesystem allows), so the trainer deleting
        its folder never takes the last good weights with it."""
        base = root if root is not None and os.access(root, os.W_OK) else Path(tempfile.gettempdir())
        dst = Path(tempfile.mkdtemp(prefix=".rollout-server-kept-", dir=base))
        for f in folder.glob("*.safetensors"):
            try:
                os.link(f, dst / f.name)
            except OSError:
                shutil.copy2(f, dst / f.name)
        return dst

    @app.post("/update_weights", dependencies=[Depends(authorized)])
    def update_weights(body: UpdateBody):
        if root is None:
            raise HTTPException(403, "update_weights: this server takes no weight updates (start it with "
                                     "--weights-root DIR, the trainer's generation.vllm_sync_dir)")
        path = Path(body.path)
        real = (path if path.is_absolute() else root / path).resolve()
        if real == root or root not in real.parents:
            raise HTTPException(403, f"update_weights: path {body.path!r} is outside the weights root")
        if not real.is_dir():
            raise HTTPException(400, f"update_weights: {body.path} is not a folder this server can read (the "
                                     "trainer and the server must share generation.vllm_sync_dir)")
        try:
            check_weights(real, expected)
        except WeightsError as e:
            raise HTTPException(400, f"update_weights: {e}") from None
        with lock:
            usable()
            try:
                gen.load_weights_file(str(real))
            except Exception as e:
                why = f"{type(e).__name__}: {str(e)[:200]}"
                good = state["good"]
                try:
                    if good is None:
                        raise RuntimeError("no copy of the previous weights to reload")
                    gen.load_weights_file(str(good))
                except Exception as e2:
                    state["broken"] = (f"loading {body.path} failed ({why}) and reloading the previous weights "
                                       f"failed too ({type(e2).__name__}: {str(e2)[:200]})")
                    raise HTTPException(500, f"update_weights: {state['broken']}") from None
                raise HTTPException(422, f"update_weights: loading {body.path} failed ({why}); the weights of "
                                         f"version {state['weight_version']} are restored") from None
            kept = keep(real)
            if state["kept"] is not None:
                shutil.rmtree(state["kept"], ignore_errors=True)
            state["kept"] = state["good"] = kept
            state["weight_version"] = body.version
        return {"weight_version": body.version}

    def _cleanup():
        if state["kept"] is not None:
            shutil.rmtree(state["kept"], ignore_errors=True)

    atexit.register(_cleanup)
    return app


def build_generator(args):
    if args.backend == "transformers":
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from models.generation.hf import TransformersGenerator

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        return TransformersGenerator(model, AutoTokenizer.from_pretrained(args.model))
    from models.generation.vllm_colocated import VLLMGenerator

    return VLLMGenerator(args.model, dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization,
                         tensor_parallel_size=args.tensor_parallel_size, max_model_len=args.max_model_len,
                         enforce_eager=args.enforce_eager, seed=args.seed, in_process=args.tensor_parallel_size == 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model folder (Hugging Face format) or id")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--weights-root", default=None,
                    help="the only folder whose subfolders /update_weights loads (generation.vllm_sync_dir)")
    ap.add_argument("--backend", choices=["vllm", "transformers"], default="vllm")
    ap.add_argument("--dtype", default="auto", help="vLLM dtype (float32 on CPU)")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    token = os.environ.get(TOKEN_ENV) or None
    if args.host not in LOOPBACK and not token:
        sys.exit(f"rollout server: binding {args.host} (beyond loopback) needs a token: set ${TOKEN_ENV}")
    if args.weights_root and not Path(args.weights_root).is_dir():
        sys.exit(f"rollout server: --weights-root {args.weights_root} is not a folder")
    from models.children import port_in_use
    from models.errors import BackendUnavailable

    if port_in_use("127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host, args.port):
        sys.exit(f"rollout server: port {args.port} on {args.host} is already in use; stop what listens there or "
                 "choose another --port")
    import uvicorn

    try:
        gen = build_generator(args)
    except BackendUnavailable as e:
        sys.exit(f"rollout server: {e}")
    app = build_app(gen, args.model, weights_root=args.weights_root, token=token, restore_path=args.model)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
