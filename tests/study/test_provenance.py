"""Reports that regenerate (rubricflow.study.provenance): a report refused from a tree that differs from its commit
unless exploratory (and then stamped), rewritten byte for byte by --report-only on its commit, recording the
commit, the params hash and the units' inputs; the seed ledger marking claims re-tested on used seeds."""

import json
import subprocess

import pytest

from rubricflow.sections import ConfigError
from rubricflow.study import provenance
from rubricflow.study.harness import report_only, run_study
from tests.study.helpers import FakeUnit, harness_cfg, make_shared

pytestmark = pytest.mark.real_code_state


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git checkout standing in for the project (the study's outputs lie outside it, as ignored folders would)."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.invalid")
    _git(root, "config", "user.name", "t")
    (root / "code.py").write_text("x = 1\n")
    _git(root, "add", "code.py")
    _git(root, "commit", "-q", "-m", "code")
    monkeypatch.setattr(provenance, "project_root", lambda: root)
    return root


def test_a_report_regenerates_byte_for_byte_from_its_commit(tmp_path, repo):
    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
    run_study(cfg, "rucl", unit_fn=FakeUnit())
    reports = tmp_path / "reports" / "studies"
    first = {ext: (reports / f"rucl.{ext}").read_bytes() for ext in ("md", "json", "png")}
    commit = _git(repo, "rev-parse", "HEAD")
    md = first["md"].decode()
    assert f"- git commit: {commit}\n" in md and "-dirty" not in md
    assert f"- params hash: {provenance.params_hash(cfg)}" in md
    data = json.loads(first["json"])
    assert data["git_commit"] == commit and data["params_hash"] == provenance.params_hash(cfg)
    assert set(data["inputs"]["parts"]) >= {"code", "config", "seed"} and data["inputs"]["digest"]
    assert all(u["inputs"] for u in data["units"])
    for ext in first:
        (reports / f"rucl.{ext}").unlink()
    out = report_only(cfg, "rucl")
    assert out["ran"] == 0
    for ext, body in first.items():
        assert (reports / f"rucl.{ext}").read_bytes() == body, ext


def test_a_tree_that_differs_is_refused_unless_exploratory_and_then_every_page_says_so(tmp_path, repo):
    cfg = harness_cfg(tmp_path)
    make_shared(tmp_path)
    (repo / "code.py").write_text("x = 2\n")
    (repo / "new.py").write_text("y = 1\n")  # untracked, not ignored: it may change results too
    unit = FakeUnit()
    with pytest.raises(ConfigError, match=r"study rucl: the working tree differs from commit \w{12} \(code.py, "
                                          r"new.py\).*--exploratory"):
        run_study(cfg, "rucl", unit_fn=unit)
    assert unit.calls == []  # refused before any unit ran
    run_study(cfg, "rucl", unit_fn=unit, exploratory=True)
    reports = tmp_path / "reports" / "studies"
    md = (reports / "rucl.md").read_text()
    assert md.startswith("# Study `rucl`\n\n**Exploratory report** (written with `--exploratory`: the tree differs "
                         "from its commit: code.py, new.py)")
    assert "-dirty" in md
    assert json.loads((reports / "rucl.json").read_text())["exploratory"].startswith("the tree differs")
    assert not (reports / provenance.LEDGER_FILE).exists()  # an exploratory report confirms nothing
    with pytest.raises(ConfigError, match="working tree differs"):
        report_only(cfg, "rucl")
    # the report folder itself is the study's output, not a change to the code
    _git(repo, "checkout", "code.py")
    (repo / "new.py").unlink()
    (repo / "reports").mkdir()
    (repo / "reports" / "x.md").write_text("old report")
    assert provenance.code_state([repo / "reports"]).changed == ()
    assert provenance.code_state().changed == ("reports/",)


def test_the_seed_ledger_marks_a_changed_claim_on_used_seeds_exploratory(tmp_path, repo):
    make_shared(tmp_path)
    cfg = harness_cfg(tmp_path)
    run_study(cfg, "rucl", unit_fn=FakeUnit())
    ledger = json.loads((tmp_path / "reports" / "studies" / provenance.LEDGER_FILE).read_text())
    assert {e["claim"] for e in ledger} == {c.key for c in cfg.study.rucl.claims}
    assert all(e["seeds"] == [11, 22, 33] for e in ledger)
    # the same claims on the same seeds again (a regenerated report) add nothing and mark nothing
    report_only(cfg, "rucl")
    assert json.loads((tmp_path / "reports" / "studies" / provenance.LEDGER_FILE).read_text()) == ledger

    # a claim changed after seeing the results (a margin added), re-run on the same seeds: exploratory
    claims = [dict(c.model_dump(), margin=0.05) if c.b == "uniform" else c.model_dump()
              for c in cfg.study.rucl.claims]
    changed = harness_cfg(tmp_path, {"claims": claims})
    out = report_only(changed, "rucl", report_name="rucl-changed")
    md = (tmp_path / "reports" / "studies" / "rucl-changed.md").read_text()
    assert ("exploratory: seeds 11, 22, 33 were used before with another version of the claim (report rucl, commit "
            in md)
    data = json.loads((tmp_path / "reports" / "studies" / "rucl-changed.json").read_text())
    (c,) = [c for c in data["claims"] if c["b"] == "uniform"]
    assert c["exploratory"] and c["p_adjusted"] is None
    assert all(x["family_size"] == 3 for x in data["claims"])  # the other three stay a family of 3
    assert out["claims"]["rucl-sigmoid vs outcome (accuracy)"] == "shown"

    # the changed claim confirmed on fresh seeds: a confirmation, recorded
    run_study(changed, "rucl", seeds=[44, 55, 66], unit_fn=FakeUnit({44: 0.01, 55: -0.01, 66: 0.0}),
              report_name="rucl-fresh")
    fresh = json.loads((tmp_path / "reports" / "studies" / "rucl-fresh.json").read_text())
    assert not any(x["exploratory"] for x in fresh["claims"])
    assert all(x["family_size"] == 4 for x in fresh["claims"])


def test_a_report_committed_after_its_code_names_the_codes_commit(tmp_path, repo):
    (repo / "reports").mkdir()
    code = _git(repo, "rev-parse", "HEAD")
    (repo / "reports" / "r.md").write_text("a report")
    _git(repo, "add", "reports")
    _git(repo, "commit", "-q", "-m", "report")
    assert provenance.code_state([repo / "reports"]).commit == code  # regenerates at the later commit too
    assert provenance.code_state().commit == _git(repo, "rev-parse", "HEAD")


def test_a_claims_hash_names_its_second_metric_and_a_one_metric_claims_hash_is_unchanged():
    from rubricflow.study.spec import Claim

    one = Claim(a="a", b="b", metric="acc", direction="higher")
    assert provenance.claim_hash(one) == provenance._sha({"a": "a", "b": "b", "metric": "acc", "direction": "higher",
                                                         "margin": 0.0})
    assert "b_metric" not in one.model_dump()  # reports and params dump a one-metric claim as before
    two = Claim(a="a", b="a", metric="acc", b_metric="acc_fixed", direction="higher", name="planned vs fixed")
    other = two.model_copy(update={"b_metric": "acc_other"})
    assert provenance.claim_hash(two) != provenance.claim_hash(other) and two.key == other.key


def test_a_rerendered_report_keeps_a_claim_on_two_metrics(tmp_path):
    from rubricflow.study.rerender import rerender

    claim = {"a": "outcome", "b": "outcome", "metric": "accuracy", "b_metric": "s_a", "direction": "higher"}
    cfg = harness_cfg(tmp_path, study={"claims": [claim]})
    units = [{"variant": "outcome", "seed": s, "metrics": {"accuracy": 0.5 + d, "s_a": 0.4}}
             for s, d in ((1, 0.1), (2, 0.2), (3, 0.15))]
    src = tmp_path / "old.json"
    src.write_text(json.dumps({"study": "rucl", "units": units, "claims": [claim], "untrained": [],
                               "variants": ["outcome"], "overrides": {"outcome": {}}, "seeds": [1, 2, 3]}))
    out = rerender(cfg, "rucl", src, report_name="again", exploratory=True)
    (c,) = json.loads(open(out["reports"]["json"]).read())["claims"]
    assert c["b_metric"] == "s_a" and c["diffs"] == pytest.approx({"1": 0.2, "2": 0.3, "3": 0.25})
