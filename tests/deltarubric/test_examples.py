"""The warm start's examples (rubricflow.methods.deltarubric.examples): the worked-reading examples (the trace of the
image's ground truth, the verifier's first line, on images seeded apart from every pair's), the planner's noisy
targets, the default example list's digest and the equal-count modes."""

import rubricflow.config  # noqa: F401
from rubricflow.data.traces import parse_claims
from rubricflow.methods.deltarubric.prompts import read_prompt
from rubricflow.methods.deltarubric.synthetic import gold_values
from rubricflow.methods.deltarubric.targets import reference_checks, verifier_target, worked_reading
from rubricflow.methods.deltarubric.examples import PERCEPTION_SPLIT, perception_samples, read_examples


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
    from rubricflow.methods.deltarubric.examples import noisy_checks, role_texts

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


# ----------------------------------------------------------------------------------------------------------------
# issue 39, item 2: the default example list, equal example counts per mode, the warm start to a bar


class _ChatProc:  # a processor whose chat prompt is the text itself, with the image count in front
    def chat_prompt(self, text, n_images=1, images_last=False):
        return f"<{n_images}>" + text


def test_the_default_config_keeps_the_example_list_of_the_code_before_the_bar(tmp_path, monkeypatch):
    """Prompts, targets and images of sft_examples and the tokenizer corpus on narrow and wide pairs, under the
    default config and one with variants and planner noise: the digest was taken from the code before
    equal_mode_examples / generative / the bar (commit 3e79c05), with the wide bar charts labelled A, B, ... as they
    were then; relabelled C, D, ... (WIDE_BAR_LABELS) only the wide bar charts' texts change (the second digest)."""
    import hashlib
    import json

    import rubricflow.data.synthetic as synthetic

    from rubricflow.methods.deltarubric.config import DRSFTConfig
    from rubricflow.methods.deltarubric.rollout import Item
    from rubricflow.methods.deltarubric.synthetic import build_pairs
    from rubricflow.methods.deltarubric.examples import pair_tokenizer_corpus, sft_examples

    def digest(d):
        narrow = build_pairs(d / "n", ["counting", "barchart"], {"train": 10, "val": 4}, seed=7, partial_frac=0.5)
        wide = build_pairs(d / "w", ["counting", "barchart"], {"train": 10, "val": 4}, seed=7, partial_frac=0.5,
                           form="wide")
        h, counts = hashlib.sha256(), []
        for cfg in (DRSFTConfig(), DRSFTConfig(verifier_variants=3, planner_target_noise=0.5)):
            for pairs in (narrow, wide):
                ex = sft_examples(_ChatProc(), [Item(p, ["img"]) for p in pairs], cfg, seed=3)
                for e in ex:
                    h.update(json.dumps([e.prompt, e.target, e.images]).encode())
                for t in pair_tokenizer_corpus(pairs, cfg, seed=3):
                    h.update(t.encode())
                counts.append(len(ex))
        assert counts == [168, 168, 230, 233]
        return h.hexdigest()

    assert digest(tmp_path / "now") == "a5a2fc238a24f6a2c181b5fcd65f8c75c1f37b9cfad8206367f8318d8ecd9103"
    monkeypatch.setattr(synthetic, "WIDE_BAR_LABELS", "ABCDEFGHIJKL")
    assert digest(tmp_path / "then") == "552d8dec29108f706447fb783340abad84d324628be1abe2b5650d08ccfc0bf6"


def test_equal_mode_examples_gives_every_judge_mode_the_verifiers_count(tmp_path):
    import random
    from collections import Counter

    from rubricflow.methods.deltarubric.config import DRSFTConfig
    from rubricflow.methods.deltarubric.parsing import parse_verdict
    from rubricflow.methods.deltarubric.planning import facts_verdict
    from rubricflow.methods.deltarubric.synthetic import build_pairs
    from rubricflow.methods.deltarubric.targets import exhaustive_checks
    from rubricflow.methods.deltarubric.examples import pair_examples

    pairs = build_pairs(tmp_path, ["counting", "barchart"], {"train": 8}, seed=7, partial_frac=0.5, form="wide")
    modes = ("verifier", "exhaustive", "no_rubric", "static", "reading", "generative")
    for variants in (0, 1, 3):
        off = DRSFTConfig(verifier_variants=variants, generative=True)
        on = off.model_copy(update={"equal_mode_examples": True})
        for p in pairs:
            before = Counter(e.mode for e in pair_examples(p, off, random.Random(0)))
            assert before == {"planner": 1, "verifier": 1 + variants, "no_rubric": 1, "static": 1, "reading": 1,
                              "generative": 1}  # the controls under-taught by construction
            exs = pair_examples(p, on, random.Random(0))
            got = Counter(e.mode for e in exs)
            assert {m: got[m] for m in modes} == {m: 1 + variants for m in modes} and got["planner"] == 1
            for e in exs:
                if e.mode in ("verifier", "planner"):
                    assert e.pair is p
                    continue
                # odd variants swap the responses; the verdict follows the preferred response
                assert {e.pair.response_a, e.pair.response_b} == {p.response_a, p.response_b}
                v = parse_verdict(e.target).verdict
                if e.mode == "exhaustive":  # the verdict its checklist supports (or the coin)
                    ex = exhaustive_checks(e.pair, 4)
                    assert e.checks == [c.text for c in ex]
                    assert facts_verdict(e.pair, [c.id for c in ex]) in (None, v)
                else:
                    assert v == e.pair.preferred
            for m in ("no_rubric", "generative"):
                shown = [e.pair.preferred for e in exs if e.mode == m]
                assert shown == [p.preferred if v % 2 == 0 else ("B" if p.preferred == "A" else "A")
                                 for v in range(1 + variants)]


def test_the_running_verdict_is_on_every_evidence_line_of_every_mode_that_writes_them(tmp_path):
    """`sft.evidence_tally`: the verifier's, the exhaustive mode's, the noisy checklist's and the generative judge's
    evidence lines each end with the running verdict; the other modes' targets (the static judge's criteria lines
    too), the prompts and the example count are those without it, and each tallied target is the plain one with the
    tally appended to its lines."""
    import random

    from rubricflow.methods.deltarubric.config import DRSFTConfig
    from rubricflow.methods.deltarubric.examples import pair_examples
    from rubricflow.methods.deltarubric.synthetic import build_pairs

    pairs = build_pairs(tmp_path, ["barchart"], {"train": 8}, seed=3, partial_frac=0.5, form="wide")
    from rubricflow.methods.deltarubric.parsing import parse_verdict
    from rubricflow.methods.deltarubric.roles import ROLES

    pairs = [p for p in pairs if len(p.facts["perception"]) - len(set(p.meta["errors"]["B"])) >= 2]  # 2 agreed
    off = DRSFTConfig(evidence_form="quoted", perception_images=8, generative=True, equal_mode_examples=True,
                      planner_target_noise=1.0)
    on = off.model_copy(update={"evidence_tally": True})
    tallied_modes = set()
    for p in pairs:
        plain, tally = pair_examples(p, off, random.Random(0), 1), pair_examples(p, on, random.Random(0), 1)
        assert [(e.mode, e.role, e.checks, e.pair, e.reading) for e in plain] == [
            (e.mode, e.role, e.checks, e.pair, e.reading) for e in tally]
        for a, b in zip(plain, tally):
            role = ROLES[a.role]
            assert role.prompt(a.pair, a.checks, a.reading) == role.prompt(b.pair, b.checks, b.reading)
            lines = [ln for ln in a.target.splitlines() if " -> " in ln]
            if not lines or a.mode == "static":  # the static judge's criteria lines are not evidence lines
                assert a.target == b.target
                continue
            tallied_modes.add(b.mode)
            assert all(" -> " not in ln or ", so far " in ln for ln in b.target.splitlines())
            assert b.target.replace(", so far A", "").replace(", so far B", "").replace(", so far even", "") \
                == a.target
            # the last tally is the verdict where it names a response; `even` where the lines favour neither
            last = [ln for ln in b.target.splitlines() if " -> " in ln][-1].rsplit("so far ", 1)[1]
            verdict = parse_verdict(b.target).verdict
            assert last == verdict or (last == "even" and all(f not in ("A", "B") for _, f in
                                                               parse_verdict(b.target).checks))
    assert tallied_modes == {"verifier", "exhaustive", "generative", "noise"}
