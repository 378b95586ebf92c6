"""Carrying a study's progress through the repository (``rubricflow.study.carry``): a study run in parts on
machines that share nothing else reuses what an earlier part built, by the same input checks as its own units."""

import dataclasses
import json
import tarfile

import pytest

from rubricflow import registry
from rubricflow.study.adapter import SeedStart, Unit
from rubricflow.study.carry import CarryError, archive_bytes, restore_progress, save_progress
from rubricflow.study.harness import plan, run_study, unit_dir, unit_start_dir
from tests.study.helpers import FakeUnit, harness_cfg, make_shared


class FakeStart:
    """A start per seed: weights that depend on the seed, an initial model only the build reads, a summary."""

    def __init__(self):
        self.builds, self.salt = [], 0

    def build(self, ucfg, seed, build_dir, start_dir):
        self.builds.append(seed)
        (build_dir / "sft").mkdir(parents=True)
        (build_dir / "sft" / "weights.bin").write_bytes(bytes([(seed + self.salt) % 256]) * 64)
        (build_dir / "base").mkdir()
        (build_dir / "base" / "init.bin").write_bytes(b"x" * 4096)
        return {"val_oracle": seed / 100}


@pytest.fixture
def fake_start(monkeypatch):
    fs = FakeStart()
    adapters = registry.study_adapters()
    start = SeedStart(overrides=lambda vcfg, sdir: {"rucl.init_from": str(sdir / "sft")},
                      inputs=lambda ucfg, seed: {"seed": seed}, build=fs.build, code=())
    patched = {**adapters, "rucl": dataclasses.replace(adapters["rucl"], seed_start=start)}
    monkeypatch.setattr(registry, "study_adapters", lambda: patched)
    return fs


def _machine(tmp_path, name):
    """A machine's project folder, at the same path as every other machine's (the config's paths are the same): the
    previous machine's folder is moved away to ``name`` first, so nothing of it is reachable where the study runs."""
    root = tmp_path / "project"
    if root.exists():
        root.rename(tmp_path / f"gone-before-{name}")
    root.mkdir()
    make_shared(root)
    return harness_cfg(root, study={"per_seed_start": True, "seeds": [11, 22]})


VARIANTS = ["sft", "outcome"]


def _units(spec):
    return plan(spec, variants=VARIANTS)


def test_a_study_goes_on_where_an_earlier_machine_stopped(tmp_path, fake_start):
    """Machine A finishes seed 11 and saves; machine B restores, builds only seed 22's start, runs only seed 22's
    units, and its report holds both seeds with A's numbers for seed 11."""
    carry = tmp_path / "repo" / "studies" / "carry"
    a = _machine(tmp_path, "a")
    unit_a = FakeUnit()
    run_study(a, "rucl", seeds=[11], variants=VARIANTS, unit_fn=unit_a)
    spec_a = a.study.rucl
    saved = save_progress(spec_a, "rucl", carry, leave_out=["base"], units=_units(spec_a))
    assert sorted(saved["written"]) == ["_start/seed11.tar.gz", "outcome/seed11.json", "sft/seed11.json"]
    assert sorted(saved["unfinished"]) == ["outcome/seed22", "sft/seed22"]
    with tarfile.open(carry / "rucl" / "_start" / "seed11.tar.gz") as tar:  # the initial weights left out
        assert sorted(tar.getnames()) == ["sft", "sft/weights.bin", "start.json"]

    b = _machine(tmp_path, "b")
    spec_b = b.study.rucl
    got = restore_progress(spec_b, "rucl", carry, units=_units(spec_b))
    assert sorted(got["restored"]) == ["_start/seed11", "outcome/seed11", "sft/seed11"]
    assert sorted(got["not_carried"]) == ["outcome/seed22", "sft/seed22"]
    assert (unit_dir(spec_b, Unit("sft", 11)) / "result.json").read_bytes() == \
        (carry / "rucl" / "sft" / "seed11.json").read_bytes()
    fake_start.builds.clear()
    unit_b = FakeUnit()
    out = run_study(b, "rucl", variants=VARIANTS, unit_fn=unit_b)
    assert fake_start.builds == [22] and sorted(unit_b.calls) == ["outcome/seed22", "sft/seed22"]
    assert out["ran"] == 2 and out["skipped"] == 2
    report = json.loads((tmp_path / "project" / "reports" / "studies" / "rucl.json").read_text())
    by_key = {f"{u['variant']}/seed{u['seed']}": u for u in report["units"]}
    a_result = json.loads(next((tmp_path / "gone-before-b").rglob("outcome/seed11/result.json")).read_text())
    assert by_key["outcome/seed11"]["metrics"] == a_result["metrics"]
    assert by_key["outcome/seed11"]["inputs"] == a_result["inputs"]
    assert sorted(report["seed_starts"]) == ["11", "22"]


def test_a_carried_start_built_on_other_inputs_is_rebuilt(tmp_path, fake_start, monkeypatch):
    """A restored start is reused only when built on the current inputs (as the recipe or code changed since):
    otherwise it is rebuilt, and the units trained from the carried one, whose start content differs, run again."""
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    run_study(a, "rucl", seeds=[11], variants=VARIANTS, unit_fn=FakeUnit())
    save_progress(a.study.rucl, "rucl", carry, units=_units(a.study.rucl))
    b = _machine(tmp_path, "b")
    adapters = registry.study_adapters()
    changed = dataclasses.replace(adapters["rucl"].seed_start, inputs=lambda ucfg, seed: {"seed": seed, "lr": 2})
    patched = {**adapters, "rucl": dataclasses.replace(adapters["rucl"], seed_start=changed)}
    monkeypatch.setattr(registry, "study_adapters", lambda: patched)
    assert sorted(restore_progress(b.study.rucl, "rucl", carry, units=_units(b.study.rucl))["restored"]) == \
        ["_start/seed11", "outcome/seed11", "sft/seed11"]
    fake_start.builds.clear()
    fake_start.salt = 1  # the rebuilt start's weights differ from the carried one's
    unit = FakeUnit()
    run_study(b, "rucl", seeds=[11], variants=VARIANTS, unit_fn=unit)
    assert fake_start.builds == [11] and sorted(unit.calls) == ["outcome/seed11", "sft/seed11"]
    assert (unit_dir(b.study.rucl, Unit("sft", 11)) / "result.stale.json").exists()


def test_results_carried_without_their_start_run_again_on_a_start_that_differs(tmp_path, fake_start):
    """The unit's inputs hash its start's content: a carried result beside a start rebuilt with other weights (as
    another CPU's float kernels can give) is moved aside as stale and the unit runs again."""
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    run_study(a, "rucl", seeds=[11], variants=VARIANTS, unit_fn=FakeUnit())
    save_progress(a.study.rucl, "rucl", carry, units=_units(a.study.rucl))
    (carry / "rucl" / "_start" / "seed11.tar.gz").unlink()  # only the results travel
    b = _machine(tmp_path, "b")
    restore_progress(b.study.rucl, "rucl", carry, units=_units(b.study.rucl))
    fake_start.salt = 1
    unit = FakeUnit()
    run_study(b, "rucl", seeds=[11], variants=VARIANTS, unit_fn=unit)
    assert sorted(unit.calls) == ["outcome/seed11", "sft/seed11"]
    assert (unit_dir(b.study.rucl, Unit("sft", 11)) / "result.stale.json").exists()


def test_saving_is_reproducible_and_restoring_keeps_what_the_machine_has(tmp_path, fake_start):
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    spec = a.study.rucl
    run_study(a, "rucl", seeds=[11], variants=VARIANTS, unit_fn=FakeUnit())
    first = save_progress(spec, "rucl", carry, units=_units(spec))
    archive = (carry / "rucl" / "_start" / "seed11.tar.gz").read_bytes()
    again = save_progress(spec, "rucl", carry, units=_units(spec))
    assert again["written"] == [] and sorted(again["unchanged"]) == sorted(first["written"])
    start = unit_start_dir(spec, Unit("sft", 11))
    assert archive_bytes(start) == archive
    for f in start.rglob("*"):  # times do not enter the archive
        f.touch()
    assert archive_bytes(start) == archive
    # restoring onto the machine that has everything keeps it all
    result = unit_dir(spec, Unit("sft", 11)) / "result.json"
    local = result.read_bytes()
    got = restore_progress(spec, "rucl", carry, units=_units(spec))
    assert got["restored"] == [] and sorted(got["kept"]) == ["_start/seed11", "outcome/seed11", "sft/seed11"]
    assert result.read_bytes() == local


def test_damaged_carried_files_are_errors_naming_them(tmp_path, fake_start):
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    run_study(a, "rucl", seeds=[11], variants=VARIANTS, unit_fn=FakeUnit())
    save_progress(a.study.rucl, "rucl", carry, units=_units(a.study.rucl))
    carried = carry / "rucl" / "sft" / "seed11.json"
    good = carried.read_bytes()
    body = json.loads(good)
    body["metrics"]["accuracy"] = 0.99  # a hand edit: the checksum no longer matches
    carried.write_text(json.dumps(body))
    spec = _machine(tmp_path, "b").study.rucl
    with pytest.raises(CarryError, match=r"sft/seed11\.json: the carried result of sft/seed11 does not match"):
        restore_progress(spec, "rucl", carry, units=_units(spec))
    assert not (unit_dir(spec, Unit("sft", 11)) / "result.json").exists()

    carried.write_bytes(good)
    archive = carry / "rucl" / "_start" / "seed11.tar.gz"
    archive.write_bytes(archive.read_bytes()[:100])
    spec = _machine(tmp_path, "c").study.rucl
    with pytest.raises(CarryError, match=r"seed11\.tar\.gz: not a start archive"):
        restore_progress(spec, "rucl", carry, units=_units(spec))
    start = unit_start_dir(spec, Unit("sft", 11))
    assert not start.exists()  # nothing half-unpacked left behind
    assert [p.name for p in start.parent.iterdir() if p.name.startswith(".carry")] == []


def test_an_archive_reaching_outside_its_folder_is_refused(tmp_path, fake_start):
    import io

    b = _machine(tmp_path, "b")
    spec = b.study.rucl
    archive = tmp_path / "carry" / "rucl" / "_start" / "seed11.tar.gz"
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("start.json", b"{}"), ("../../escaped.txt", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(CarryError, match="not a start archive"):
        restore_progress(spec, "rucl", tmp_path / "carry", units=_units(spec))
    assert not list(tmp_path.rglob("escaped.txt"))


def test_nothing_carried_is_a_clear_error(tmp_path, fake_start):
    b = _machine(tmp_path, "b")
    with pytest.raises(CarryError, match=r"no carried progress of study rucl .*study-carry save rucl"):
        restore_progress(b.study.rucl, "rucl", tmp_path / "nowhere", units=_units(b.study.rucl))


def test_the_planned_units_are_the_default(tmp_path, fake_start):
    a = _machine(tmp_path, "a")
    spec = a.study.rucl
    got = save_progress(spec, "rucl", tmp_path / "carry")
    assert got["written"] == [] and sorted(got["unfinished"]) == sorted(u.key for u in plan(spec))


def test_results_carried_without_their_start_are_reused_when_the_rebuilt_start_is_the_same(tmp_path, fake_start):
    """A result waits for its start before it is judged: a seed whose start was not carried is rebuilt, and where
    the rebuild gives the same start (a deterministic build on the same kind of machine) the results are reused."""
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    run_study(a, "rucl", seeds=[11], variants=VARIANTS, unit_fn=FakeUnit())
    save_progress(a.study.rucl, "rucl", carry, units=_units(a.study.rucl))
    (carry / "rucl" / "_start" / "seed11.tar.gz").unlink()
    b = _machine(tmp_path, "b")
    restore_progress(b.study.rucl, "rucl", carry, units=_units(b.study.rucl))
    fake_start.builds.clear()
    unit = FakeUnit()
    out = run_study(b, "rucl", seeds=[11], variants=VARIANTS, unit_fn=unit)
    assert fake_start.builds == [11] and unit.calls == [] and out["skipped"] == 2
    assert not (unit_dir(b.study.rucl, Unit("sft", 11)) / "result.stale.json").exists()


def test_the_report_says_which_seeds_ran_on_which_machine_when_there_are_several():
    from rubricflow.study.harness import machines_line

    one = [{"seed": 11, "machine": "Intel Xeon"}, {"seed": 22, "machine": "Intel Xeon"}]
    assert machines_line(one) == "Intel Xeon"
    mixed = [*one, {"seed": 22, "machine": "AMD EPYC"}, {"seed": 33, "machine": "AMD EPYC"}]
    assert machines_line(mixed) == "AMD EPYC (2 units; seeds 22, 33); Intel Xeon (2 units; seeds 11, 22)"
    assert machines_line([{"seed": 11}]).endswith("(where the report was written; the units did not record theirs)")


class ResumableStart:
    """A start trained in 3 blocks that checkpoints each block in its resume folder; ``stop_after``: the build is
    interrupted (an error) once that many blocks have been trained in this build."""

    def __init__(self):
        self.stop_after: int | None = None
        self.trained: list[tuple[int, int]] = []  # (seed, block) per block trained, over every build

    def build(self, ucfg, seed, build_dir, start_dir, resume_dir):
        ckpt = resume_dir / "progress.json"
        done = json.loads(ckpt.read_text())["blocks"] if ckpt.exists() else 0
        for n, block in enumerate(range(done, 3)):
            if self.stop_after is not None and n >= self.stop_after:
                raise RuntimeError("interrupted")
            self.trained.append((seed, block))
            ckpt.write_text(json.dumps({"blocks": block + 1}))
        (build_dir / "sft").mkdir(parents=True)
        (build_dir / "sft" / "weights.bin").write_bytes(bytes([seed % 256]) * 64)
        return {"resumed_at": done}


@pytest.fixture
def resumable(monkeypatch):
    rs = ResumableStart()
    adapters = registry.study_adapters()
    start = SeedStart(overrides=lambda vcfg, sdir: {"rucl.init_from": str(sdir / "sft")},
                      inputs=lambda ucfg, seed: {"seed": seed}, build=rs.build, code=(), resumable=True)
    patched = {**adapters, "rucl": dataclasses.replace(adapters["rucl"], seed_start=start)}
    monkeypatch.setattr(registry, "study_adapters", lambda: patched)
    return rs, start


def test_an_interrupted_resumable_start_goes_on_from_its_checkpoint_here_and_on_the_next_machine(tmp_path, resumable):
    """A resumable start keeps its progress in ``.seed<k>.partial`` across an interrupted build; the progress is
    carried to the next machine, whose build goes on from it; once the start is built the partial folder is gone,
    and the carried progress is replaced by the start. A partial made on other inputs is started over."""
    from rubricflow.study.seed_start import ensure_start, partial_dir, start_lock

    rs, start = resumable
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    spec = a.study.rucl
    sdir = unit_start_dir(spec, Unit("sft", 22))
    rs.stop_after = 1
    with pytest.raises(RuntimeError, match="interrupted"):
        ensure_start(start, a, 22, sdir)
    assert not sdir.exists() and json.loads((partial_dir(sdir) / "progress.json").read_text()) == {"blocks": 1}
    # a second interruption on this machine goes on from block 1, not from the beginning
    with pytest.raises(RuntimeError):
        ensure_start(start, a, 22, sdir)
    assert rs.trained == [(22, 0), (22, 1)]
    # saved while a build holds the start's lock: not carried, and said so
    with start_lock(sdir):
        busy = save_progress(spec, "rucl", carry, units=_units(spec))
    assert busy["building"] == ["_start/seed22"] and not (carry / "rucl" / "_start" / "seed22.partial.tar.gz").exists()
    saved = save_progress(spec, "rucl", carry, units=_units(spec))
    assert saved["written"] == ["_start/seed22.partial.tar.gz"] and saved["building"] == []

    b = _machine(tmp_path, "b")
    spec_b = b.study.rucl
    got = restore_progress(spec_b, "rucl", carry, units=_units(spec_b))
    assert got["restored"] == ["_start/.seed22.partial"]
    sdir_b = unit_start_dir(spec_b, Unit("sft", 22))
    # a machine that has a partial folder of its own keeps it
    assert restore_progress(spec_b, "rucl", carry, units=_units(spec_b))["kept"] == ["_start/.seed22.partial"]
    rs.stop_after = None
    rs.trained.clear()
    rec = ensure_start(start, b, 22, sdir_b)
    assert rs.trained == [(22, 2)] and rec["summary"] == {"resumed_at": 2}
    assert not partial_dir(sdir_b).exists() and (sdir_b / "sft" / "weights.bin").exists()
    again = save_progress(spec_b, "rucl", carry, units=_units(spec_b))
    assert "_start/seed22.tar.gz" in again["written"] and again["removed"] == ["_start/seed22.partial.tar.gz"]
    assert not (carry / "rucl" / "_start" / "seed22.partial.tar.gz").exists()

    # a partial made on other inputs (the recipe or the code changed) is not gone on from
    rs.stop_after = 1
    sdir_c = unit_start_dir(spec_b, Unit("sft", 33))
    with pytest.raises(RuntimeError):
        ensure_start(start, b, 33, sdir_c)
    changed = dataclasses.replace(start, inputs=lambda ucfg, seed: {"seed": seed, "lr": 2})
    rs.stop_after, rs.trained = None, []
    assert ensure_start(changed, b, 33, sdir_c)["summary"] == {"resumed_at": 0}
    assert rs.trained == [(33, 0), (33, 1), (33, 2)]


def test_a_damaged_carried_partial_start_is_an_error_naming_it(tmp_path, resumable):
    carry = tmp_path / "carry"
    archive = carry / "rucl" / "_start" / "seed11.partial.tar.gz"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"\x1f\x8b not a tar")
    spec = _machine(tmp_path, "b").study.rucl
    with pytest.raises(CarryError, match=r"seed11\.partial\.tar\.gz: not a start archive"):
        restore_progress(spec, "rucl", carry, units=_units(spec))
    # an archive without the inputs record is not a partial start
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "progress.json").write_text("{}")
    archive.write_bytes(archive_bytes(empty))
    with pytest.raises(CarryError, match=r"holds no readable inputs\.json"):
        restore_progress(spec, "rucl", carry, units=_units(spec))


def test_a_rebuild_interrupted_beside_its_old_start_carries_both_and_a_done_partial_is_not_restored(tmp_path,
                                                                                                     resumable):
    """Inputs changed (a new recipe) and the rebuild was cut off: the old start stays in place, and its partial
    rebuild is carried beside it, so the next machine goes on with the rebuild. A carried partial whose start (built
    on its inputs) the machine already has is not restored."""
    from rubricflow.study.seed_start import ensure_start, partial_dir

    rs, start = resumable
    carry = tmp_path / "carry"
    a = _machine(tmp_path, "a")
    spec = a.study.rucl
    sdir = unit_start_dir(spec, Unit("sft", 22))
    ensure_start(start, a, 22, sdir)  # the old start
    changed = dataclasses.replace(start, inputs=lambda ucfg, seed: {"seed": seed, "lr": 2})
    rs.stop_after = 2
    with pytest.raises(RuntimeError):
        ensure_start(changed, a, 22, sdir)
    saved = save_progress(spec, "rucl", carry, units=_units(spec))
    assert sorted(saved["written"]) == ["_start/seed22.partial.tar.gz", "_start/seed22.tar.gz"]

    b = _machine(tmp_path, "b")
    spec_b = b.study.rucl
    got = restore_progress(spec_b, "rucl", carry, units=_units(spec_b))
    assert sorted(got["restored"]) == ["_start/.seed22.partial", "_start/seed22"]
    rs.stop_after, rs.trained = None, []
    sdir_b = unit_start_dir(spec_b, Unit("sft", 22))
    assert ensure_start(changed, b, 22, sdir_b)["summary"] == {"resumed_at": 2} and rs.trained == [(22, 2)]
    # the rebuilt start is saved: its carried progress goes
    assert save_progress(spec_b, "rucl", carry, units=_units(spec_b))["removed"] == ["_start/seed22.partial.tar.gz"]

    # a machine that has the start a carried partial led to does not restore the partial
    rs.stop_after = 1
    sdir_c = unit_start_dir(spec_b, Unit("sft", 11))
    with pytest.raises(RuntimeError):
        ensure_start(start, b, 11, sdir_c)
    save_progress(spec_b, "rucl", carry, units=_units(spec_b))
    rs.stop_after = None
    ensure_start(start, b, 11, sdir_c)  # finished here after the save
    assert not partial_dir(sdir_c).exists()
    got = restore_progress(spec_b, "rucl", carry, units=_units(spec_b))
    assert "_start/.seed11.partial" not in got["restored"] and not partial_dir(sdir_c).exists()
