"""The rollout server's request validation, weight-update discipline, health and token
(models.generation.vllm_server around the transformers backend, in process: no vLLM needed)."""

import argparse
import base64
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
    import importlib.util

    from models.generation.vllm_server import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SystemExit, match=rf"rollout server: port {port} on 127.0.0.1 is already in use"):
            main(["--model", str(model_dir), "--port", str(port), "--backend", "transformers"])
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(SystemExit) as e:
        main(["--model", str(model_dir), "--port", str(_free_port())])
    assert str(e.value).startswith("rollout server: ") and "`vllm` package is not importable" in str(e.value)
    assert "\n" not in str(e.value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_server_exits_cleanly_on_sigterm(model_dir, tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "models.generation.vllm_server", "--model", str(model_dir),
                             "--backend", "transformers", "--port", str(port), "--weights-root", str(tmp_path)],
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
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn shuts down gracefully, then re-raises the signal
        with socket.socket() as s:
            # the port is free again for a new server (which, like uvicorn, sets SO_REUSEADDR: the closed health
            # connection may linger in TIME_WAIT, which holds no listener)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
