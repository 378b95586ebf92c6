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
