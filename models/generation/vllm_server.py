"""The rollout server (``generation.vllm_mode: server``): vLLM in its own environment, generation over HTTP.

Run it where vLLM is installed (on CPU the project's ``.venv-vllm``), from the project root::

    PYTHONPATH=. .venv-vllm/bin/python -m models.generation.vllm_server --model DIR --port 8001 [--dtype float32]
        [--max-model-len N] [--enforce-eager] [--tensor-parallel-size N] [--gpu-memory-utilization F]
        [--max-body-mb 64] [--max-requests 4096] [--max-n 1024] [--max-sequences 16384] [--max-new-tokens 16384]
        [--max-prompt-chars 262144] [--max-images 16] [--max-image-pixels 16777216]

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
``max_new_tokens``, ``temperature``, ``top_p``, ``seed``, a prompt that is not valid Unicode, an undecodable
image) and, for a bound, the server option that sets it. Every request has a size and work bound (``Limits``, one
option each): the body (``--max-body-mb``, 413 before it is parsed), the requests of one call (``--max-requests``),
``n`` (``--max-n``), requests x ``n`` (``--max-sequences``), ``max_new_tokens`` (``--max-new-tokens``), the
characters of a prompt (``--max-prompt-chars``), the images of a request (``--max-images``) and the pixels of an
image, read from its header before anything is decoded (``--max-image-pixels``); a text model takes no images.
``/update_weights`` reads only folders under ``--weights-root`` (the trainer's ``generation.vllm_sync_dir``;
without it the server takes no updates). The root is resolved once at start; the folder is opened component by
component from it and its ``*.safetensors`` files by file descriptor, never following a symbolic link (a link,
of a folder or of a file, is refused), and copied into the server's private folder, so that what is checked is
what is loaded, however the path changes afterwards. The copy is checked against the served model's tensor
names, shapes and dtypes (a floating tensor stays floating) and for NaN or infinite values before the engine is
touched; when a load fails anyway the last good weights are reloaded (the model folder, or the private copy of
the last accepted update) so the engine is never left half-loaded; only if that reload fails too does
``/health`` turn to 503. The private copy is removed when the server shuts down (SIGTERM, SIGINT). With
``$RUBRICFLOW_ROLLOUT_TOKEN`` set, ``/generate`` and ``/update_weights`` need ``Authorization: Bearer <token>``
(the client sends it from the same variable); binding beyond loopback needs a strong token (at least
``MIN_TOKEN_CHARS`` characters, not a repeated few). ``--backend transformers`` serves the transformers backend
instead of vLLM (tests, debugging).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import binascii
import errno
import hmac
import io
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import Request  # module level: FastAPI resolves the dependencies' annotations from here
from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.generation.contract import GenRequest

TOKEN_ENV = "RUBRICFLOW_ROLLOUT_TOKEN"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MIN_TOKEN_CHARS = 32  # a token for a bind beyond loopback: at least this long, with at least MIN_TOKEN_DISTINCT
MIN_TOKEN_DISTINCT = 8  # different characters
MAX_INT64 = 2**63 - 1
PATH_MAX = 4096
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}  # safetensors dtypes an update of a floating tensor may use
KEPT_PREFIX = ".rollout-server-kept-"


@dataclass(frozen=True)
class Limits:
    """The size and work bounds of one request; each is the server option of the same name (``--max-...``)."""

    max_body_bytes: int = 64 * 1024**2  # --max-body-mb: a request body (JSON, images as base64 included)
    max_requests: int = 4096  # --max-requests: prompts in one /generate call
    max_n: int = 1024  # --max-n: completions per prompt
    max_sequences: int = 16384  # --max-sequences: prompts x n of one call
    max_new_tokens: int = 16384  # --max-new-tokens: tokens generated per completion
    max_prompt_chars: int = 262144  # --max-prompt-chars: characters of one prompt
    max_images: int = 16  # --max-images: images of one prompt
    max_image_pixels: int = 16 * 1024**2  # --max-image-pixels: width x height of one image


def _unicode_text(v: str) -> str:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate (not valid Unicode text)") from None
    return v


class Req(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str
    images: list[str] = Field(default_factory=list)  # base64 PNG, in placeholder order

    _prompt_text = field_validator("prompt")(_unicode_text)


class GenerateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[Req]
    n: int = Field(1, ge=1)  # upper bounds: Limits (server options)
    max_new_tokens: int = Field(48, ge=1)
    temperature: float = Field(1.0, ge=0.0, allow_inf_nan=False)
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=MAX_INT64)
    logprobs: bool = False


class UpdateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=PATH_MAX)
    version: int = Field(ge=0, le=MAX_INT64)

    @field_validator("path")
    @classmethod
    def _path_text(cls, v: str) -> str:
        if "\x00" in v:
            raise ValueError("holds a NUL character")
        return _unicode_text(v)


class WeightsError(ValueError):
    """A weights folder that must not reach the engine (the message names the file and what is wrong)."""


class ImageRefused(ValueError):
    """An image refused before it is decoded (the message says why)."""


def decode_image(b64: str, max_pixels: int | None = None):
    """The RGB image of a base64 string; with ``max_pixels``, an image whose header announces more pixels is refused
    (``ImageRefused``) before any pixel is decoded."""
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(base64.b64decode(b64, validate=True)))
    except Image.DecompressionBombError as e:  # PIL's own bound (above twice its MAX_IMAGE_PIXELS)
        m = re.search(r"\((\d+) pixels\)", str(e))
        raise ImageRefused(f"{m.group(1) if m else 'too many'} pixels, more than --max-image-pixels="
                           f"{max_pixels}") from None
    if max_pixels is not None and img.width * img.height > max_pixels:
        raise ImageRefused(f"{img.width}x{img.height} = {img.width * img.height} pixels, more than "
                           f"--max-image-pixels={max_pixels}")
    img.load()
    return img.convert("RGB")


def tensor_info(folder: str | Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{name: (shape, dtype)}`` from the headers of the ``*.safetensors`` files of ``folder`` (no tensor is
    read)."""
    from safetensors import safe_open

    folder = Path(folder)
    files = sorted(f for f in folder.glob("*.safetensors") if not f.name.startswith("."))
    if not files:
        raise WeightsError(f"{folder}: no *.safetensors file")
    info: dict[str, tuple[tuple[int, ...], str]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as st:
                for k in st.keys():
                    sl = st.get_slice(k)
                    info[k] = (tuple(sl.get_shape()), str(sl.get_dtype()))
        except Exception as e:  # safetensors raises its own error types for a bad header
            raise WeightsError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    if not info:
        raise WeightsError(f"{folder}: the *.safetensors files hold no tensor")
    return info


def tensor_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` from the headers of the ``*.safetensors`` files of ``folder`` (no tensor is read)."""
    return {k: shape for k, (shape, _) in tensor_info(folder).items()}


def _finite(folder: Path, names: list[str]) -> None:
    """Refuse a floating tensor holding NaN or infinite values (one tensor in memory at a time)."""
    import torch
    from safetensors import safe_open

    wanted = set(names)
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():
                if k in wanted and not bool(torch.isfinite(st.get_tensor(k)).all()):
                    raise WeightsError(f"{folder}: tensor {k!r} holds NaN or infinite values")


def check_weights(folder: Path, expected: dict | None, label: str | None = None) -> None:
    """Refuse a folder whose tensors do not fit the served model: unknown names (when every name is unknown), a
    known name with another shape, an integer dtype where the model's is floating (``expected``: ``{name: shape}``
    or ``{name: (shape, dtype)}``), or NaN / infinite values. ``label`` names the folder in messages."""
    where = label or str(folder)
    try:
        got = tensor_info(folder)
    except WeightsError as e:  # name the folder as the caller knows it, not the private copy
        raise WeightsError(str(e).replace(str(folder), where)) from None
    floating = [k for k, (_, dt) in got.items() if dt in FLOAT_DTYPES]
    if expected:
        known = [k for k in got if k in expected]
        if not known:
            raise WeightsError(f"{where}: none of its {len(got)} tensors is a tensor of the served model "
                               f"(first: {next(iter(got))!r})")
        for k in known:
            want = expected[k]
            want_shape, want_dtype = (want, None) if not want or isinstance(want[0], int) else want
            shape, dtype = got[k]
            if shape != tuple(want_shape):
                raise WeightsError(f"{where}: tensor {k!r} has shape {list(shape)}, the served model's has "
                                   f"{list(want_shape)}")
            if want_dtype is not None and dtype != want_dtype and not (
                    want_dtype in FLOAT_DTYPES and dtype in FLOAT_DTYPES):
                raise WeightsError(f"{where}: tensor {k!r} has dtype {dtype}, the served model's is {want_dtype}"
                                   + (" (a floating dtype is needed)" if want_dtype in FLOAT_DTYPES else ""))
    try:
        _finite(folder, floating)
    except WeightsError as e:
        raise WeightsError(str(e).replace(str(folder), where, 1)) from None


_O_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # a FIFO must not block


def _relative_parts(text: str, roots: list[str]) -> list[str] | None:
    """The components of ``text`` below one of ``roots`` (lexically: no link is followed), or None when it is not
    strictly inside one (outside, the root itself, or holding ``..``)."""
    if os.path.isabs(text):
        norm = os.path.normpath(text)
        for r in roots:
            if norm.startswith(r.rstrip(os.sep) + os.sep):
                text = norm[len(r.rstrip(os.sep)) + 1:]
                break
        else:
            return None
    parts = [p for p in text.split(os.sep) if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return parts


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def copy_update(root_fd: int, parts: list[str], dst: Path, shown: str) -> None:
    """Copy the ``*.safetensors`` files of folder ``parts`` (below the open root ``root_fd``) into ``dst``: every
    component and file is opened from its parent's descriptor without following a symbolic link, so the files
    copied are the ones inside the root whatever the path becomes meanwhile. Raises ``PermissionError`` (a link:
    outside the root), ``FileNotFoundError`` / ``NotADirectoryError`` (no such folder) or ``WeightsError``."""
    fds = []
    try:
        cur = root_fd
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, _O_DIR, dir_fd=cur)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, cur):
                    raise PermissionError(f"{'/'.join(parts[:i + 1])} is a symbolic link") from None
                raise
            fds.append(nxt)
            cur = nxt
        names = sorted(n for n in os.listdir(cur) if n.endswith(".safetensors") and not n.startswith("."))
        if not names:
            raise WeightsError(f"{shown}: no *.safetensors file")
        for name in names:
            try:
                fd = os.open(name, _O_FILE, dir_fd=cur)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise WeightsError(f"{shown}/{name} is a symbolic link: refused (the weights must be files "
                                       "inside the weights root)") from None
                raise WeightsError(f"{shown}/{name}: cannot be opened ({e.strerror})") from None
            with os.fdopen(fd, "rb") as src:
                if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                    raise WeightsError(f"{shown}/{name} is not a regular file")
                with open(dst / name, "xb") as out:
                    shutil.copyfileobj(src, out, 1024 * 1024)
    finally:
        for fd in fds:
            os.close(fd)


class BodyLimit:
    """ASGI middleware: a request body larger than ``max_bytes`` (announced or streamed) is answered 413 before the
    app parses it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def _refuse(self, send) -> None:
        detail = (f"body: larger than --max-body-mb={self.max_bytes / 1024**2:g} ({self.max_bytes} bytes); send "
                  "fewer prompts per call")
        payload = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_bytes:
            return await self._refuse(send)
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            body = msg.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                return await self._refuse(send)
            chunks.append(body)
            more = msg.get("more_body", False)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


def takes_images(model: str | Path) -> bool:
    """Whether the model folder's ``config.json`` describes a vision-language model (True when unknown: the
    engine decides)."""
    cfg = Path(model) / "config.json"
    try:
        return "vision_config" in json.loads(cfg.read_text())
    except (OSError, ValueError):
        return True


def token_problem(token: str | None) -> str | None:
    """Why ``token`` is too weak for a bind beyond loopback, or None."""
    if not token:
        return "needs a token"
    if len(token) < MIN_TOKEN_CHARS or len(set(token)) < MIN_TOKEN_DISTINCT:
        return (f"needs a strong token (at least {MIN_TOKEN_CHARS} characters, {MIN_TOKEN_DISTINCT} different; "
                "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return None


def _field(loc) -> str:
    parts = [str(x) for x in loc if x != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def build_app(gen, model: str, *, weights_root: str | Path | None = None, token: str | None = None,
              restore_path: str | Path | None = None, limits: Limits | None = None,
              accepts_images: bool | None = None):
    """The FastAPI app around ``gen`` (``generate`` and ``load_weights_file``). ``weights_root``: the only folder
    whose subfolders ``/update_weights`` reads (``None``: no updates); ``token``: the bearer token the write and
    generate routes need; ``restore_path``: a weights folder holding the engine's current weights (the model
    folder), reloaded when an update fails half-way; ``limits``: the request bounds (``Limits()``);
    ``accepts_images``: whether the model takes images (None: read from the model folder's config)."""
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    lim = limits or Limits()
    images_ok = takes_images(restore_path or model) if accepts_images is None else accepts_images
    lock = threading.Lock()
    roots: list[str] = []
    root = root_fd = None
    if weights_root:
        root = Path(weights_root).resolve()  # resolved once: updates are opened from this descriptor
        root_fd = os.open(root, _O_DIR)
        roots = [str(root)] + ([os.path.abspath(weights_root)] if os.path.abspath(weights_root) != str(root) else [])
    restore = Path(restore_path).resolve() if restore_path and Path(restore_path).is_dir() else None
    expected = None
    if restore is not None:
        try:
            expected = tensor_info(restore)
        except WeightsError:
            restore = None
    state: dict = {"weight_version": 0, "broken": None, "good": restore, "kept": None}

    def _cleanup():
        kept, state["kept"] = state["kept"], None
        if kept is not None:
            shutil.rmtree(kept, ignore_errors=True)

    @asynccontextmanager
    async def lifespan(app):
        yield
        _cleanup()  # graceful shutdown (SIGTERM, SIGINT): the private copy of the last weights goes

    app = FastAPI(title="rubricflow rollout server", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=lim.max_body_bytes)

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

    def bounded(body: GenerateBody) -> None:
        """Refuse a call beyond the work bounds (``Limits``), naming the field and the option."""
        k = len(body.requests)
        if k > lim.max_requests:
            raise HTTPException(422, f"requests: {k} prompts in one call, more than --max-requests="
                                     f"{lim.max_requests}; split the call")
        if body.n > lim.max_n:
            raise HTTPException(422, f"n: {body.n} completions per prompt, more than --max-n={lim.max_n}")
        if k * body.n > lim.max_sequences:
            raise HTTPException(422, f"n: {k} prompts x n={body.n} = {k * body.n} sequences, more than "
                                     f"--max-sequences={lim.max_sequences}; split the call")
        if body.max_new_tokens > lim.max_new_tokens:
            raise HTTPException(422, f"max_new_tokens: {body.max_new_tokens}, more than --max-new-tokens="
                                     f"{lim.max_new_tokens}")
        for i, r in enumerate(body.requests):
            if len(r.prompt) > lim.max_prompt_chars:
                raise HTTPException(422, f"requests[{i}].prompt: {len(r.prompt)} characters, more than "
                                         f"--max-prompt-chars={lim.max_prompt_chars}")
            if len(r.images) > lim.max_images:
                raise HTTPException(422, f"requests[{i}].images: {len(r.images)} images, more than --max-images="
                                         f"{lim.max_images}")

    @app.post("/generate", dependencies=[Depends(authorized)])
    def generate(body: GenerateBody):
        from PIL import Image

        bounded(body)
        reqs = []
        for i, r in enumerate(body.requests):
            images = []
            for j, b in enumerate(r.images):
                field = f"requests[{i}].images[{j}]"
                try:
                    raw = base64.b64decode(b, validate=True)
                    Image.open(io.BytesIO(raw)).close()  # the header only: is it an image at all
                except Image.DecompressionBombError:
                    pass  # an image, and too large: refused below, with the text-model check first
                except (binascii.Error, ValueError, OSError) as e:
                    raise HTTPException(400, f"{field}: not a base64-encoded image "
                                             f"({type(e).__name__}: {str(e)[:120]})") from None
                if not images_ok:
                    raise HTTPException(400, f"{field}: the served model {model} takes no images (a text model)")
                try:
                    images.append(decode_image(b, lim.max_image_pixels))
                except ImageRefused as e:
                    raise HTTPException(400, f"{field}: {e}") from None
                except Exception as e:  # a decoder error on a damaged image
                    raise HTTPException(400, f"{field}: not a decodable image "
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

    def private_copy(parts: list[str], shown: str) -> Path:
        """The server's own copy of the update's files (``<private folder>/<update's name>/``), opened without
        following links from the root's descriptor: what is checked and loaded, whatever the path becomes
        meanwhile; the last accepted one is kept so that the trainer deleting its folder never takes the last good
        weights with it."""
        base = root if os.access(root, os.W_OK) else Path(tempfile.gettempdir())
        dst = Path(tempfile.mkdtemp(prefix=KEPT_PREFIX, dir=base))
        folder = dst / parts[-1]
        try:
            folder.mkdir()
            copy_update(root_fd, parts, folder, shown)
            check_weights(folder, expected, label=shown)
        except PermissionError as e:
            shutil.rmtree(dst, ignore_errors=True)
            raise HTTPException(403, f"update_weights: path {shown!r} is outside the weights root ({e})") from None
        except (FileNotFoundError, NotADirectoryError):
            shutil.rmtree(dst, ignore_errors=True)
            raise HTTPException(400, f"update_weights: {shown} is not a folder this server can read (the "
                                     "trainer and the server must share generation.vllm_sync_dir)") from None
        except WeightsError as e:
            shutil.rmtree(dst, ignore_errors=True)
            raise HTTPException(400, f"update_weights: {e}") from None
        except BaseException:
            shutil.rmtree(dst, ignore_errors=True)
            raise
        return folder

    @app.post("/update_weights", dependencies=[Depends(authorized)])
    def update_weights(body: UpdateBody):
        if root is None:
            raise HTTPException(403, "update_weights: this server takes no weight updates (start it with "
                                     "--weights-root DIR, the trainer's generation.vllm_sync_dir)")
        parts = _relative_parts(body.path, roots)
        if parts is None:
            raise HTTPException(403, f"update_weights: path {body.path!r} is outside the weights root")
        staged = private_copy(parts, body.path)
        with lock:
            try:
                usable()
            except HTTPException:
                shutil.rmtree(staged.parent, ignore_errors=True)
                raise
            try:
                gen.load_weights_file(str(staged))
            except Exception as e:
                shutil.rmtree(staged.parent, ignore_errors=True)
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
            if state["kept"] is not None:
                shutil.rmtree(state["kept"], ignore_errors=True)
            state["kept"], state["good"] = staged.parent, staged
            state["weight_version"] = body.version
        return {"weight_version": body.version}

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
    d = Limits()
    ap.add_argument("--max-body-mb", type=float, default=d.max_body_bytes / 1024**2,
                    help="largest request body, in MiB (images as base64 included); larger: 413")
    ap.add_argument("--max-requests", type=int, default=d.max_requests, help="prompts in one /generate call")
    ap.add_argument("--max-n", type=int, default=d.max_n, help="completions per prompt")
    ap.add_argument("--max-sequences", type=int, default=d.max_sequences, help="prompts x n of one call")
    ap.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="tokens generated per completion")
    ap.add_argument("--max-prompt-chars", type=int, default=d.max_prompt_chars, help="characters of one prompt")
    ap.add_argument("--max-images", type=int, default=d.max_images, help="images of one prompt")
    ap.add_argument("--max-image-pixels", type=int, default=d.max_image_pixels,
                    help="width x height of one image (read from its header before decoding)")
    args = ap.parse_args(argv)
    limits = Limits(max_body_bytes=int(args.max_body_mb * 1024**2), max_requests=args.max_requests,
                    max_n=args.max_n, max_sequences=args.max_sequences, max_new_tokens=args.max_new_tokens,
                    max_prompt_chars=args.max_prompt_chars, max_images=args.max_images,
                    max_image_pixels=args.max_image_pixels)
    small = [k for k, v in vars(limits).items() if v < 1]
    if small:
        sys.exit(f"rollout server: --{small[0].replace('_', '-').replace('bytes', 'mb')} must be positive")

    token = os.environ.get(TOKEN_ENV) or None
    weak = token_problem(token) if args.host not in LOOPBACK else None
    if weak:
        sys.exit(f"rollout server: binding {args.host} (beyond loopback) {weak}: set ${TOKEN_ENV}")
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
    app = build_app(gen, args.model, weights_root=args.weights_root, token=token, restore_path=args.model,
                    limits=limits)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
