"""DeltaRubric's synthetic pair generator: answers re-derived, balanced and consistent pairs that pass the gate,
corruptions that change what they name."""

import hashlib
import json
import random

import pytest
from PIL import Image

from rubricflow.data.pairs import validate_pairs
from rubricflow.data.traces import extract_boxed, parse_claims
from rubricflow.methods.deltarubric.parsing import MAX_CHECKS
from rubricflow.methods.deltarubric.planning import facts_verdict
from rubricflow.methods.deltarubric.synthetic import build_pairs, corrupt, derive, response_text, severity
from rubricflow.methods.deltarubric.targets import decisive_keys, disagreement_keys, reference_checks


def test_derive_reproduces_generator_answers(tmp_path):
    pairs = build_pairs(tmp_path, ["counting", "barchart", "geometry"], {"train": 12}, seed=3)
    for p in pairs:
        facts, ans = derive(p.facts, p.facts["perception"])
        assert ans == p.meta["answer"], p.id
        assert facts["intermediate"] == p.facts["intermediate"]


def test_synthetic_pairs_are_balanced_consistent_and_pass_the_gate(tmp_path):
    pairs = build_pairs(tmp_path, ["counting", "barchart", "geometry"], {"train": 30, "test": 10}, seed=7,
                        partial_frac=0.4)
    stats = validate_pairs(tmp_path, balance_tol=0.0)  # exactly balanced
    assert stats == {"n_pairs": 120, "frac_a": {"test": 0.5, "train": 0.5}}
    kinds = {p.meta["kind"] for p in pairs}
    assert kinds == {"decisive", "partial"}
    cats = {p.category for p in pairs}
    assert {"counting/count", "counting/colour", "barchart/value", "barchart/relation", "geometry/value",
            "geometry/relation"} <= cats
    for p in pairs:
        good = p.response(p.preferred)
        bad = p.response("B" if p.preferred == "A" else "A")
        assert severity(good, p.facts) < severity(bad, p.facts), p.id
        assert p.meta["severity"] == {"A": severity(good, p.facts), "B": severity(bad, p.facts)}
        if p.meta["kind"] == "decisive":
            assert severity(good, p.facts) == 0
            assert extract_boxed(good) == p.meta["answer"]
        else:
            assert severity(good, p.facts) > 0
        # a wrong response stays internally consistent: its answer is what its own perception implies
        claims = dict(parse_claims(bad))
        perc = [[k, v] for k, v in p.facts["perception"]]
        if p.facts["task"] == "counting":
            perc = [[k, int(claims[k])] for k, _ in perc]
            assert response_text(p.facts, perc) == bad
    # deterministic by seed
    again = build_pairs(tmp_path / "again", ["counting", "barchart", "geometry"], {"train": 30, "test": 10}, seed=7,
                        partial_frac=0.4)
    assert [(p.response_a, p.preferred) for p in again] == [(p.response_a, p.preferred) for p in pairs]


def test_corruptions_change_the_perception_they_name():
    rng = random.Random(0)
    facts = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0]], "intermediate": [],
             "target": "red", "question_type": "count"}
    for _ in range(20):
        perc, kind = corrupt(rng, facts, facts["perception"])
        before, after = dict(facts["perception"]), dict(perc)
        changed = {k for k in before if before[k] != after[k]}
        if kind == "count":
            assert len(changed) == 1 and 1 <= sum(after.values()) <= 4
        else:
            assert len(changed) == 2 and sum(after.values()) == 3
    geo = {"task": "geometry", "perception": [["P", [1, 2]], ["Q", [4, 0]]], "intermediate": [], "target": None,
           "question_type": "area"}
    perc, kind = corrupt(rng, geo, geo["perception"], "relation")
    assert perc == [["P", [4, 0]], ["Q", [1, 2]]] and kind == "relation"
    assert severity(response_text(geo, perc), geo) == 2  # P and Q wrong, dx/dy/area and the answer right


def _pairs_digest(d, pairs):
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps([p.id, p.images, p.question, p.response_a, p.response_b, p.preferred, p.split,
                             p.category, p.facts, p.meta], sort_keys=True).encode())
    for f in sorted(d.rglob("*")):
        if f.is_file() and f.suffix in (".png", ".json"):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def test_the_default_form_builds_exactly_the_pairs_of_the_code_before_the_wide_form(tmp_path):
    # the digest of this small set as the code before `pairs.form` built it (commit 61d0aa6): texts, meta, images and
    # the manifest are byte for byte the same under the default (narrow) form
    pairs = build_pairs(tmp_path, ["counting", "barchart", "geometry"], {"train": 6, "val": 2, "test": 4}, seed=11,
                        partial_frac=0.5)
    assert _pairs_digest(tmp_path, pairs) == "eeb93a204f2bf59a4525a16d2e8d3cdeea339052bfe87eeb870570a79697faf5"
    assert "form" not in json.loads((tmp_path / "manifest.json").read_text())


def test_wide_pairs_have_more_keys_than_the_budget_and_one_decisive_difference(tmp_path):
    pairs = build_pairs(tmp_path, ["counting", "barchart"], {"train": 40, "test": 20}, seed=7, partial_frac=0.6,
                        form="wide", keys=10, confounds=3)
    stats = validate_pairs(tmp_path, balance_tol=0.0)  # A/B exactly balanced per split
    assert stats["frac_a"] == {"test": 0.5, "train": 0.5}
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["form"], manifest["keys"], manifest["confounds"]) == ("wide", 10, 3)
    assert {p.meta["kind"] for p in pairs} == {"decisive", "partial"}
    assert sum(p.meta["kind"] == "partial" for p in pairs) > 40
    assert Image.open(tmp_path / pairs[0].images[0]).size == (56, 56)
    for p in pairs:
        assert len(p.facts["perception"]) == 10 > MAX_CHECKS
        good, bad = p.response(p.preferred), p.response("B" if p.preferred == "A" else "A")
        assert severity(good, p.facts) < severity(bad, p.facts), p.id
        d = p.meta["decisive"]
        if p.meta["kind"] == "decisive":
            assert severity(good, p.facts) == 0 and d in decisive_keys(p)
            continue
        # several differing claims, exactly one of which favours a response: the decisive key, for the preferred one
        assert decisive_keys(p) == [d] and d not in p.meta["confounds"], p.id
        assert set(disagreement_keys(p)) >= {d, *p.meta["confounds"]} and len(p.meta["confounds"]) == 3
        if p.facts["task"] == "barchart" or p.facts["target"] not in p.meta["confounds"]:
            assert extract_boxed(good) == extract_boxed(bad) == p.meta["answer"]  # the answer decides nothing
        else:  # the asked colour is a shared misreading: both answers wrong, differently
            assert p.meta["answer"] != extract_boxed(good) != extract_boxed(bad) != p.meta["answer"]
        # the reference checklist finds the decisive key within the budget
        assert facts_verdict(p, [c.id for c in reference_checks(p)]) == p.preferred
    # deterministic by seed
    again = build_pairs(tmp_path / "again", ["counting", "barchart"], {"train": 40, "test": 20}, seed=7,
                        partial_frac=0.6, form="wide", keys=10, confounds=3)
    assert [(p.response_a, p.preferred) for p in again] == [(p.response_a, p.preferred) for p in pairs]


def test_the_wide_form_refuses_a_task_without_a_wide_variant(tmp_path):
    with pytest.raises(ValueError, match=r"no wide variant of \['geometry'\]"):
        build_pairs(tmp_path, ["geometry"], {"train": 2}, seed=1, form="wide")


def test_no_config_field_shadows_the_mapping_protocol():
    """Prefect walks task parameters with ``dict(model)``, which calls ``model.keys()`` when the object has one: a
    config field named ``keys`` (or ``items`` / ``values``) makes every flow that passes the config fail."""
    from rubricflow.config import config_from_dict

    def walk(model):
        for name in type(model).model_fields:
            assert name not in ("keys", "items", "values", "get"), f"{type(model).__name__}.{name}"
            value = getattr(model, name)
            if hasattr(type(value), "model_fields"):
                walk(value)

    cfg = config_from_dict({})
    walk(cfg)
    assert dict(cfg.deltarubric.pairs)["n_keys"] == 10
