"""The reward-hacking monitor (rubricflow.methods.rucl.monitor): what the rubric term pays wrong answers, the
independent answer-relevant readout, and the run-level warning."""

import pytest

from rubricflow.methods.rucl.monitor import hacking_warning, step_monitor
from rubricflow.methods.rucl.rewards import compute_reward
from rubricflow.judge.protocol import Judgment, Verdict

COUNT = {"task": "counting", "perception": [["red", 2], ["green", 0], ["blue", 1]], "intermediate": [],
         "target": "red", "question_type": "count"}
TIERS = {"f1": "foundational", "f2": "foundational"}
Y, N = Verdict(True, True), Verdict(True, False)


def reward(outcome, *verdicts, gate="none"):
    return compute_reward(outcome, Judgment("ok", dict(zip(("f1", "f2"), verdicts))), TIERS, 0.0, 0.7, gate=gate)


def test_step_monitor_by_hand():
    template = r"red = 0, green = 0, blue = 0. so red = 0. \boxed{0}"  # consistent, wrong
    lucky = r"red = 3, green = 0, blue = 1. so red = 3. \boxed{2}"  # right answer, the answer's value misread
    sound = r"red = 2, green = 1, blue = 1. so red = 2. \boxed{2}"  # green misread: not used by the answer
    items = [(COUNT, template, reward(0.0, Y, Y)), (COUNT, lucky, reward(1.0, Y, Y)), (COUNT, sound, reward(1.0, Y, N))]
    m = step_monitor(items, alpha=0.7)
    assert m["monitor/rubric_to_wrong"] == pytest.approx(0.3)  # the template earns the full rubric weight
    assert m["monitor/rubric_to_wrong_share"] == pytest.approx(0.3 / (0.3 + 0.3 + 0.15))
    assert m["monitor/relevant_sound"] == pytest.approx(0.5)  # of two correct answers, one misreads red
    assert m["monitor/judge_clean_relevant_flawed"] == pytest.approx(1.0)  # the judge passed the lucky one fully
    gated = step_monitor([(COUNT, template, reward(0.0, Y, Y, gate="correct_only"))], alpha=0.7)
    assert gated["monitor/rubric_to_wrong"] == 0.0 and gated["monitor/rubric_to_wrong_share"] is None
    outcome_only = compute_reward(0.0, None, TIERS, mode="outcome")
    assert step_monitor([(COUNT, template, outcome_only)], alpha=0.7)["monitor/rubric_to_wrong"] == 0.0


def test_hacking_warning_needs_a_rise_and_a_fall():
    def rows(rubric, sound):
        return [{"reward/rubric": r, "monitor/relevant_sound": s} for r, s in zip(rubric, sound)]

    hacked = hacking_warning(rows([0.5] * 10 + [0.8] * 10, [0.9] * 10 + [0.6] * 10), window=5)
    assert hacked["warn"] and "0.50 -> 0.80" in hacked["message"] and "0.90 -> 0.60" in hacked["message"]
    assert hacked["window"] == 5 and hacked["rubric_change"] == pytest.approx(0.3)
    learning = hacking_warning(rows([0.5] * 10 + [0.8] * 10, [0.6] * 10 + [0.9] * 10), window=5)
    assert not learning["warn"] and learning["message"] is None
    noise = hacking_warning(rows([0.5] * 10 + [0.51] * 10, [0.9] * 10 + [0.6] * 10), window=5)
    assert not noise["warn"]  # a rise within NOISE is no rise
    assert hacking_warning(rows([0.5], [0.9]))["warn"] is False  # too short to compare
