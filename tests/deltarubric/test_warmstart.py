"""The warm start's read-the-checks examples: targets from ground truth, checklists of 2-4 ground-truth keys, and
images seeded apart from every pair's."""

import random

import rubricflow.config  # noqa: F401
from rubricflow.deltarubric.prompts import read_prompt
from rubricflow.deltarubric.synthetic import gold_values
from rubricflow.deltarubric.warmstart import PERCEPTION_SPLIT, perception_samples, read_checks, read_target


def test_read_examples_are_ground_truth_in_the_traces_key_value_form():
    samples = perception_samples(["counting", "barchart"], 3, seed=1234, image_size=56)
    assert len(samples) == 6 and all(im.size == (56, 56) for im, _, _ in samples)
    rng = random.Random(0)
    for im, q, facts in samples:
        checks = read_checks(facts, rng)
        truth = gold_values(facts)
        assert 2 <= len(checks) <= 4 and len({k for k, _ in checks}) == len(checks)
        assert all(k in truth for k, _ in checks)
        lines = read_target(checks, truth).splitlines()
        assert lines == [f"{i}. {k} = {truth[k]}" for i, (k, _) in enumerate(checks, 1)]
        assert all(text in read_prompt(q, [t for _, t in checks]) for _, text in checks)
    counting = samples[0][2]
    assert read_target([("red", "count the red shapes.")], {"red": 2}) == "1. red = 2"
    assert counting["task"] == "counting"


def test_perception_images_are_not_the_pairs_images():
    from rubricflow.data.synthetic import _rng

    assert PERCEPTION_SPLIT not in ("train", "val", "test", "calib")
    a = _rng(1234, "barchart", PERCEPTION_SPLIT, 0).random()
    assert all(a != _rng(1234, "barchart", s, 0).random() for s in ("train", "val", "test"))
