"""What the Judge and the Rubricor see and produce, and the pairwise-accuracy arithmetic."""

import random

import pytest

from rubricflow.roro.routing import LRM, SLM, StepRecord, Trajectory
from rubricflow.roro.prompts import (
    ADDED_TOKENS,
    FAMILIES,
    judge_input,
    random_judgments,
    random_rubric,
    rubricor_input,
    u_digit,
)
from rubricflow.roro.rubric import parse_criterion_judgments, parse_rubric, render_judgment_json, render_rubric_json
from rubricflow.roro.rubricor_judge import ProblemView, mean_score, pair_credit, problem_views, warm_start_examples


def _traj(writers=(SLM, LRM, SLM), us=(0.12, 0.71, 0.0), policy="all-slm"):
    texts = ["7 + 5 = 12", "12 * 2 = 24", "#### 24"]
    steps = [StepRecord(k, w, t, 5, t, 5, u, k != 1, t if w == LRM else None, 5 if w == LRM else 0, True, True, True,
                        [u] * 5, int(w == LRM)) for k, (w, t, u) in enumerate(zip(writers, texts, us))]
    return Trajectory("p1", "train", policy, "Start with 7. Add 5. Multiply by 2.", steps, True, True)


def test_judge_sees_writers_and_uncertainty_not_the_truth():
    rubric = random_rubric(random.Random(0), 3)
    text = judge_input("Start with 7. Add 5. Multiply by 2.", rubric, _traj())
    assert "1 SLM u=1: 7 + 5 = 12\n2 LRM u=7: 12 * 2 = 24\n3 SLM u=0: #### 24\nLRM steps: 1 of 3" in text
    for c in rubric:
        assert f"- {c['criterion']}: {c['score_guidance']}" in text
    for hidden in ("correct", "True", "outcome", "answer"):  # no checks, no reference answer
        assert hidden not in text


def test_rubricor_input_is_label_free():
    text = rubricor_input("Start with 7. Add 5.", [0.05, 0.93])
    assert text.splitlines() == ["Write a routing rubric.", "Problem: Start with 7. Add 5.", "SLM uncertainty: 0 9"]
    assert [u_digit(x) for x in (0.0, 0.099, 0.1, 0.95, 1.0)] == [0, 0, 1, 9, 9]


def test_warm_start_targets_are_the_paper_shapes():
    rng = random.Random(1)
    rub = random_rubric(rng, 4)
    assert [c["criterion"] for c in rub] == [name for name, _ in FAMILIES] and any(c["weight"] for c in rub)
    pr = parse_rubric(render_rubric_json(rub))
    assert pr.status == "ok" and sum(c["weight"] for c in pr.criteria) == pytest.approx(1.0)
    js = random_judgments(rng, pr.criteria)
    pj = parse_criterion_judgments(render_judgment_json(js), pr.criteria)
    assert pj.status == "ok" and pj.missing == []
    views = problem_views([_traj()])
    assert views == {"p1": ProblemView("Start with 7. Add 5. Multiply by 2.", [0.12, 0.71, 0.0])}
    rub_ex, jud_ex = warm_start_examples(views, [_traj()], rng, per_problem=3)
    assert len(rub_ex) == 3 and len(jud_ex) == 1
    assert all(parse_rubric(t).status == "ok" for _, t in rub_ex)
    assert jud_ex[0][1].startswith('{"criterion_judgments": [{"criterion": "risky step to LRM", "score": ')
    assert sum(t.count(tok) for _, t in jud_ex for tok in ADDED_TOKENS[:5]) >= 3  # boilerplate occurs in targets


def test_problem_views_need_the_all_slm_route():
    with pytest.raises(ValueError, match="no all-slm trajectory for problems \\['p1'\\]"):
        problem_views([_traj(policy="random-0.5")])


def test_pair_credit_and_mean_score():
    assert pair_credit(0.7, 0.2) == 1.0
    assert pair_credit(0.2, 0.2) == 0.5
    assert pair_credit(0.1, 0.2) == 0.0
    assert pair_credit(None, 0.2) == 0.0 and pair_credit(0.9, None) == 0.0  # missing counts as not ordered

    class J:  # minimal ParsedJudgment stand-ins
        def __init__(self, score):
            self.score = score

    assert mean_score([J(0.5), J(None), J(1.0)]) == pytest.approx(0.75)
    assert mean_score([J(None), J(None)]) is None


def test_literal_readings_of_the_criterion_families():
    from rubricflow.roro.prompts import literal_satisfied, noisy_judgments, steps_look_right

    t = _traj()  # SLM u=1, LRM u=7, SLM u=0; 7 + 5 = 12 / 12 * 2 = 24 / #### 24
    assert literal_satisfied("risky step to LRM", {"k": 2}, t) and not literal_satisfied("risky step to LRM", {"k": 1}, t)
    assert not literal_satisfied("risky step to LRM", {"k": 9}, t)  # no such step
    assert literal_satisfied("uncertain steps to LRM", {"d": 1}, t)  # SLM steps have u 1 and 0
    assert not literal_satisfied("uncertain steps to LRM", {"d": 0}, t)
    assert literal_satisfied("few LRM steps", {"m": 1}, t) and not literal_satisfied("few LRM steps", {"m": 0}, t)
    assert steps_look_right(t)
    t.steps[1].text = "12 * 2 = 25"  # a visible arithmetic slip
    assert not steps_look_right(t) and not literal_satisfied("steps are right", {}, t)
    rub = [{"criterion": "few LRM steps", "params": {"m": 1}, "weight": 1.0, "score_guidance": ""}]
    assert noisy_judgments(random.Random(0), rub, t, 0.0)[0]["satisfied"] is True
    flips = sum(not noisy_judgments(random.Random(s), rub, t, 0.5)[0]["satisfied"] for s in range(400))
    assert 160 < flips < 240  # label_noise 0.5 is a coin
