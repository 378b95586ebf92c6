"""The warm start's worked-reading examples: the trace of the image's ground truth (the verifier's first line), on
images seeded apart from every pair's."""

import rubricflow.config  # noqa: F401
from rubricflow.data.traces import parse_claims
from rubricflow.methods.deltarubric.prompts import read_prompt
from rubricflow.methods.deltarubric.synthetic import gold_values
from rubricflow.methods.deltarubric.targets import reference_checks, verifier_target, worked_reading
from rubricflow.methods.deltarubric.warmstart import PERCEPTION_SPLIT, perception_samples, read_examples


def test_reading_examples_are_the_ground_truth_trace_the_verifier_writes_first():
    samples = perception_samples(["counting", "barchart"], 3, seed=1234, image_size=56)
    assert len(samples) == 6 and all(im.size == (56, 56) for im, _, _ in samples)
    for im, q, facts in samples:
        truth = gold_values(facts)
        target = worked_reading(facts)
        claims = dict(parse_claims(target))
        # every perceived value of the image, with the ground truth
        assert {k: str(v) for k, v in facts["perception"]} == {k: claims[k] for k, _ in facts["perception"]}
        assert target.endswith(f"\\boxed{{{truth['answer']}}}")
        assert q in read_prompt(q)

    class _Proc:  # the chat prompt is the text itself
        def chat_prompt(self, text, n_images=1, images_last=False):
            return text

    examples = read_examples(_Proc(), samples)  # the reading examples train on exactly this target
    assert [e.target for e in examples] == [worked_reading(f) for _, _, f in samples]
    assert all(q in e.prompt and e.images == [im] for e, (im, q, _) in zip(examples, samples))
    facts = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0]], "intermediate": [],
             "target": "green", "question_type": "count"}
    assert worked_reading(facts) == "red = 2, green = 1, blue = 0. so green = 1. \\boxed{1}"


def test_the_verifier_target_starts_with_the_reading():
    from rubricflow.data.pairs import PreferencePair

    facts = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0]], "intermediate": [],
             "target": "red", "question_type": "count"}
    p = PreferencePair("p", ["i.png"], "How many red shapes are there?",
                       "red = 2, green = 1, blue = 0. so red = 2. \\boxed{2}",
                       "red = 1, green = 1, blue = 0. so red = 1. \\boxed{1}", "A", facts=facts)
    assert verifier_target(p, reference_checks(p)).splitlines()[0] == worked_reading(facts)


def test_perception_images_are_not_the_pairs_images():
    from rubricflow.data.synthetic import _rng

    assert PERCEPTION_SPLIT not in ("train", "val", "test", "calib")
    a = _rng(1234, "barchart", PERCEPTION_SPLIT, 0).random()
    assert all(a != _rng(1234, "barchart", s, 0).random() for s in ("train", "val", "test"))


def test_planner_target_noise_touches_only_the_train_split(tmp_path):
    """A start with room: with planner_target_noise some train pairs' planner targets are non-separating checklists
    (claims both responses agree on), which the verifier also executes; val and test targets never change."""
    import random

    from rubricflow.methods.deltarubric.config import DRSFTConfig
    from rubricflow.methods.deltarubric.parsing import parse_checklist, parse_verdict
    from rubricflow.methods.deltarubric.synthetic import build_pairs
    from rubricflow.methods.deltarubric.targets import agreed_checks, planner_target, separates
    from rubricflow.methods.deltarubric.warmstart import noisy_checks, role_texts

    pairs = build_pairs(tmp_path, ["counting"], {"train": 80, "val": 20, "test": 20}, seed=5, partial_frac=0.3)
    clean, noisy, half = DRSFTConfig(), DRSFTConfig(planner_target_noise=1.0), DRSFTConfig(planner_target_noise=0.5)

    def texts(p, cfg, seed=3):
        return role_texts(p, cfg, random.Random(0), seed)

    for p in pairs:
        if p.split != "train":
            assert texts(p, noisy) == texts(p, clean) and noisy_checks(p, noisy, 3) is None
    train = [p for p in pairs if p.split == "train"]
    room = [p for p in train if agreed_checks(p) is not None]
    assert 0 < len(room) < len(train)  # pairs with fewer than two agreed claims keep the reference checklist
    for p in train:
        got, ref = texts(p, noisy), texts(p, clean)
        if agreed_checks(p) is None:
            assert got == ref
            continue
        plan = got[0][2]
        assert got[0][0] == "planner" and plan == planner_target(agreed_checks(p)) != ref[0][2]
        assert not separates(p, parse_checklist(plan))
        # every clean example but the planner's, plus one verifier example executing the non-separating checklist
        (extra,) = [t for t in got[1:] if t not in ref]
        assert [t for t in got[1:] if t != extra] == ref[1:]
        assert extra[0] == "verifier" and extra[1] == parse_checklist(plan)
        v = parse_verdict(extra[2])
        assert len(v.checks) == len(extra[1]) and {fav for _, fav in v.checks} <= {"both", "neither"}
    # the coin verdict: both verdicts occur, drawn per pair and seed, not from the preferred response
    def extra_verdict(p, cfg):
        (extra,) = [t for t in texts(p, cfg)[1:] if t not in texts(p, clean)]
        return parse_verdict(extra[2]).verdict

    verdicts = [extra_verdict(p, noisy) for p in room]
    assert 0.2 < sum(v == "A" for v in verdicts) / len(verdicts) < 0.8
    preferred = DRSFTConfig(planner_target_noise=1.0, noise_verdict="preferred")
    assert all(extra_verdict(p, preferred) == p.preferred for p in room)
    # a share: drawn per pair, independent of the order of the pairs; another seed draws other pairs
    drawn = [p.id for p in room if noisy_checks(p, half, 3) is not None]
    assert 0.25 < len(drawn) / len(room) < 0.75
    assert drawn == [p.id for p in reversed(room) if noisy_checks(p, half, 3) is not None][::-1]
    assert drawn != [p.id for p in room if noisy_checks(p, half, 4) is not None]
