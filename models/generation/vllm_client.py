"""The ``vllm`` backend through the rollout server (``generation.vllm_mode: server``): the trainer's side, HTTP
generation and weight sync.

``VLLMServerGenerator`` is a ``GenerationBackend`` that imports neither vLLM nor anything of its environment:

* ``generate`` posts the prompts (images as base64 PNG) to ``models.generation.vllm_server`` and returns its
  ``Completion``s (same stop-token contract, same log-probs as the colocated engine);
* ``sync_weights(model)`` is the update channel: every rank streams the parameters
  (``models.generation.zero3.full_parameters``, which gathers ZeRO-3 partitions one at a time), rank 0 writes them
  as one ``model.safetensors`` into ``<sync_dir>/v<version>/`` (written under a temporary name, then renamed), posts
  ``/update_weights`` and deletes the previous version; the other ranks wait at a barrier, so no rank samples from
  stale weights. ``sync_dir`` must be visible to the server at the same path (a shared volume; ``/dev/shm`` on one
  host). On GPUs a collective channel (NCCL) would avoid the file; it is not wired here.

An unreachable server, or one whose ``/health`` says its engine is broken, raises ``BackendUnavailable`` naming its
URL. With ``$RUBRICFLOW_ROLLOUT_TOKEN`` set, every request carries it as a bearer token.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
from pathlib import Path

import torch

from models.errors import BackendUnavailable
from models.generation.contract import Completion, GenRequest
from models.generation.zero3 import full_parameters


def encode_image(img) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _dist():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


class VLLMServerGenerator:
    name = "vllm-server"

    def __init__(self, base_url: str, processor, sync_dir: str | Path, timeout_s: float = 600.0):
        import httpx

        if not base_url:
            raise ValueError("generation.vllm_mode=server needs generation.vllm_server_url")
        if not str(sync_dir):
            raise ValueError("generation.vllm_mode=server needs generation.vllm_sync_dir")
        self.base_url = base_url.rstrip("/")
        self.processor = processor
        self.sync_dir = Path(sync_dir).resolve()
        token = os.environ.get("RUBRICFLOW_ROLLOUT_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)
        try:
            res = self.http.get("/health", timeout=10)
            if res.status_code == 503:
                raise BackendUnavailable(f"generation.vllm_mode=server: the rollout server at {self.base_url} is "
                                         f"broken ({res.json().get('reason')}); restart it")
            info = res.raise_for_status().json()
        except httpx.HTTPError as e:
            raise BackendUnavailable(
                f"generation.vllm_mode=server: no rollout server answers at {self.base_url} ({type(e).__name__}: "
                f"{e}); start one with `python -m models.generation.vllm_server --model DIR` in the vLLM environment"
            ) from e
        self.model = info.get("model")
        self.version = int(info.get("weight_version", 0))

    def generate(self, requests: list[GenRequest], n: int = 1, max_new_tokens: int = 48, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, logprobs: bool = False) -> list[list[Completion]]:
        if not requests:
            return []
        body = {
            "requests": [{"prompt": r.prompt, "images": [encode_image(im) for im in r.images]} for r in requests],
            "n": n, "max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "seed": seed,
            "logprobs": logprobs,
        }
        res = self.http.post("/generate", json=body)
        if res.status_code != 200:
            raise RuntimeError(f"rollout server {self.base_url}/generate answered {res.status_code}: {res.text[:500]}")
        return [[Completion(**c) for c in row] for row in res.json()["completions"]]

    def sync_weights(self, model: torch.nn.Module) -> None:
        dist = _dist()
        rank = dist.get_rank() if dist is not None else 0
        tensors = {}
        for name, t in full_parameters(model):  # every rank iterates (ZeRO-3 gathers are collectives)
            if rank == 0:
                tensors[name] = t.detach().to("cpu").contiguous().clone()
        if rank == 0:
            from safetensors.torch import save_file

            version = self.version + 1
            final = self.sync_dir / f"v{version:08d}"
            tmp = self.sync_dir / f".tmp-v{version:08d}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            del tensors
            res = self.http.post("/update_weights", json={"path": str(final), "version": version})
            if res.status_code != 200:
                raise RuntimeError(f"rollout server {self.base_url}/update_weights answered {res.status_code}: "
                                   f"{res.text[:500]}")
            for old in self.sync_dir.glob("v*"):
                if old != final:
                    shutil.rmtree(old, ignore_errors=True)
            self.version = version
        if dist is not None:
            dist.barrier()
            v = [self.version]
            dist.broadcast_object_list(v, src=0)
            self.version = v[0]
