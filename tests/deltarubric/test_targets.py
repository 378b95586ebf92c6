"""SFT targets derived from facts: reference checklists, verifier evidence, static and no-rubric verdicts."""

import random

from rubricflow.data.pairs import PreferencePair
from rubricflow.methods.deltarubric.parsing import parse_checklist, parse_verdict
from rubricflow.methods.deltarubric.synthetic import build_pairs
from rubricflow.methods.deltarubric.targets import (
    planner_target,
    reading_target,
    reference_checks,
    static_target,
    variant_checks,
    verifier_target,
)

COUNT_FACTS = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0]], "intermediate": [],
               "target": "red", "question_type": "count"}


def _pair(a, b, preferred="A"):
    return PreferencePair("p", ["i.png"], "How many red shapes are there?", a, b, preferred, facts=COUNT_FACTS)


def test_reference_checks_target_the_disagreement():
    p = _pair("red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}",
              "red = 3, green = 1, blue = 0. so red = 3. \\boxed{3}")
    checks = reference_checks(p)
    assert [c.id for c in checks] == ["red", "answer"]
    text = planner_target(checks)
    assert text == "1. count the red shapes.\n2. check the final answer."
    assert parse_checklist(text) == ["count the red shapes.", "check the final answer."]
    # the verifier's own worked reading first, then per check: image value, each claim and whether it agrees
    assert verifier_target(p, checks) == (
        "red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}\n"
        "1. image red = 2, A red = 2 yes, B red = 3 no -> A\n"
        "2. image answer = 2, A answer = 2 yes, B answer = 3 no -> A\nverdict: A"
    )


def test_colour_error_and_static_target():
    # B attributes a green shape to blue: two counts disagree, the answer agrees
    p = _pair("red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}",
              "red = 2, green = 0, blue = 1. so red = 2. \\boxed{2}", "A")
    checks = reference_checks(p)
    assert [c.id for c in checks] == ["green", "blue"]
    assert verifier_target(p, checks) == (
        "red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}\n"
        "1. image green = 1, A green = 1 yes, B green = 0 no -> A\n"
        "2. image blue = 0, A blue = 0 yes, B blue = 1 no -> A\nverdict: A"
    )
    assert static_target(p) == (
        "1. relevance -> both\n2. consistency -> A\n3. visual -> A\n4. reasoning -> both\n5. clarity -> both\n"
        "verdict: A"
    )


def test_targets_parse_for_every_synthetic_pair(tmp_path):
    pairs = build_pairs(tmp_path, ["counting", "barchart", "geometry"], {"train": 20}, seed=5, partial_frac=0.5)
    rng = random.Random(0)
    for p in pairs:
        checks = reference_checks(p)
        assert 2 <= len(checks) <= 4
        assert parse_checklist(planner_target(checks)) == [c.text for c in checks]
        for cs in (checks, variant_checks(p, rng)):
            v = parse_verdict(verifier_target(p, cs))
            assert v.verdict == p.preferred and len(v.checks) == len(cs)
            # at least one check separates the responses (favours exactly one of them)
            if cs is checks and p.meta["kind"] == "decisive":
                assert p.preferred in [fav for _, fav in v.checks]
        assert parse_verdict(static_target(p)).verdict == p.preferred


def test_the_reading_judge_target_is_the_verifiers_reading_then_the_verdict(tmp_path):
    import rubricflow.config  # noqa: F401
    from rubricflow.methods.deltarubric.config import DRSFTConfig
    from rubricflow.methods.deltarubric.examples import role_texts

    pairs = build_pairs(tmp_path, ["counting", "barchart"], {"train": 12}, seed=7, partial_frac=0.5)
    for p in pairs:
        texts = role_texts(p, DRSFTConfig(verifier_variants=0), random.Random(0))
        (reading,) = [t for role, checks, t in texts if role == "reading"]
        assert [checks for role, checks, _ in texts if role == "reading"] == [None]  # no checklist in its prompt
        (verifier,) = [t for role, _, t in texts if role == "verifier"]
        assert reading == reading_target(p)
        # the same worked reading the verifier writes first, then the verdict: no check, no evidence line
        assert reading.splitlines() == [verifier.splitlines()[0], f"verdict: {p.preferred}"]
        v = parse_verdict(reading)
        assert v.verdict == p.preferred and v.checks == []
    off = role_texts(pairs[0], DRSFTConfig(reading=False), random.Random(0))
    assert not any(role == "reading" for role, _, _ in off)


def test_separates_and_agreed_checks():
    from rubricflow.methods.deltarubric.targets import agreed_checks, separates

    p = _pair("red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}",
              "red = 3, green = 1, blue = 0. so red = 3. \\boxed{3}")
    assert separates(p, [c.text for c in reference_checks(p)])
    agreed = agreed_checks(p)
    assert [c.id for c in agreed] == ["green", "blue"] and not separates(p, [c.text for c in agreed])
    assert separates(p, ["count the green shapes.", "Count the red shapes"])  # case and the final stop do not matter
    assert not separates(p, ["count the red things."])  # a check in other words is not matched to a claim
    one = _pair("red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}",
                "red = 3, green = 2, blue = 1. so red = 3. \\boxed{3}")
    assert agreed_checks(one) is None  # fewer than two agreed claims


def test_the_generative_target_reads_and_compares_the_keys_where_the_responses_disagree(tmp_path):
    """Issue 39, item 3b: reading lines of the disagreement keys, one comparison line per key, the verdict; its
    own parse (through parse_verdict) gives back the verdict and one favoured response per key."""
    from rubricflow.methods.deltarubric.planning import execute
    from rubricflow.methods.deltarubric.roles import GENERATIVE
    from rubricflow.methods.deltarubric.synthetic import gold_values
    from rubricflow.methods.deltarubric.targets import generative_keys, generative_target

    p = _pair("red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}",
              "red = 3, green = 1, blue = 0. so red = 3. \\boxed{3}")
    keys = generative_keys(p)
    assert keys == ["red", "answer"]
    assert generative_target(p, keys).splitlines() == [
        "image red = 2", "image answer = 2",
        "1. A red = 2 yes, B red = 3 no -> A", "2. A answer = 2 yes, B answer = 3 no -> A", "verdict: A"]
    for form in ("narrow", "wide"):
        pairs = build_pairs(tmp_path / form, ["counting", "barchart"], {"train": 12}, seed=7, partial_frac=0.5,
                            form=form)
        for p in pairs:
            fixed = generative_keys(p)
            truth = gold_values(p.facts)
            assert fixed == [k for k in truth if k in {c.id for c in reference_checks(p)}]  # the facts' order
            shuffled = generative_keys(p, "shuffled", random.Random(p.id))
            assert sorted(shuffled) == sorted(fixed) and shuffled == generative_keys(p, "shuffled", random.Random(p.id))
            for keys in (fixed, shuffled):
                text = generative_target(p, keys)
                lines = text.splitlines()
                assert lines[:len(keys)] == [f"image {k} = {truth[k]}" for k in keys]
                v = parse_verdict(text)
                assert v.verdict == p.preferred and [fav for _, fav in v.checks] == execute(p, keys)
                parsed = GENERATIVE.parse(text)
                assert parsed.ok and parsed.value == p.preferred
    # the parse: a verdict without a comparison line is a format failure; the prompt hands it no checklist
    assert not GENERATIVE.parse("image red = 2\nverdict: A").ok
    assert "comparison line" in GENERATIVE.parse("verdict: A").reason
    assert not GENERATIVE.parse("1. A red = 2 yes, B red = 3 no -> A").ok  # no verdict
    prompt = GENERATIVE.prompt(pairs[0])
    assert "Checks:" not in prompt and pairs[0].response_a in prompt
    import pytest

    with pytest.raises(ValueError, match="shuffled"):
        generative_keys(pairs[0], "shuffled")


def test_restated_evidence_lines_write_the_check_first_and_parse_as_the_keyed_ones(tmp_path):
    """`sft.evidence_form: restated` (the wide pairs): each evidence line copies its check's text, then the keyed
    line; the verdict and the per-check favours parse exactly as from the keyed lines."""
    import pytest

    from rubricflow.methods.deltarubric.roles import VERIFIER

    pairs = build_pairs(tmp_path, ["counting"], {"train": 12}, seed=5, partial_frac=0.5, form="wide")
    for p in pairs:
        checks = reference_checks(p)
        keyed, restated = verifier_target(p, checks), verifier_target(p, checks, form="restated")
        lines = {"keyed": keyed.splitlines()[1:-1], "restated": restated.splitlines()[1:-1]}
        for i, (c, k, r) in enumerate(zip(checks, lines["keyed"], lines["restated"]), 1):
            assert r == f"{i}. {c.text} " + k.removeprefix(f"{i}. ")
        assert parse_verdict(restated).checks == [(f"{c.text} {e}", fav) for c, (e, fav)
                                                  in zip(checks, parse_verdict(keyed).checks)]
        assert VERIFIER.parse(restated, [c.text for c in checks]).value == p.preferred
    with pytest.raises(ValueError, match="evidence form"):
        verifier_target(pairs[0], reference_checks(pairs[0]), form="compact")


def test_the_running_verdict_follows_the_lines_and_changes_no_parse(tmp_path):
    """`sft.evidence_tally`: each evidence line ends with the response more lines favour so far (`even` on a tie);
    the tallied targets parse to the same favours and verdict as the plain ones, and on the reference checklist the
    last line's tally is the verdict."""
    from rubricflow.methods.deltarubric.planning import facts_verdict
    from rubricflow.methods.deltarubric.roles import GENERATIVE, GENERATIVE_TOOL, VERIFIER
    from rubricflow.methods.deltarubric.targets import (
        generative_keys,
        generative_target,
        generative_tool_target,
        tallied,
    )

    lines = ["1. x -> neither", "2. y -> A", "3. z -> B", "4. w -> B", "5. v -> both"]
    assert [ln.rsplit("so far ", 1)[1] for ln in tallied(lines)] == ["even", "A", "even", "B", "B"]
    assert tallied(lines)[1] == "2. y -> A, so far A"
    pairs = build_pairs(tmp_path, ["counting", "barchart"], {"train": 16}, seed=9, partial_frac=0.5, form="wide")
    for p in pairs:
        checks = reference_checks(p)
        texts = [c.text for c in checks]
        for form in ("keyed", "restated", "quoted"):
            plain, tally = verifier_target(p, checks, form=form), verifier_target(p, checks, form=form, tally=True)
            assert tally.splitlines()[-1] == plain.splitlines()[-1] == f"verdict: {p.preferred}"
            got, want = parse_verdict(tally), parse_verdict(plain)
            assert got.verdict == want.verdict and [f for _, f in got.checks] == [f for _, f in want.checks]
            assert tally.splitlines()[-2].endswith(f"so far {facts_verdict(p, [c.id for c in checks])}")
            assert VERIFIER.parse(tally, texts).value == p.preferred
        keys = generative_keys(p)
        for text in (generative_target(p, keys, tally=True), generative_tool_target(p, keys, tally=True)):
            assert text.splitlines()[-2].endswith(f"so far {p.preferred}")
        assert GENERATIVE.parse(generative_target(p, keys, tally=True)).value == p.preferred
        assert GENERATIVE_TOOL.parse(generative_tool_target(p, keys, tally=True), keys).value == p.preferred
