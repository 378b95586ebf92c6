"""DeltaRubric's synthetic pair generator: answers re-derived, balanced and consistent pairs that pass the gate,
corruptions that change what they name."""

import random

from rubricflow.data.pairs import validate_pairs
from rubricflow.data.traces import extract_boxed, parse_claims
from rubricflow.methods.deltarubric.synthetic import build_pairs, corrupt, derive, response_text, severity


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
