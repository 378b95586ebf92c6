"""The generative no-rubric judge with the verifier's lookup tool (`sft.evidence_form: quoted`, issue 39 item 3b): it
names the keys to look up in its own output, the tool appends their quotes, it marks them and gives the verdict, so
it differs from DeltaRubric in the planner role only. Its contract, its warm-start examples, its evaluation and its
training episodes."""

import random
import re

import rubricflow.config  # noqa: F401
from models.generation import Completion
from rubricflow.methods.deltarubric.config import DRSFTConfig, DRTrainConfig
from rubricflow.methods.deltarubric.evaluate import Item, Sampling, evaluate_judge, judge
from rubricflow.methods.deltarubric.examples import mode_examples, pair_examples, pair_tokenizer_corpus
from rubricflow.methods.deltarubric.lookup import lookup_call, lookup_quotes, parse_lookup, tool_result
from rubricflow.methods.deltarubric.roles import GENERATIVE, GENERATIVE_TOOL, role_of
from rubricflow.methods.deltarubric.rollout import collect, score
from rubricflow.methods.deltarubric.synthetic import build_pairs
from rubricflow.methods.deltarubric.planning import facts_verdict
from rubricflow.methods.deltarubric.targets import (
    agreed_checks,
    exhaustive_checks,
    check_text,
    generative_keys,
    worked_reading,
)
from tests.deltarubric.scripted import mark_quotes


def test_a_tool_call_names_one_to_four_distinct_keys_on_one_line():
    assert parse_lookup("look up: C, F, answer").value == ["C", "F", "answer"]
    assert parse_lookup("  Look up: K,max \n").value == ["K", "max"]
    for text, why in [("", "one line"), ("C, F", "one line"), ("look up: C, D\nverdict: A", "one line"),
                      ("look up: C, C", "twice"), ("look up: C, D, E, F, G", "expected 2-4"),
                      ("look up: C", "expected 2-4"),  # the planner's budget
                      ("look up: bar C, D", "not a claim key"), ("look up: ", "not a claim key")]:
        got = parse_lookup(text)
        assert not got.ok and why in got.reason, (text, got.reason)
    assert lookup_call(["C", "answer"]) == "look up: C, answer"


def test_the_second_turn_needs_one_comparison_line_per_key_looked_up():
    two = "1. image C = 2, A C = 2 yes, B C = 3 no -> A\n2. image D = 1, A D = 1 yes, B D = 1 yes -> both\nverdict: A"
    assert GENERATIVE_TOOL.parse(two, ["C", "D"]).value == "A"
    short = GENERATIVE_TOOL.parse(two, ["C", "D", "E"])
    assert not short.ok and "2 comparison line(s) for 3 key(s)" in short.reason
    assert not GENERATIVE_TOOL.parse("verdict: A", ["C", "D"]).ok


def test_the_tool_quotes_a_key_as_it_quotes_the_verifiers_check_of_that_key():
    reading = "C = 3, K = 6. \\boxed{5}"
    a, b = "C = 3, K = 5. \\boxed{5}", "K = 6, C = 2. \\boxed{4}"
    assert tool_result(["K", "answer", "max"], reading, a, b).splitlines() == [
        "1. image K = 6, A K = 5, B K = 6", "2. image answer = 5, A answer = 5, B answer = 4",
        "3. image max = ?, A max = ?, B max = ?"]
    assert tool_result(["K"], reading, a, b).split(". ", 1)[1] == lookup_quotes([check_text("barchart", "K")],
                                                                                 reading, a, b)[0]


def test_quoted_warm_start_teaches_both_turns_of_the_generative_judge(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"train": 8}, seed=3, partial_frac=0.5, form="wide")
    cfg = DRSFTConfig(evidence_form="quoted", perception_images=8, equal_mode_examples=True, generative=True)
    n_variants = 1 + cfg.verifier_variants

    class Proc:
        def chat_prompt(self, text, n_images=1, images_last=False):
            return f"<user>{text}<assistant>"

    coins = []
    for p in pairs:
        examples = pair_examples(p, cfg, random.Random(0))
        gen = [e for e in examples if e.mode == "generative"]
        # one static-exhaustive checklist and one verdict per variant, for the verifier and the generative judge alike
        exhaustive = [e for e in examples if e.mode == "exhaustive"]
        assert len(exhaustive) == n_variants
        for ex, fixed in zip(exhaustive, gen[2::3]):
            assert ex.pair == fixed.pair and fixed.checks == [c.id for c in exhaustive_checks(ex.pair, 4)]
            assert ex.target.splitlines()[-1] == fixed.target.splitlines()[-1]
        assert len(gen) == 3 * n_variants and all(e.role == "generative_tool" for e in gen)
        for call, second, fixed in zip(gen[::3], gen[1::3], gen[2::3]):
            q = call.pair
            keys = generative_keys(q)
            assert call.checks is None and call.target == lookup_call(keys)  # the reference checklist's keys
            assert second.checks == keys and second.reading == worked_reading(q.facts)
            lines = second.target.splitlines()
            assert len(lines) == len(keys) + 1 and lines[-1] == f"verdict: {q.preferred}"
            assert GENERATIVE.parse(second.target).value == q.preferred
            for ex in (second, fixed):
                quotes = tool_result(ex.checks, worked_reading(q.facts), q.response_a, q.response_b).splitlines()
                for line, quote in zip(ex.target.splitlines(), quotes):  # each quote restated, marked, favoured
                    assert line.split(" -> ")[0].replace(" yes", "").replace(" no", "") == quote
            # the second turn on the static-exhaustive keys: the verdict they support, a coin where none separates
            assert fixed.checks == [c.id for c in exhaustive_checks(q, 4)]
            supported = facts_verdict(q, fixed.checks)
            assert supported is None or fixed.target.endswith(f"verdict: {supported}")
            coins.append(supported is None)
    assert any(coins) and not all(coins)
    # the second turn's SFT prompt is the first's followed by the call and the tool's answer
    pairs_ex = mode_examples(Proc(), [Item(pairs[0], [])], cfg)
    turns = [(e, s) for e, s in pairs_ex if e.mode == "generative"]
    (e1, s1), (e2, s2) = turns[0], turns[1]
    assert s2.prompt == s1.prompt + e1.target + "\n" + tool_result(e2.checks, e2.reading, e2.pair.response_a,
                                                                   e2.pair.response_b) + "\n"
    # at inference the second turn is built from the parsed call, whatever its spelling: the prompt it was taught on
    from rubricflow.methods.deltarubric.rollout import request
    spelt = e1.target.replace(", ", ",").replace("look up", "Look up")
    built = request(Proc(), GENERATIVE_TOOL, Item(e2.pair, [], e2.reading), parse_lookup(spelt).value)
    assert built.prompt == s2.prompt
    corpus = pair_tokenizer_corpus(pairs, cfg)
    assert any(t.startswith("look up: ") and "\n1. image " in t for t in corpus)
    # without the tool the generative judge is the single-turn one, as before
    plain = [e for e in pair_examples(pairs[0], DRSFTConfig(generative=True), random.Random(0))
             if e.mode == "generative"]
    assert [e.role for e in plain] == ["generative"] and plain[0].reading is None
    assert role_of("generative", quoted=True) is GENERATIVE_TOOL and role_of("generative") is GENERATIVE
    assert role_of("reading", quoted=True).name == "reading"


class _Policy:
    """Scripted policy. READ prompts: ``readings[pair id]`` (an item's stand-in image is its pair id). The generative
    tool prompt: ``look up:`` on ``pick(pair)``; after the tool's answer, each quoted key marked against its quoted
    image value and the tally's verdict (A on a tie). Counts READ calls and second turns."""

    def __init__(self, pairs, readings, pick):
        self.pairs, self.readings, self.pick, self.reads, self.seconds = pairs, readings, pick, 0, 0

    def _pair(self, prompt):
        return next(p for p in self.pairs if f"Response A: {p.response_a}\n" in prompt and p.question in prompt)

    def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, seed=None, top_p=1.0):
        out = []
        for r in requests:
            if r.prompt.startswith("Read the image.\n"):
                self.reads += 1
                out.append([Completion([], self.readings[r.images[0]], True)] * n)
                continue
            assert r.prompt.startswith("Name 2-4 keys"), r.prompt[:40]
            if "1. image " not in r.prompt:  # the tool has not answered yet
                out.append([Completion([1], self.pick(self._pair(r.prompt)), True)] * n)
                continue
            self.seconds += 1
            out.append([Completion([2, 3], mark_quotes(r.prompt), True)] * n)
        return out


class _Proc:
    def chat_prompt(self, text, n_images=1, images_last=False):
        return text


def _decisive(p):
    return lookup_call(generative_keys(p))


def _agreed(p):
    checks = agreed_checks(p)
    return lookup_call([c.id for c in checks] if checks else ["C", "D"])


def test_evaluation_runs_the_tool_between_the_generative_judges_two_turns(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"val": 32}, seed=4, partial_frac=0.5, form="wide")
    items = [Item(p, [p.id]) for p in pairs]
    tokens = {"planner": 40, "verifier": 160}
    readings = {p.id: worked_reading(p.facts) for p in pairs}
    good = _Policy(pairs, readings, _decisive)
    out = evaluate_judge(good, _Proc(), items, ("generative",), tokens, quoted=True, examples=1)
    s = out["modes"]["generative"]
    assert good.reads == len(pairs) and good.seconds == len(pairs)
    assert s["accuracy"] == 1.0 and s["format_violation"] == 0.0
    assert s["examples"][0]["output"].startswith("look up: ") and "\n1. image " in s["examples"][0]["output"]
    # the deciding share of its looked-up keys, as the planner's checklists': the reference keys decide every pair
    assert s["deciding"] == 1.0
    # the same judge looking up keys both responses agree on cannot tell them apart, and its keys decide nothing
    blind = evaluate_judge(_Policy(pairs, readings, _agreed), _Proc(), items, ("generative",), tokens, quoted=True)
    assert blind["modes"]["generative"]["accuracy"] < 0.75
    agreeing = [p for p in pairs if agreed_checks(p)]
    assert blind["modes"]["generative"]["deciding"] <= 1 - len(agreeing) / len(pairs) < 1.0
    # a call that breaks the contract is a format failure, no second turn is asked for, and it decides nothing
    broken = _Policy(pairs, readings, lambda p: "verdict: A")
    out = evaluate_judge(broken, _Proc(), items, ("generative",), tokens, quoted=True)
    assert out["modes"]["generative"]["format_violation"] == 1.0 and broken.seconds == 0
    assert out["modes"]["generative"]["deciding"] == 0.0


def test_a_sampled_generative_readout_draws_n_calls_per_pair_each_with_one_sampled_second_turn(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"val": 6}, seed=4, partial_frac=0.5, form="wide")
    items = [Item(p, [p.id]) for p in pairs]
    tokens = {"planner": 40, "verifier": 160}
    readings = {p.id: worked_reading(p.facts) for p in pairs}
    broken = {pairs[1].id, pairs[4].id}  # their calls break the contract: no second turn, wrong, deciding nothing
    pol = _Policy(pairs, readings, lambda p: "verdict: A" if p.id in broken else _decisive(p))
    seen = []
    inner = pol.generate

    def spy(requests, n=1, max_new_tokens=48, temperature=0.0, seed=None, top_p=1.0):
        seen.append((len(requests), n, temperature, top_p, seed))
        return inner(requests, n=n, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, top_p=top_p)

    pol.generate = spy
    res = judge(pol, _Proc(), items, "generative", tokens, quoted=True, sampling=Sampling(3, 0.9, 0.95, 7))
    # the reading stays greedy; the calls are sampled 3 per pair under the seed; each valid call's second turn once
    assert seen == [(6, 1, 0.0, 1.0, None), (6, 3, 0.9, 0.95, 7), (12, 1, 0.9, 0.95, None)]
    assert [r.pair_id for r in res] == [p.id for p in pairs for _ in range(3)]  # a pair's samples consecutive
    # each second turn is matched to its own call: the valid pairs' samples right on their own keys
    assert [(r.correct, r.format_ok, r.deciding) for r in res] == [
        (False, False, False) if p.id in broken else (True, True, True) for p in pairs for _ in range(3)]
    assert all(r.checklist == parse_lookup(_decisive(pairs[k // 3])).value for k, r in enumerate(res)
               if r.format_ok)
    # greedy (the default): one unseeded call per pair at temperature 0, one second turn per valid call
    seen.clear()
    greedy = judge(pol, _Proc(), items, "generative", tokens, quoted=True)
    assert seen == [(6, 1, 0.0, 1.0, None), (6, 1, 0.0, 1.0, None), (4, 1, 0.0, 1.0, None)] and len(greedy) == 6


def test_a_generative_tool_sample_is_two_episodes_with_its_reward(tmp_path):
    pairs = build_pairs(tmp_path, ["barchart"], {"train": 4}, seed=4, partial_frac=0.5, form="wide")
    readings = {p.id: worked_reading(p.facts) for p in pairs}
    cfg = DRTrainConfig(judge="generative", n_checklists=2, m_verdicts=2)
    bad_pair = pairs[0].id
    pol = _Policy(pairs, readings, lambda p: "no call" if p.id == bad_pair else _decisive(p))
    ro = collect(pol, _Proc(), [Item(p, [p.id]) for p in pairs], cfg, quoted=True)
    assert ro.with_tool and pol.reads == len(pairs) and len(ro.tool) == 4 * (len(pairs) - 1)
    episodes, m = score(ro, cfg, eos_id=9)
    assert len(episodes) == 4 + 2 * 4 * (len(pairs) - 1)  # the bad pair: one episode per sample
    assert {e.role for e in episodes} == {"generative"}
    for p in pairs:
        calls = [e for e in episodes if e.group == f"{p.id}/generative"]
        seconds = [e for e in episodes if e.group == f"{p.id}/generative/answer"]
        assert len(calls) == 4 and all("turn" not in e.meta for e in calls)  # every sample's call, once
        if p.id == bad_pair:
            assert not seconds and all(e.reward == 0.0 for e in calls)
        else:
            assert len(seconds) == 4 and all(e.meta["turn"] == 2 for e in seconds)
            assert all(e.reward == 1.0 for e in calls + seconds)
            assert calls[0].actions == [1, 9] and seconds[0].actions == [2, 3, 9]  # each turn with its EOS
            assert "1. image " in seconds[0].prompt["text"] and "1. image " not in calls[0].prompt["text"]
    assert m["generative/accuracy"] == (len(pairs) - 1) / len(pairs)
    assert m["generative/format_violation"] == 1 / len(pairs)
    # without the tool the same config samples single-turn verdicts
    assert not collect(_Single(), _Proc(), [Item(p, [p.id]) for p in pairs], cfg).with_tool


def test_mixed_calls_keep_one_episode_per_sample_in_each_group_and_a_short_second_turn_earns_nothing(tmp_path):
    """A pair whose samples make valid and broken calls: the call group holds every sample once (its baseline the
    samples' mean reward), the answer group the valid calls' second turns; a second turn that skips a key it looked up
    is a format failure with reward 0 on both of its episodes."""
    pairs = build_pairs(tmp_path, ["barchart"], {"train": 1}, seed=4, partial_frac=0.5, form="wide")
    p = pairs[0]
    keys = generative_keys(p)
    cfg = DRTrainConfig(judge="generative", n_checklists=2, m_verdicts=2)
    calls = [Completion([1], lookup_call(keys), True), Completion([1], "no call", True),
             Completion([1], lookup_call(keys), True), Completion([1], "verdict: A", True)]
    tool = {}
    seconds = {0: f"1. image k = 1 -> {p.preferred}\n" * len(keys) + f"verdict: {p.preferred}",
               2: f"1. image k = 1 -> {p.preferred}\nverdict: {p.preferred}"}  # sample 2 skips keys

    class Gen:
        def generate(self, requests, n=1, **kw):
            if requests and requests[0].prompt.startswith("Read the image.\n"):
                return [[Completion([], worked_reading(p.facts), True)] for _ in requests]
            if requests and "1. image " not in requests[0].prompt:
                return [calls for _ in requests]
            tool["n"] = len(requests)
            return [[Completion([2], seconds[s], True)] for s in (0, 2)]

    ro = collect(Gen(), _Proc(), [Item(p, [p.id])], cfg, quoted=True)
    assert tool["n"] == 2 and sorted(ro.tool_keys) == [(0, 0), (0, 2)]
    episodes, m = score(ro, cfg, eos_id=9)
    by_group = {}
    for e in episodes:
        by_group.setdefault(e.group, []).append(e.reward)
    assert by_group == {f"{p.id}/generative": [1.0, 0.0, 0.0, 0.0], f"{p.id}/generative/answer": [1.0, 0.0]}
    assert m["generative/format_violation"] == 3 / 4 and m["generative/accuracy"] == 1 / 4


class _Single:
    def generate(self, requests, n=1, **kw):
        assert all(not r.prompt.startswith("Name 2-4 keys") for r in requests)
        return [[Completion([], "1. x -> A\nverdict: A", True)] * n for _ in requests]


def test_the_generative_bar_executes_the_reference_keys_and_needs_the_tool(tmp_path):
    """``sft.bar_generative``: the generative control's oracle measure (its call names the reference checklist's
    keys), trained to from the comparison phase on, as the verifier is to the oracle bar."""
    import pytest

    from rubricflow.methods.deltarubric.bars import generative_oracle, staged_phases

    pairs = build_pairs(tmp_path, ["barchart"], {"val": 24}, seed=4, partial_frac=0.5, form="wide")
    tokens = {"planner": 40, "verifier": 160}
    right = [Item(p, [p.id], worked_reading(p.facts)) for p in pairs]
    never = _Policy(pairs, {}, lambda p: 1 / 0)  # the measure makes no tool call of its own
    assert generative_oracle(never, _Proc(), right, tokens) == 1.0 and never.seconds == len(pairs)
    blind = [Item(p, [p.id], re.sub(r"= \d", "= 1", worked_reading(p.facts))) for p in pairs]
    assert generative_oracle(never, _Proc(), blind, tokens) < 0.8  # it marks the quotes of its own reading
    cfg = DRSFTConfig(evidence_form="quoted", perception_images=8, generative=True, bar_oracle=0.8,
                      bar_generative=0.7)
    ph = staged_phases(["r"], [("verifier", "v"), ("generative_tool", "g"), ("planner", "p")], cfg)
    assert [p.bars for p in ph] == [{}, {"oracle": 0.8}, {"oracle": 0.8, "generative": 0.7},
                                    {"oracle": 0.8, "generative": 0.7}]
    for bad in ({"evidence_form": "restated"}, {"generative": False}):
        with pytest.raises(ValueError, match="bar_generative"):
            DRSFTConfig(**{**cfg.model_dump(), **bad})
