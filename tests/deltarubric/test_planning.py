"""Does the planner have something to choose (issue 39): checklists executed against the facts on hand-built pairs,
the static-exhaustive checklist and judge mode, and the shares on the narrow and the wide pairs."""

import re

import pytest

import rubricflow.config  # noqa: F401
from models.generation import Completion
from rubricflow.data.pairs import PreferencePair
from rubricflow.methods.deltarubric.evaluate import Item, evaluate_judge, fact_checklist, judge
from rubricflow.methods.deltarubric.planning import (
    checklist_keys,
    checklist_room,
    decides,
    keys_decide,
    execute,
    facts_verdict,
    format_room,
    separating_shares,
)
from rubricflow.methods.deltarubric.synthetic import build_pairs
from rubricflow.methods.deltarubric.targets import (
    check_keys,
    check_text,
    exhaustive_checks,
    reference_checks,
    separates,
)

# six colours: more claim keys (6 + answer) than the 4-check budget
FACTS = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0], ["yellow", 0], ["purple", 1],
                                            ["orange", 0]], "intermediate": [], "target": "red",
         "question_type": "count"}


def _trace(**counts):
    vals = {k: v for k, v in FACTS["perception"]} | counts
    body = ", ".join(f"{k} = {v}" for k, v in vals.items())
    return f"{body}. so red = {vals['red']}. \\boxed{{{vals['red']}}}"


def _pair(a, b, pid="p", preferred="A"):
    return PreferencePair(pid, ["i.png"], "How many red shapes are there?", a, b, preferred, facts=FACTS,
                          meta={"kind": "partial"})


def test_executing_a_checklist_against_the_facts():
    # both misread green (1 vs 2 and 3) and yellow; B also misreads purple, the decisive key
    p = _pair(_trace(green=2, yellow=1), _trace(green=3, yellow=2, purple=3))
    assert execute(p, ["green", "yellow", "purple", "red"]) == ["neither", "neither", "A", "both"]
    assert facts_verdict(p, ["green", "yellow", "purple"]) == "A"
    assert facts_verdict(p, ["green", "yellow", "red", "answer"]) is None  # differs on two claims, decides nothing
    assert facts_verdict(p.swapped(), ["purple"]) == "B"
    # the static-exhaustive checklist: every key in the facts' order, cut to the budget; it misses purple here
    assert [c.id for c in exhaustive_checks(p)] == ["red", "green", "blue", "yellow"]
    assert [c.id for c in exhaustive_checks(p, None)] == [k for k, _ in FACTS["perception"]] + ["answer"]
    assert checklist_keys(p, "exhaustive") == ["red", "green", "blue", "yellow"]
    assert set(checklist_keys(p, "oracle")) == {"green", "yellow", "purple"}
    rand = checklist_keys(p, "random", seed=3)
    assert len(rand) == 4 and len(set(rand)) == 4 and rand == checklist_keys(p, "random", seed=3)
    assert separating_shares([p], "exhaustive") == {"separating": 0.0, "right": 0.0}
    assert separating_shares([p], "oracle") == {"separating": 1.0, "right": 1.0}


def test_a_written_checklist_decides_only_where_its_checks_favour_one_response_against_the_facts():
    """``decides`` executes the planner's written checks against the facts; ``separates`` only asks for a check on a
    claim the responses disagree on, which a check on a claim both misread (differently) satisfies."""
    p = _pair(_trace(green=2, yellow=1), _trace(green=3, yellow=2, purple=3))
    text = {k: check_text("counting", k) for k in ("red", "green", "yellow", "purple", "blue")}
    confounds = [text["green"], text["yellow"]]
    assert check_keys(p, [*confounds, "count the green shapes", "look closely."]) == ["green", "yellow"]
    assert separates(p, confounds) and not decides(p, confounds)  # differ, but both wrong: nothing decided
    assert decides(p, [*confounds, text["purple"]]) and decides(p, [text["purple"].upper()])
    assert not decides(p, [text["red"], text["blue"]]) and not decides(p, [])
    # the generative judge names claim keys, not checks: the same execution; a key the facts lack, or one named
    # twice, adds nothing
    assert keys_decide(p, ["green", "yellow", "purple"]) and not keys_decide(p, ["green", "yellow"])
    assert not keys_decide(p, ["Purple", "cyan"]) and keys_decide(p, ["purple", "purple", "green"])
    # named twice, purple would outvote a key favouring B: it counts once
    q = _pair(_trace(purple=3), _trace(green=3))
    assert execute(q, ["purple", "green"]) == ["B", "A"] and not keys_decide(q, ["purple", "purple", "green"])


def test_the_reference_puts_the_decisive_key_first_only_when_the_perception_overflows_the_budget():
    # five differing perception keys (four shared misreadings, then the decisive one, last in the facts' order)
    p = _pair(_trace(red=1, green=2, blue=1, yellow=1), _trace(red=3, green=3, blue=2, yellow=2, orange=1))
    assert [c.id for c in reference_checks(p)] == ["orange", "red", "green", "blue"]
    # four or fewer: the facts' order, as on the narrow pairs
    q = _pair(_trace(green=2, yellow=1), _trace(green=3, yellow=2, purple=3))
    assert [c.id for c in reference_checks(q)] == ["green", "yellow", "purple"]


def test_checklist_room_per_kind_and_its_table():
    decisive = PreferencePair("d", ["i.png"], "q", _trace(), _trace(red=3), "A", facts=FACTS,
                              meta={"kind": "decisive"})
    partial = _pair(_trace(green=2, yellow=1), _trace(green=3, yellow=2, purple=3))
    room = checklist_room([decisive, partial, PreferencePair("x", [], "q", "a", "b", "A")])  # no facts: left out
    assert room["n"] == 2 and room["budget"] == 4 and room["mean_keys"] == 7
    assert room["decisive"]["exhaustive"] == {"separating": 1.0, "right": 1.0}
    assert room["partial"]["exhaustive"] == {"separating": 0.0, "right": 0.0}
    assert room["all"]["oracle"] == {"separating": 1.0, "right": 1.0}
    table = format_room(room)
    assert table.splitlines()[2].split()[:4] == ["all", "2", "50.0", "/"]


def test_the_wide_pairs_leave_the_planner_something_to_choose_the_narrow_ones_do_not(tmp_path):
    narrow = build_pairs(tmp_path / "n", ["counting"], {"train": 60}, seed=3, partial_frac=0.5)
    room = checklist_room(narrow)
    # four claim keys (three colours and the answer) fit the budget: the fixed checklist is the whole checklist
    assert room["mean_keys"] == 4 and room["all"]["exhaustive"] == room["all"]["oracle"]
    assert room["decisive"]["exhaustive"]["separating"] == 1.0
    wide = build_pairs(tmp_path / "w", ["counting", "barchart"], {"train": 60}, seed=3, partial_frac=0.5,
                       form="wide", keys=10, confounds=3)
    room = checklist_room(wide)
    assert room["mean_keys"] > 10
    assert room["partial"]["oracle"] == {"separating": 1.0, "right": 1.0}
    assert room["partial"]["exhaustive"]["separating"] < 0.5 and room["all"]["exhaustive"]["separating"] < 0.5


class _Verifier:
    """Scripted verifier: one evidence line per check of its prompt, then the verdict the checks' tally favours
    against the facts (A on a tie)."""

    def __init__(self, pairs):
        self.pairs = pairs

    def generate(self, requests, n=1, max_new_tokens=48, temperature=0.0, top_p=1.0, seed=None):
        out = []
        for r in requests:
            (p,) = [p for p in self.pairs if f"Response A: {p.response_a}\nResponse B: {p.response_b}" in r.prompt]
            checks = re.findall(r"^\d+\. (.*)$", r.prompt.split("Checks:\n", 1)[1], flags=re.M)
            keys = [c.id for c in exhaustive_checks(p, None) if c.text in checks]
            assert len(keys) == len(checks)
            lines = [f"{i}. {k} -> {f}" for i, (k, f) in enumerate(zip(keys, execute(p, keys)), 1)]
            out.append([Completion([], "\n".join(lines + [f"verdict: {facts_verdict(p, keys) or 'A'}"]), True)])
        return out


class _Proc:
    def chat_prompt(self, text, n_images=1, images_last=False):
        return text


def test_the_static_exhaustive_mode_executes_the_same_fixed_checklist_for_every_pair(tmp_path):
    pairs = build_pairs(tmp_path, ["counting"], {"test": 24}, seed=5, partial_frac=1.0, form="wide", keys=8,
                        confounds=2)
    texts = {tuple(fact_checklist(p, "exhaustive")) for p in pairs}
    assert texts == {("count the red shapes.", "count the green shapes.", "count the blue shapes.",
                      "count the yellow shapes.")}
    assert len(fact_checklist(pairs[0], "exhaustive", "all")) == 9  # eight colours and the answer
    items = [Item(p, []) for p in pairs]
    gen = _Verifier(pairs)
    res = judge(gen, _Proc(), items, "exhaustive", {"planner": 40, "verifier": 160})
    assert all(r.checklist == list(next(iter(texts))) and r.format_ok for r in res)
    table = evaluate_judge(gen, _Proc(), items, ("exhaustive", "oracle"), {"planner": 40, "verifier": 160},
                           exhaustive="all")
    # a verifier that executes its checks perfectly: right on every pair with every key or the reference checklist
    assert table["modes"]["exhaustive"]["accuracy"] == 1.0 and table["modes"]["oracle"]["accuracy"] == 1.0
    budget = evaluate_judge(gen, _Proc(), items, ("exhaustive",), {"planner": 40, "verifier": 160})
    room = table["checklist_room"]["all"]
    # with the budget it is right where the fixed four checks separate the pair, and at chance (A on a tie) elsewhere
    ties_a = sum(p.preferred == "A" and facts_verdict(p, checklist_keys(p, "exhaustive")) is None for p in pairs)
    assert budget["modes"]["exhaustive"]["accuracy"] == pytest.approx(room["exhaustive"]["right"] + ties_a / len(pairs))
    assert room["exhaustive"]["separating"] < room["oracle"]["separating"] == 1.0
