"""Studies that lock and verify (rubricflow.study.units, through the harness): a checked plan, a lock per unit,
result.json with a checksum verified on reuse."""

import json
import threading
import time

import pytest
from typer.testing import CliRunner

from rubricflow.sections import ConfigError
from rubricflow.study.adapter import Unit
from rubricflow.study.harness import RESULT_FILE, plan, run_study, run_unit, unit_dir
from rubricflow.study.units import CORRUPT_FILE, load_result, write_result
from tests.study.helpers import FakeUnit
from tests.study.helpers import harness_cfg as _cfg
from tests.study.helpers import make_shared as _make_shared


def _study(tmp_path, seeds):
    """A study config whose shared outputs (data, validation stamp, SFT, tiers, rubric pool) all exist."""
    cfg = _cfg(tmp_path, {"seeds": seeds}, rubrics={"pool_path": str(tmp_path / "candidates.json")})
    _make_shared(tmp_path)
    (tmp_path / "candidates.json").write_text("{}")
    return cfg


@pytest.mark.parametrize("seeds, variants, words", [
    ([], None, "the seeds given name no seed"),
    (None, [], "the variants given name no variant"),
    ([11, 11], None, "repeat [11]"),
    (None, ["outcome", "sft", "outcome"], "repeat ['outcome']"),
    ([-1], None, "seeds must be integers from 0 to 4294967295, got [-1]"),
    ([11, 2**32], None, "got [4294967296]"),
    (None, ["nope"], "variants ['nope'] are not defined"),
])
def test_a_selection_is_checked_at_planning(tmp_path, seeds, variants, words):
    spec = _cfg(tmp_path).study.rucl
    with pytest.raises(ConfigError) as e:
        plan(spec, seeds, variants)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("args, words", [
    (["--seeds", ","], "the seeds given name no seed"),
    (["--variants", ","], "the variants given name no variant"),
    (["--variants", "outcome,outcome"], "repeat ['outcome']"),
])
def test_the_cli_refuses_an_empty_or_repeated_selection_in_one_line(tmp_path, monkeypatch, args, words):
    """``--seeds ,`` and ``--variants ,`` used to run every default; a repeated variant failed only at aggregation
    after every unit ran."""
    from flows.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("profile: tiny\n")
    res = CliRunner().invoke(app, ["study", "rucl", *args, "--no-track"])
    assert res.exit_code == 2, res.output
    assert words in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "reports" / "studies").exists()


def test_result_json_carries_a_checksum_that_is_verified(tmp_path, capsys):
    p = tmp_path / "u" / RESULT_FILE
    write_result(p, {"metrics": {"accuracy": 0.5, "n": None}, "seed": 1})
    assert "sha256" in json.loads(p.read_text())
    assert load_result(p) == {"metrics": {"accuracy": 0.5, "n": None}, "seed": 1}
    doc = json.loads(p.read_text())
    doc["metrics"]["accuracy"] = 0.99  # a hand edit
    p.write_text(json.dumps(doc))
    assert load_result(p) is None and not p.exists()
    assert (tmp_path / "u" / CORRUPT_FILE).exists()
    err = capsys.readouterr().err
    assert f"{p} does not match its checksum (edited or damaged); moved to {CORRUPT_FILE}" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("damage, words", [
    (lambda text: text[: len(text) // 2], "is not valid JSON"),
    (lambda text: "[]", "holds a JSON list, not a result object"),
    (lambda text: "", "is not valid JSON"),
    (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "sha256"}), "has no checksum"),
    (lambda text: text.replace('"accuracy": 0.', '"accuracy": 9.'), "does not match its checksum"),
])
def test_a_damaged_result_is_named_set_aside_and_its_unit_rerun(tmp_path, capsys, damage, words):
    """A truncated result.json used to give an error naming no file (and was never re-run), ``[]`` a traceback,
    and a hand-edited one was trusted into the report."""
    cfg = _study(tmp_path, [11, 22])
    run_study(cfg, "rucl", variants=["outcome"], unit_fn=FakeUnit())
    p = unit_dir(cfg.study.rucl, Unit("outcome", 22)) / RESULT_FILE
    p.write_text(damage(p.read_text()))
    capsys.readouterr()
    unit = FakeUnit()
    out = run_study(cfg, "rucl", variants=["outcome"], unit_fn=unit)
    assert unit.calls == ["outcome/seed22"] and out["ran"] == 1  # only the damaged unit runs again
    err = capsys.readouterr().err
    assert f"{p} {words}" in err and f"moved to {CORRUPT_FILE}, the unit runs again" in err
    assert (p.parent / CORRUPT_FILE).exists()
    again = load_result(p)
    assert again["seed"] == 22 and again["metrics"]["accuracy"] < 1  # the report's figures: the re-run's


def test_two_runs_of_one_unit_never_overlap_the_second_reuses_the_first(tmp_path, capsys):
    """Two ``study`` processes on one unit: one crashed when the other deleted its in-flight checkpoint folder.
    The unit lock serialises them; the second finds the first's result and does not run."""
    cfg = _study(tmp_path, [11])
    spec, unit = cfg.study.rucl, Unit("outcome", 11)
    started, release = threading.Event(), threading.Event()
    inside: list[str] = []
    fake = FakeUnit()

    def slow(ucfg, u, udir, run, secret_resolver):
        inside.append("in")
        assert inside.count("in") - inside.count("out") == 1  # never two at once
        started.set()
        release.wait(30)
        out = fake(ucfg, u, udir, run, secret_resolver)
        inside.append("out")
        return out

    results = {}
    first = threading.Thread(target=lambda: results.setdefault("a", run_unit(cfg, "rucl", spec, unit, slow)))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=lambda: results.setdefault("b", run_unit(cfg, "rucl", spec, unit, slow)))
    second.start()
    second.join(1.0)
    assert second.is_alive()  # waiting for the lock
    release.set()
    first.join(30)
    second.join(30)
    assert fake.calls == ["outcome/seed11"]
    assert results["a"]["skipped"] is False and results["b"]["skipped"] is True
    assert "unit outcome/seed11 of study rucl is in use by another process" in capsys.readouterr().err


def test_the_report_is_written_under_its_own_lock(tmp_path, capsys):
    from rubricflow.study.units import locked

    cfg = _study(tmp_path, [11])
    run_study(cfg, "rucl", variants=["outcome"], unit_fn=FakeUnit())
    report = tmp_path / "reports" / "studies" / "rucl.md"
    stamp = report.stat().st_mtime_ns
    done = threading.Event()
    err = ""
    with locked(tmp_path / "reports" / "studies" / ".rucl.lock", "test"):
        t = threading.Thread(target=lambda: (run_study(cfg, "rucl", variants=["outcome"], unit_fn=FakeUnit()),
                                             done.set()))
        t.start()
        deadline = time.monotonic() + 60  # until the second run waits on the lock (however slow the machine)
        while "is in use by another process" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capsys.readouterr().err
        assert "report rucl of study rucl is in use by another process" in err
        assert not done.is_set() and report.stat().st_mtime_ns == stamp  # another writer holds the report
    t.join(60)
    assert done.is_set() and report.stat().st_mtime_ns >= stamp
