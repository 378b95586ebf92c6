"""The rollout server's request validation, weight-update discipline, health and token
(models.generation.vllm_server around the transformers backend, in process: no vLLM needed)."""

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from models.generation.vllm_server import build_app, build_generator

PROJECT_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from rubricflow.testing.toy_task import save_toy_policy

    return save_toy_policy(tmp_path_factory.mktemp("rollout-server") / "model")


def _gen(model_dir):
    return build_generator(argparse.Namespace(backend="transformers", model=str(model_dir)))


def _client(app):
    from fastapi.testclient import TestClient

    return TestClient(app, raise_server_exceptions=False)


def _body(gen, **kw):
    from rubricflow.testing.toy_task import chat_prompt

    body = {"requests": [{"prompt": chat_prompt(gen.tokenizer, "Say yes please.")}], "n": 1, "max_new_tokens": 6,
            "temperature": 0.0}
    body.update(kw)
    return body


def _greedy(client, gen):
    res = client.post("/generate", json=_body(gen))
    assert res.status_code == 200, res.text
    return [c["token_ids"] for c in res.json()["completions"][0]]


def _write_weights(gen, folder: Path, scale: float = 0.0, seed: int = 1) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    tensors = {n: (p.detach() + scale * torch.randn(p.shape, generator=g)).contiguous().clone()
               for n, p in gen.model.named_parameters()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _png() -> str:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("change, field", [
    ({"n": 0}, "n"),
    ({"n": -3}, "n"),
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"requests": [{"prompt": "x", "images": ["not base64 !!"]}]}, "requests[0].images[0]"),
    ({"requests": [{"prompt": "x", "images": [base64.b64encode(b"not an image").decode()]}]},
     "requests[0].images[0]"),
    ({"requests": [{"prompt": 3}]}, "requests[0].prompt"),
    ({"requests": [{"prompt": "x"}], "stream": True}, "stream"),
])
def test_a_bad_generate_request_is_refused_with_a_4xx_naming_the_field_and_the_server_keeps_serving(
        model_dir, change, field):
    gen = _gen(model_dir)
    client = _client(build_app(gen, str(model_dir)))
    before = _greedy(client, gen)
    res = client.post("/generate", json=_body(gen, **change))
    assert res.status_code in (400, 422), res.text
    detail = res.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail
    assert detail.startswith(field), detail
    assert _greedy(client, gen) == before


def test_a_valid_image_is_decoded(model_dir):
    from models.generation.vllm_server import decode_image

    assert decode_image(_png()).size == (8, 8)


def test_update_weights_reads_only_folders_under_the_weights_root(model_dir, tmp_path):
    gen = _gen(model_dir)
    root = tmp_path / "sync"
    root.mkdir()
    outside = _write_weights(gen, tmp_path / "elsewhere", scale=1.0)
    (root / "link").symlink_to(outside)
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    before = _greedy(client, gen)
    for path in [str(outside), str(root / ".." / "elsewhere"), "../elsewhere", str(root), str(root / "link")]:
        res = client.post("/update_weights", json={"path": path, "version": 1})
        assert res.status_code == 403, (path, res.text)
        assert "outside the weights root" in res.json()["detail"]
    assert _greedy(client, gen) == before
    assert client.get("/health").json()["weight_version"] == 0
    no_root = _client(build_app(gen, str(model_dir)))
    res = no_root.post("/update_weights", json={"path": str(outside), "version": 1})
    assert res.status_code == 403 and "--weights-root" in res.json()["detail"]


def test_a_folder_without_usable_weights_is_refused_before_the_engine_is_touched(model_dir, tmp_path):
    """The attack that left the engine with meta tensors: a folder with no weights (and variants: a corrupt
    file, a tensor of the wrong shape, tensors of another model). Each is a 400 naming the folder or file; the
    engine keeps its weights, /health stays truthful and a later valid update still works."""
    from safetensors.torch import save_file

    gen = _gen(model_dir)
    root = tmp_path / "sync"
    client = _client(build_app(gen, str(model_dir), weights_root=root.mkdir() or root, restore_path=model_dir))
    before = _greedy(client, gen)
    (root / "empty").mkdir()
    (root / "corrupt").mkdir()
    (root / "corrupt" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    shapes = _write_weights(gen, root / "shape")
    name = next(n for n, _ in gen.model.named_parameters())
    save_file({name: torch.zeros(3, 3)}, str(shapes / "model.safetensors"))
    (root / "other").mkdir()
    save_file({"some.other.weight": torch.zeros(2)}, str(root / "other" / "model.safetensors"))
    for sub, words in [("empty", "no *.safetensors"), ("corrupt", "not a readable safetensors file"),
                       ("shape", f"tensor '{name}' has shape [3, 3]"), ("other", "none of its 1 tensors"),
                       ("missing", "is not a folder")]:
        res = client.post("/update_weights", json={"path": str(root / sub), "version": 1})
        assert res.status_code == 400, (sub, res.text)
        assert words in res.json()["detail"], res.json()["detail"]
        assert client.get("/health").json() == {"status": "ok", "model": str(model_dir), "weight_version": 0}
        assert _greedy(client, gen) == before
    good = _write_weights(gen, root / "v1", scale=1.0)
    assert client.post("/update_weights", json={"path": str(good), "version": 1}).status_code == 200
    assert client.get("/health").json()["weight_version"] == 1
    assert _greedy(client, gen) != before  # the new weights serve


class FailingLoads:
    """The transformers generator whose loads of folders named ``bad*`` zero the first half of the parameters,
    then fail (a load that dies half-way); with ``break_restore`` every later load fails the same way."""

    def __init__(self, gen, break_restore=False):
        self.gen, self.break_restore, self.failed = gen, break_restore, False
        self.tokenizer, self.model = gen.tokenizer, gen.model

    def generate(self, *a, **kw):
        return self.gen.generate(*a, **kw)

    def load_weights_file(self, path):
        if Path(path).name.startswith("bad") or (self.break_restore and self.failed):
            self.failed = True
            params = list(self.gen.model.parameters())
            with torch.no_grad():
                for p in params[: len(params) // 2]:
                    p.zero_()
            raise RuntimeError("device lost half-way")
        self.gen.load_weights_file(path)


def test_a_load_failing_half_way_restores_the_last_good_weights_even_after_the_trainer_deleted_them(
        model_dir, tmp_path):
    gen = FailingLoads(_gen(model_dir))
    root = tmp_path / "sync"
    root.mkdir()
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    v1 = _write_weights(gen, root / "v1", scale=1.0)
    assert client.post("/update_weights", json={"path": str(v1), "version": 1}).status_code == 200
    after_v1 = _greedy(client, gen)
    state_v1 = {k: v.clone() for k, v in gen.model.state_dict().items()}
    shutil.rmtree(v1)  # the client deletes the previous version after a sync
    bad = _write_weights(gen, root / "bad2", scale=1.0, seed=2)
    res = client.post("/update_weights", json={"path": str(bad), "version": 2})
    assert res.status_code == 422
    assert "device lost half-way" in res.json()["detail"] and "version 1 are restored" in res.json()["detail"]
    assert all(torch.equal(state_v1[k], v) for k, v in gen.model.state_dict().items())
    assert client.get("/health").json() == {"status": "ok", "model": str(model_dir), "weight_version": 1}
    assert _greedy(client, gen) == after_v1
    v3 = _write_weights(gen, root / "v3", scale=1.0, seed=3)
    assert client.post("/update_weights", json={"path": str(v3), "version": 3}).json() == {"weight_version": 3}
    kept = [p for p in root.iterdir() if p.name.startswith(".rollout-server-kept-")]
    assert len(kept) == 1  # one private copy of the last good weights, the previous one removed


def test_an_engine_that_cannot_be_restored_reports_broken_and_refuses_work(model_dir, tmp_path):
    gen = FailingLoads(_gen(model_dir), break_restore=True)
    root = tmp_path / "sync"
    root.mkdir()
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    bad = _write_weights(gen, root / "bad", scale=1.0)
    res = client.post("/update_weights", json={"path": str(bad), "version": 1})
    assert res.status_code == 500 and "reloading the previous weights failed too" in res.json()["detail"]
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "broken"
    res = client.post("/generate", json=_body(gen))
    assert res.status_code == 503 and "restart the rollout server" in res.json()["detail"]


def test_the_client_refuses_a_broken_server_by_name(model_dir, tmp_path, monkeypatch):
    import httpx

    from models.errors import BackendUnavailable
    from models.generation.vllm_client import VLLMServerGenerator

    gen = FailingLoads(_gen(model_dir), break_restore=True)
    (tmp_path / "sync").mkdir()
    app = build_app(gen, str(model_dir), weights_root=tmp_path / "sync", restore_path=model_dir)
    client = _client(app)
    client.post("/update_weights", json={"path": str(_write_weights(gen, tmp_path / "sync" / "bad")), "version": 1})
    monkeypatch.setattr(httpx, "Client", lambda **kw: client)
    with pytest.raises(BackendUnavailable, match="is broken .*restart it"):
        VLLMServerGenerator("http://testserver", gen.tokenizer, tmp_path / "sync")


def test_a_token_guards_generate_and_update_but_not_health(model_dir, tmp_path):
    gen = _gen(model_dir)
    client = _client(build_app(gen, str(model_dir), weights_root=tmp_path, token="s3cret"))
    assert client.get("/health").status_code == 200
    for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}]:
        assert client.post("/generate", json=_body(gen), headers=headers).status_code == 401
        assert client.post("/update_weights", json={"path": str(tmp_path / "x"), "version": 1},
                           headers=headers).status_code == 401
    res = client.post("/generate", json=_body(gen), headers={"Authorization": "Bearer s3cret"})
    assert res.status_code == 200
    assert "s3cret" not in client.post("/generate", json=_body(gen)).text


def test_binding_beyond_loopback_without_a_token_is_refused(model_dir, monkeypatch):
    from models.generation.vllm_server import main

    monkeypatch.delenv("RUBRICFLOW_ROLLOUT_TOKEN", raising=False)
    with pytest.raises(SystemExit, match=r"binding 0\.0\.0\.0 \(beyond loopback\) needs a token"):
        main(["--model", str(model_dir), "--host", "0.0.0.0", "--backend", "transformers"])


def test_a_taken_port_and_a_missing_vllm_are_one_line_errors(model_dir, monkeypatch):
    from models.generation.vllm_server import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SystemExit, match=rf"rollout server: port {port} on 127.0.0.1 is already in use"):
            main(["--model", str(model_dir), "--port", str(port), "--backend", "transformers"])
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails here as where it is not installed
    with pytest.raises(SystemExit) as e:
        main(["--model", str(model_dir), "--port", str(_free_port())])
    assert str(e.value).startswith("rollout server: ") and "`vllm` package is not importable" in str(e.value)
    assert "\n" not in str(e.value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _server_process(model_dir, root):
    """The rollout server as a child process (its own session) on a free loopback port, once ``/health`` answers
    200; killed afterwards if it is still running. Yields ``(process, port)``."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    env.pop("RUBRICFLOW_ROLLOUT_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "models.generation.vllm_server", "--model", str(model_dir),
                             "--backend", "transformers", "--port", str(port), "--weights-root", str(root)],
                            cwd=PROJECT_ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.5)
        yield proc, port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.slow
def test_the_server_exits_cleanly_on_sigterm(model_dir, tmp_path):
    with _server_process(model_dir, tmp_path) as (proc, port):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn shuts down gracefully, then re-raises the signal
        with socket.socket() as s:
            # the port is free again for a new server (which, like uvicorn, sets SO_REUSEADDR: the closed health
            # connection may linger in TIME_WAIT, which holds no listener)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))


# ------------------------------------------------------------------ issue 37, item 4: weights that escape the root


def test_a_file_symlink_inside_a_folder_under_the_root_is_refused(model_dir, tmp_path):
    """The attack: ``root/v1/`` a real folder whose ``model.safetensors`` is a symlink to weights outside the root;
    the folder check passed and the outside file was loaded."""
    gen = _gen(model_dir)
    root = tmp_path / "sync"
    root.mkdir()
    outside = _write_weights(gen, tmp_path / "elsewhere", scale=1.0)
    (root / "v1").mkdir()
    (root / "v1" / "model.safetensors").symlink_to(outside / "model.safetensors")
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    before = _greedy(client, gen)
    res = client.post("/update_weights", json={"path": str(root / "v1"), "version": 1})
    assert res.status_code in (400, 403), res.text
    assert "symbolic link" in res.json()["detail"] and "model.safetensors" in res.json()["detail"]
    assert _greedy(client, gen) == before and client.get("/health").json()["weight_version"] == 0


@pytest.mark.parametrize("kind", ["folder_link_inside", "fifo"])
def test_a_link_on_the_way_or_a_fifo_in_place_of_the_weights_is_refused_at_once(model_dir, tmp_path, kind):
    """Same family: a symlink as an intermediate folder (``root/sub -> outside``, update ``root/sub/v1``), and a
    FIFO named ``model.safetensors`` (reading it would block the request forever)."""
    gen = _gen(model_dir)
    root = tmp_path / "sync"
    root.mkdir()
    if kind == "fifo":
        (root / "v1").mkdir()
        os.mkfifo(root / "v1" / "model.safetensors")
        path, code, words = str(root / "v1"), 400, "not a regular file"
    else:
        _write_weights(gen, tmp_path / "elsewhere" / "v1", scale=1.0)
        (root / "sub").symlink_to(tmp_path / "elsewhere")
        path, code, words = str(root / "sub" / "v1"), 403, "outside the weights root"
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    before = _greedy(client, gen)
    t0 = time.monotonic()
    res = client.post("/update_weights", json={"path": path, "version": 1})
    assert res.status_code == code and words in res.json()["detail"], res.text
    assert time.monotonic() - t0 < 10
    assert _greedy(client, gen) == before and client.get("/health").json()["weight_version"] == 0
    assert not [p for p in root.iterdir() if p.name.startswith(".rollout-server-")]  # nothing left behind


class BlockingGenerate:
    """The transformers generator whose ``generate`` waits for ``release`` (a long generation holding the engine
    lock) and which records the parameters of every load."""

    def __init__(self, gen):
        import threading

        self.gen, self.tokenizer, self.model = gen, gen.tokenizer, gen.model
        self.started, self.release = threading.Event(), threading.Event()

    def generate(self, *a, **kw):
        self.started.set()
        assert self.release.wait(30)
        return self.gen.generate(*a, **kw)

    def load_weights_file(self, path):
        self.gen.load_weights_file(path)


def test_a_folder_swapped_for_a_symlink_while_the_update_waits_for_the_lock_loads_nothing_from_outside(
        model_dir, tmp_path):
    """The attack: ``/update_weights`` checks ``root/v1``, waits for the engine lock (a generation holds it), and
    meanwhile ``root/v1`` is replaced by a symlink to weights outside the root: the path was read again after the
    check and the outside weights loaded. The server now loads only what it checked (its private copy)."""
    import threading

    gen = BlockingGenerate(_gen(model_dir))
    root = tmp_path / "sync"
    root.mkdir()
    inside = _write_weights(gen, root / "v1", scale=0.5, seed=1)
    want = {n: t.clone() for n, t in __import__("safetensors.torch").torch.load_file(
        str(inside / "model.safetensors")).items()}
    outside = _write_weights(gen, tmp_path / "elsewhere", scale=3.0, seed=9)
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    results = {}
    t_gen = threading.Thread(target=lambda: results.setdefault("gen", client.post("/generate", json=_body(gen))))
    t_gen.start()
    assert gen.started.wait(30)
    t_upd = threading.Thread(target=lambda: results.setdefault(
        "upd", client.post("/update_weights", json={"path": str(inside), "version": 1})))
    t_upd.start()
    time.sleep(1.0)  # the update has checked the folder and waits for the lock
    shutil.rmtree(inside)
    (root / "v1").symlink_to(outside)
    gen.release.set()
    t_gen.join(30)
    t_upd.join(30)
    assert results["gen"].status_code == 200
    got = dict(gen.model.named_parameters())
    if results["upd"].status_code == 200:  # loaded: what was checked, never the outside weights
        assert all(torch.equal(got[n].detach(), want[n]) for n in want)
    else:
        assert results["upd"].status_code in (400, 403)
    outside_w = __import__("safetensors.torch").torch.load_file(str(outside / "model.safetensors"))
    assert not any(torch.equal(got[n].detach(), outside_w[n]) for n in outside_w)


@pytest.mark.parametrize("kind", ["int8", "nan", "inf"])
def test_weights_of_the_right_shape_but_unusable_values_are_refused(model_dir, tmp_path, kind):
    """The attack: int8 (or all-NaN) tensors of the served model's names and shapes were accepted and loaded."""
    from safetensors.torch import save_file

    gen = _gen(model_dir)
    root = tmp_path / "sync"
    root.mkdir()
    (root / "bad").mkdir()
    tensors = {}
    for i, (n, p) in enumerate(gen.model.named_parameters()):
        if kind == "int8":
            tensors[n] = torch.ones(p.shape, dtype=torch.int8)
        else:
            t = p.detach().clone()
            if i == 0 or kind == "nan":
                t.fill_(float("nan") if kind == "nan" else float("inf"))
            tensors[n] = t.contiguous()
    save_file(tensors, str(root / "bad" / "model.safetensors"))
    client = _client(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir))
    before = _greedy(client, gen)
    res = client.post("/update_weights", json={"path": str(root / "bad"), "version": 1})
    assert res.status_code == 400, res.text
    assert ("dtype I8" if kind == "int8" else "NaN or infinite") in res.json()["detail"]
    assert _greedy(client, gen) == before and client.get("/health").json()["weight_version"] == 0


# ------------------------------------------------------------------ issue 37, item 4: request size and work bounds


def _post_json(client, route: str, body: dict):
    """POST ``body`` as ASCII JSON (a lone surrogate travels as its ``\\u`` escape, as a hostile client sends it)."""
    import json as _json

    return client.post(route, content=_json.dumps(body), headers={"Content-Type": "application/json"})


def _png_header(width: int, height: int) -> str:
    """A PNG that announces ``width`` x ``height`` pixels in a few bytes (its image data is a stub)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


@pytest.mark.parametrize("change, field, words", [
    ({"max_new_tokens": 10**12}, "max_new_tokens", "--max-new-tokens"),
    ({"n": 64, "requests": [{"prompt": "x"}] * 40}, "n", "--max-sequences"),
    ({"requests": [{"prompt": "x"}] * 300}, "requests", "--max-requests"),
    ({"requests": [{"prompt": "x" * 5000}]}, "requests[0].prompt", "--max-prompt-chars"),
    ({"requests": [{"prompt": "a\ud800b"}]}, "requests[0].prompt", "surrogate"),
    ({"seed": 2**64}, "seed", ""),
    ({"seed": -1}, "seed", ""),
    ({"requests": [{"prompt": "x", "images": [_png_header(8, 8)]}]}, "requests[0].images", "takes no images"),
])
def test_a_request_beyond_a_bound_is_refused_with_a_4xx_naming_the_field_and_the_limit(model_dir, change, field,
                                                                                        words):
    """The attacks: ``max_new_tokens`` 1e12 held the engine lock while /health said ok; 20,000 requests x n=1024
    were accepted; a 60 MB prompt took the server to many GB; lone surrogates and ``seed`` 2^64 gave plain 500s;
    PNGs were decoded for a text model. Each is now a 4xx naming the field (and the server option setting it)."""
    from models.generation.vllm_server import Limits

    gen = _gen(model_dir)
    limits = Limits(max_requests=256, max_sequences=1024, max_new_tokens=512, max_prompt_chars=4096)
    client = _client(build_app(gen, str(model_dir), limits=limits))
    before = _greedy(client, gen)
    res = _post_json(client, "/generate", _body(gen, **change))
    assert res.status_code in (400, 413, 422), res.text
    detail = res.json()["detail"]
    assert detail.startswith(field) and words in detail and "\n" not in detail, detail
    assert _greedy(client, gen) == before


@pytest.mark.parametrize("pixels", [(12000, 9000), (20000, 20000)])
def test_an_image_beyond_the_pixel_bound_is_refused_before_it_is_decoded(model_dir, pixels):
    """The attack: 108-megapixel PNGs were decoded (for a text model), a 400-megapixel one gave a plain 500. The
    size in the header is checked before any pixel is decoded."""
    from models.generation.vllm_server import Limits

    gen = _gen(model_dir)
    client = _client(build_app(gen, str(model_dir), accepts_images=True,
                               limits=Limits(max_image_pixels=4 * 1024**2)))
    res = client.post("/generate", json=_body(gen, requests=[{"prompt": "x", "images": [_png_header(*pixels)]}]))
    assert res.status_code == 400, res.text
    detail = res.json()["detail"]
    assert detail.startswith("requests[0].images[0]") and f"{pixels[0] * pixels[1]} pixels" in detail
    assert "--max-image-pixels" in detail


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_beyond_the_bound_is_refused_with_413_before_it_is_parsed(model_dir, chunked):
    from models.generation.vllm_server import Limits

    gen = _gen(model_dir)
    client = _client(build_app(gen, str(model_dir), limits=Limits(max_body_bytes=64 * 1024)))
    import json as _json

    payload = _json.dumps(_body(gen, requests=[{"prompt": "x" * 200_000}])).encode()
    content = (payload[i:i + 8192] for i in range(0, len(payload), 8192)) if chunked else payload
    res = client.post("/generate", content=content, headers={"Content-Type": "application/json"})
    assert res.status_code == 413, res.text
    assert res.json()["detail"].startswith("body:") and "--max-body-mb" in res.json()["detail"]
    assert _greedy(client, gen)  # still serving


@pytest.mark.parametrize("path", ["v1\x00x", "v" * 5000, "v1\ud800", ""])
def test_a_bad_update_path_is_a_4xx_naming_the_field(model_dir, tmp_path, path):
    """The attack: a path holding NUL, a lone surrogate, or 5,000 characters gave a plain 500."""
    gen = _gen(model_dir)
    client = _client(build_app(gen, str(model_dir), weights_root=tmp_path, restore_path=model_dir))
    res = _post_json(client, "/update_weights", {"path": path, "version": 1})
    assert res.status_code in (400, 403, 422), res.text
    assert res.json()["detail"].startswith("path"), res.json()["detail"]
    res = client.post("/update_weights", json={"path": "v1", "version": 2**64})
    assert res.status_code == 422 and res.json()["detail"].startswith("version")


# ------------------------------------------------------------------ issue 37, item 4: token and shutdown


@pytest.mark.parametrize("token", ["x", "s3cret", "a" * 40])
def test_binding_beyond_loopback_needs_a_strong_token(model_dir, monkeypatch, token):
    """The attack: a 1-character token allowed binding beyond loopback."""
    from models.generation.vllm_server import main

    import uvicorn

    def no_listener(*a, **kw):  # never bind beyond loopback in a test, whatever the server decides
        raise AssertionError("the server would have listened on 0.0.0.0")

    monkeypatch.setattr(uvicorn, "run", no_listener)
    monkeypatch.setenv("RUBRICFLOW_ROLLOUT_TOKEN", token)
    with pytest.raises(SystemExit, match=r"binding 0\.0\.0\.0 \(beyond loopback\) needs a strong token"):
        main(["--model", str(model_dir), "--host", "0.0.0.0", "--port", str(_free_port()), "--backend",
              "transformers"])


def test_the_kept_copy_of_the_last_weights_is_removed_at_shutdown(model_dir, tmp_path):
    gen = _gen(model_dir)
    root = tmp_path / "sync"
    root.mkdir()
    v1 = _write_weights(gen, root / "v1", scale=1.0)
    from fastapi.testclient import TestClient

    with TestClient(build_app(gen, str(model_dir), weights_root=root, restore_path=model_dir)) as client:
        assert client.post("/update_weights", json={"path": str(v1), "version": 1}).status_code == 200
        assert [p for p in root.iterdir() if p.name.startswith(".rollout-server-")]
    assert not [p for p in root.iterdir() if p.name.startswith(".rollout-server-")]


@pytest.mark.slow
def test_the_kept_copy_is_removed_when_the_server_gets_sigterm(model_dir, tmp_path):
    """The attack: SIGTERM after an update left the server's copy of the last weights in the weights root."""
    import json as _json

    root = tmp_path / "sync"
    root.mkdir()
    _write_weights(_gen(model_dir), root / "v1", scale=1.0)
    with _server_process(model_dir, root) as (proc, port):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/update_weights", method="POST",
                                     data=_json.dumps({"path": str(root / "v1"), "version": 1}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
        assert [p for p in root.iterdir() if p.name.startswith(".rollout-server-")]
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        assert sorted(p.name for p in root.iterdir()) == ["v1"]
