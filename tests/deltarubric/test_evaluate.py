"""The agreed-claims control of the judge evaluation: a verifier that follows its checklist falls to chance when no
check separates the responses; one that decides from its own reading does not."""

import re

import pytest

import rubricflow.config  # noqa: F401
from models.generation import Completion
from rubricflow.data.pairs import read_pairs
from rubricflow.methods.deltarubric.evaluate import (
    MODES,
    Item,
    Sampling,
    agreed_checks,
    evaluate_judge,
    format_table,
    judge,
    summarize,
)
from rubricflow.methods.deltarubric.synthetic import build_pairs, gold_values
from rubricflow.methods.deltarubric.targets import (
    check_text,
    claim_values,
    disagreement_keys,
    favours,
    reference_checks,
)


class _Proc:
    """A processor stand-in: the chat prompt is the text itself."""

    def chat_prompt(self, text, n_images=1, images_last=False):
        return text


class _Verifier:
    """Scripted verifier over the real pairs: executes the checks of its prompt against the ground truth.
    ``follow``: the verdict is the response the checks favour (A when none separates them); otherwise it is the
    right answer whatever the checks say (a judge that decides from its own reading)."""

    def __init__(self, pairs, follow: bool):
        self.pairs, self.follow = pairs, follow

    def _pair(self, prompt):
        hits = [p for p in self.pairs if f"Response A: {p.response_a}\nResponse B: {p.response_b}" in prompt]
        assert len(hits) == 1
        return hits[0]

    def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, top_p=1.0, seed=None):
        out = []
        for r in requests:
            p = self._pair(r.prompt)
            truth = gold_values(p.facts)
            by_text = {check_text(p.facts["task"], k): k for k in truth}
            checks = re.findall(r"^\d+\. (.*)$", r.prompt.split("Checks:\n", 1)[1], flags=re.M)
            favs = [favours(p, by_text[c], truth[by_text[c]]) for c in checks]
            lines = [f"{i}. check -> {f}" for i, f in enumerate(favs, 1)]
            picked = [f for f in favs if f in ("A", "B")]
            verdict = (picked[0] if picked else "A") if self.follow else p.preferred
            text = "\n".join(lines + [f"verdict: {verdict}"])
            out.append([Completion([], text, True)])
        return out


def test_the_agreed_control_separates_following_the_checklist_from_reading(tmp_path):
    build_pairs(tmp_path, ["counting"], {"train": 40}, seed=3, partial_frac=0.0)
    # pairs whose two texts recur over another image are dropped: the scripted verifier knows a pair by its texts
    texts = [(p.response_a, p.response_b) for p in read_pairs(tmp_path, "train")]
    pairs = [p for p in read_pairs(tmp_path, "train") if texts.count((p.response_a, p.response_b)) == 1]
    items = [Item(p, []) for p in pairs]
    kept = [p for p in pairs if agreed_checks(p) is not None]
    assert 0 < len(kept) < len(pairs)  # some pairs have fewer than two agreed claims: left out, and counted
    for p in kept:
        checks = agreed_checks(p)
        assert 2 <= len(checks) <= 4
        # no check of the control names a claim the responses disagree on
        diff = {check_text("counting", k) for k in disagreement_keys(p)}
        assert not diff & set(checks)
        a, b = claim_values(p.response_a), claim_values(p.response_b)
        assert all(a.get(k) == b.get(k) for k in gold_values(p.facts) if check_text("counting", k) in checks)

    follower = evaluate_judge(_Verifier(pairs, follow=True), _Proc(), items, ("oracle", "agreed"))
    reader = evaluate_judge(_Verifier(pairs, follow=False), _Proc(), items, ("oracle", "agreed"))
    assert follower["modes"]["oracle"]["accuracy"] == 1.0 and reader["modes"]["oracle"]["accuracy"] == 1.0
    assert follower["modes"]["agreed"]["n"] == len(kept)
    share_a = sum(p.preferred == "A" for p in kept) / len(kept)
    assert follower["modes"]["agreed"]["accuracy"] == share_a < 1.0  # a constant verdict: chance
    assert reader["modes"]["agreed"]["accuracy"] == 1.0
    assert f"n={len(kept)}" in format_table({"x": follower})


def test_the_control_is_skipped_for_pairs_without_facts():
    from rubricflow.data.pairs import PreferencePair

    p = PreferencePair("b", [], "q?", "x", "y", "A")
    out = evaluate_judge(_Verifier([p], follow=True), _Proc(), [Item(p, [])], ("agreed",))
    assert out["modes"] == {} and "agreed" in out["skipped"]


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(ValueError) as e:
        judge(None, _Proc(), [], "oracle-ish", {"planner": 4, "verifier": 4})
    assert str(e.value) == f"judge mode: expected one of {MODES}, got 'oracle-ish'"


def test_the_reading_mode_asks_for_the_reading_without_a_checklist(tmp_path):
    """The reading judge is evaluated with its own prompt (no checklist) and scored on its verdict."""
    build_pairs(tmp_path, ["counting"], {"train": 6}, seed=3, partial_frac=0.0)
    pairs = read_pairs(tmp_path, "train")

    class _Reader:
        def __init__(self):
            self.prompts = []

        def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, top_p=1.0, seed=None):
            self.prompts += [r.prompt for r in requests]
            return [[Completion([], f"red = 1. \\boxed{{1}}\nverdict: {'A' if i % 2 else 'B'}", True)]
                    for i in range(len(requests))]

    gen = _Reader()
    out = evaluate_judge(gen, _Proc(), [Item(p, []) for p in pairs], ("reading",))
    assert len(gen.prompts) == len(pairs)
    assert all(p.startswith("Read the image, then judge") and "Checks:" not in p for p in gen.prompts)
    expected = sum(p.preferred == ("A" if i % 2 else "B") for i, p in enumerate(pairs)) / len(pairs)
    assert out["modes"]["reading"]["accuracy"] == expected and out["modes"]["reading"]["format_violation"] == 0.0


def test_deltarubric_mode_reports_the_separating_checklist_share(tmp_path):
    """The planner's greedy checklist separates the responses when a check names a claim they disagree on."""
    build_pairs(tmp_path, ["counting"], {"train": 8}, seed=3, partial_frac=0.0)
    pairs = read_pairs(tmp_path, "train")

    class _Planner:  # the planner writes the reference checklist for even pairs, a check on an agreed claim else
        def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, top_p=1.0, seed=None):
            out = []
            for r in requests:
                i = next(i for i, p in enumerate(pairs) if f"Response A: {p.response_a}\n" in r.prompt
                         and f"Response B: {p.response_b}\n" in r.prompt)
                if "Checks:\n" in r.prompt:  # the verifier
                    text = "1. x -> A\n2. y -> A\nverdict: A"
                else:
                    keys = [c.text for c in reference_checks(pairs[i])] if i % 2 == 0 else agreed_checks(pairs[i])[:2]
                    text = "\n".join(f"{k}. {c}" for k, c in enumerate(keys, 1))
                out.append([Completion([], text, True)])
            return out

    kept = [p for p in pairs if agreed_checks(p) is not None]
    texts = [(q.response_a, q.response_b) for q in kept]  # the scripted planner knows a pair by its texts
    pairs[:] = [p for p in kept if texts.count((p.response_a, p.response_b)) == 1]
    out = evaluate_judge(_Planner(), _Proc(), [Item(p, []) for p in pairs], ("deltarubric",))
    assert len(pairs) >= 2
    even = sum(i % 2 == 0 for i in range(len(pairs)))
    assert out["modes"]["deltarubric"]["separating"] == pytest.approx(even / len(pairs))
    # decisive pairs (partial_frac 0): a check on a claim they disagree on favours one response, so it decides too
    assert out["modes"]["deltarubric"]["deciding"] == pytest.approx(even / len(pairs))
    oracle = evaluate_judge(_Planner(), _Proc(), [Item(p, []) for p in pairs], ("oracle",))["modes"]["oracle"]
    assert "separating" not in oracle and "deciding" not in oracle  # only the planner's own checklists are read


def test_the_generative_mode_asks_for_its_own_lines_and_fails_a_bare_verdict(tmp_path):
    """The generative no-rubric judge (issue 39, item 3b) is evaluated with its own prompt (no planner call, no
    checklist); a verdict without a comparison line is a format failure and a wrong verdict."""
    build_pairs(tmp_path, ["counting"], {"train": 6}, seed=3, partial_frac=0.0)
    pairs = read_pairs(tmp_path, "train")

    class _Gen:
        def __init__(self):
            self.prompts = []

        def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, top_p=1.0, seed=None):
            self.prompts += [r.prompt for r in requests]
            outs = []
            for i, r in enumerate(requests):
                p = pairs[i]
                line = "image red = 1\n1. A red = 1 yes, B red = 2 no -> A\n" if i % 2 == 0 else ""
                outs.append([Completion([], f"{line}verdict: {p.preferred}", True)])
            return outs

    gen = _Gen()
    out = evaluate_judge(gen, _Proc(), [Item(p, []) for p in pairs], ("generative",))
    assert len(gen.prompts) == len(pairs)  # one call per pair: no planner
    assert all(p.startswith("Read the image where the two responses differ") and "Checks:" not in p
               for p in gen.prompts)
    s = out["modes"]["generative"]
    assert s["accuracy"] == 0.5 and s["format_violation"] == 0.5


def test_a_sampled_readout_draws_whole_trajectories_as_a_rollout_does(tmp_path):
    """``Sampling(n, ...)``: the first call of a mode draws n samples per pair under the seed (the planner's checklist
    in deltarubric mode, the verifier's verdict on a facts-built checklist), and each sampled checklist goes on with one
    sampled verdict; a malformed sampled checklist is a wrong verdict, its verifier never called."""
    build_pairs(tmp_path, ["counting"], {"train": 4}, seed=3, partial_frac=0.0)
    pairs = read_pairs(tmp_path, "train")
    calls = []

    class _Gen:
        def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, top_p=1.0, seed=None):
            planner = bool(requests) and "Checks:\n" not in requests[0].prompt
            calls.append(("planner" if planner else "verifier", len(requests), n, temperature, top_p, seed))
            out = []
            for r in requests:
                p = next(p for p in pairs if f"Response A: {p.response_a}\n" in r.prompt)
                if planner:  # sample k of a pair: a valid checklist for even k, a malformed one for odd k
                    good = "\n".join(f"{i}. {c.text}" for i, c in enumerate(reference_checks(p), 1))
                    out.append([Completion([], good if k % 2 == 0 else "no list", True) for k in range(n)])
                else:
                    checks = re.findall(r"^\d+\. (.*)$", r.prompt.split("Checks:\n", 1)[1], flags=re.M)
                    lines = [f"{i}. check -> {p.preferred}" for i in range(1, len(checks) + 1)]
                    out.append([Completion([], "\n".join(lines + [f"verdict: {p.preferred}"]), True)] * n)
            return out

    items = [Item(p, []) for p in pairs]
    res = judge(_Gen(), _Proc(), items, "deltarubric", {"planner": 40, "verifier": 48},
                sampling=Sampling(3, 0.8, 0.9, 5))
    assert calls == [("planner", 4, 3, 0.8, 0.9, 5), ("verifier", 8, 1, 0.8, 0.9, None)]
    assert [r.pair_id for r in res] == [p.id for p in pairs for _ in range(3)]
    assert [r.correct for r in res] == [True, False, True] * 4  # samples 0 and 2 valid, sample 1 malformed
    assert [r.planner_ok for r in res] == [True, False, True] * 4
    s = summarize(res)
    assert s["accuracy"] == pytest.approx(2 / 3) and s["planner_format_violation"] == pytest.approx(1 / 3)
    calls.clear()
    res = judge(_Gen(), _Proc(), items, "oracle", {"planner": 40, "verifier": 48}, sampling=Sampling(2, 0.8, 0.9, 5))
    assert calls == [("verifier", 4, 2, 0.8, 0.9, 5)] and len(res) == 8 and all(r.correct for r in res)
    # greedy (the default): one verdict per pair, unseeded, temperature 0
    calls.clear()
    assert len(judge(_Gen(), _Proc(), items, "deltarubric", {"planner": 40, "verifier": 48})) == 4
    assert calls == [("planner", 4, 1, 0.0, 1.0, None), ("verifier", 4, 1, 0.0, 1.0, None)]  # sample 0: valid
    calls.clear()
    assert len(judge(_Gen(), _Proc(), items, "oracle", {"planner": 40, "verifier": 48})) == 4
    assert calls == [("verifier", 4, 1, 0.0, 1.0, None)]
