"""What the Judge and the Rubricor see, and the templated warm-start content."""

import random
from dataclasses import replace

from rubricflow.methods.roro.judge.prompts import judge_input, random_rubric, rubricor_input, u_digit
from rubricflow.methods.roro.judge.rubric import criterion, parse_rubric, render_rubric_json
from tests.roro.test_judge import _traj


def test_judge_sees_writers_and_uncertainty_not_the_truth():
    rubric = random_rubric(random.Random(0), 3)
    text = judge_input("Start with 7. Add 5. Multiply by 2.", rubric, _traj())
    assert "1 S1: 7 + 5 = 12\n2 L7: 12 * 2 = 24\n3 S0: #### 24\nLRM steps: 1 of 3" in text
    for c in rubric:
        assert f"- {c.id}: {c.guidance}" in text
    for hidden in ("correct", "True", "outcome", "answer"):  # no checks, no reference answer
        assert hidden not in text


def test_rubricor_input_is_label_free():
    text = rubricor_input("Start with 7. Add 5.", [0.05, 0.93])
    assert text.splitlines() == ["Write a routing rubric.", "Problem: Start with 7. Add 5.", "SLM uncertainty: 0 9"]
    assert [u_digit(x) for x in (0.0, 0.099, 0.1, 0.95, 1.0)] == [0, 0, 1, 9, 9]


def test_literal_readings_of_the_criterion_families():
    from rubricflow.methods.roro.judge.prompts import literal_satisfied, noisy_judgments, steps_look_right

    t = _traj()  # SLM u=1, LRM u=7, SLM u=0; 7 + 5 = 12 / 12 * 2 = 24 / #### 24
    assert (literal_satisfied("risky step to LRM", {"k": 2}, t)
            and not literal_satisfied("risky step to LRM", {"k": 1}, t))
    assert not literal_satisfied("risky step to LRM", {"k": 9}, t)  # no such step
    assert literal_satisfied("uncertain steps to LRM", {"d": 1}, t)  # SLM steps have u 1 and 0
    assert not literal_satisfied("uncertain steps to LRM", {"d": 0}, t)
    assert literal_satisfied("few LRM steps", {"m": 1}, t) and not literal_satisfied("few LRM steps", {"m": 0}, t)
    assert steps_look_right(t)
    t.steps[1].text = "12 * 2 = 25"  # a visible arithmetic slip
    assert not steps_look_right(t) and not literal_satisfied("steps are right", {}, t)
    rub = [criterion("few LRM steps", 1.0, "1.0 if at most 1 LRM steps")]  # the parameter is read from the guidance
    assert noisy_judgments(random.Random(0), rub, t, 0.0)["few LRM steps"].satisfied is True
    flips = sum(not noisy_judgments(random.Random(s), rub, t, 0.5)["few LRM steps"].satisfied for s in range(400))
    assert 160 < flips < 240  # label_noise 0.5 is a coin


def test_warm_start_rubrics_never_weigh_a_family_zero():
    # a greedy Rubricor takes each weight's most likely digit; a 0.0 among the warm targets made one write 0.0 for
    # every family (a rubric that fails to parse)
    rng = random.Random(3)
    weights = [c.weight for _ in range(500) for c in random_rubric(rng, 4)]
    assert min(weights) == 0.1 and max(weights) == 0.9
    assert parse_rubric(render_rubric_json([replace(c, weight=0.0) for c in random_rubric(rng, 4)])).status == "failed"


def test_a_judge_that_reads_the_problem_sees_it_and_finds_a_misread_operand():
    from rubricflow.methods.roro.judge.prompts import literal_satisfied, steps_look_right, visible_slm_errors

    q = "Start with 7. Add 5. Multiply by 2."
    rubric = random_rubric(random.Random(0), 3)
    steps_only, with_problem = judge_input(q, rubric, _traj()), judge_input(q, rubric, _traj(), "problem")
    assert "Problem:" not in steps_only and q not in steps_only
    assert with_problem.splitlines()[:2] == ["Judge the routing.", f"Problem: {q}"]
    assert with_problem.replace(f"\nProblem: {q}", "") == steps_only  # the rest is the same message

    t = _traj()  # SLM, LRM, SLM: 7 + 5 = 12 / 12 * 2 = 24 / #### 24, the problem's own chain
    assert steps_look_right(t, True) and visible_slm_errors(t, True) == 0
    t.steps[0].text, t.steps[1].text, t.steps[2].text = "7 + 6 = 13", "13 * 2 = 26", "#### 26"  # misread operand
    assert steps_look_right(t) and visible_slm_errors(t) == 0  # right arithmetic: invisible in the steps alone
    assert not steps_look_right(t, True) and visible_slm_errors(t, True) == 1  # the SLM's step 1, not the LRM's
    assert literal_satisfied("SLM steps are right", {}, t) and not literal_satisfied("SLM steps are right", {}, t, True)
    t.steps[0].text, t.steps[1].text = "7 + 5 = 12", "12 + 2 = 14"  # the LRM applies the wrong operation
    t.steps[2].text = "#### 14"
    assert visible_slm_errors(t, True) == 0 and not steps_look_right(t, True)
    assert literal_satisfied("SLM steps are right", {}, t, True) and not literal_satisfied("steps are right", {}, t,
                                                                                           True)
    t.steps[0].text = "8 + 4 = 12"  # does not start from the start value (the steps alone cannot tell)
    t.steps[1].text, t.steps[2].text = "12 * 2 = 24", "#### 24"
    assert steps_look_right(t) and not steps_look_right(t, True)


def test_a_reader_of_the_problem_counts_left_out_and_added_operations():
    from rubricflow.methods.roro.judge.prompts import steps_look_right

    t = _traj()
    t.steps[1].text, t.steps[2].text = "#### 12", "#### 12"  # stops after the first operation
    t.steps = t.steps[:2]
    assert steps_look_right(t) and not steps_look_right(t, True)
    t2 = _traj()
    t2.question = "Start with 7. Add 5."  # the route applies one operation more than the problem has
    assert steps_look_right(t2) and not steps_look_right(t2, True)


def test_a_reader_of_the_problem_refuses_a_question_it_cannot_read():
    import pytest

    from rubricflow.methods.roro.judge.prompts import steps_look_right

    t = _traj()
    t.question = "Natalia sold clips to 48 of her friends in April. How many did she sell?"
    assert steps_look_right(t)  # the steps alone need no question
    with pytest.raises(ValueError, match=r"problem p1: a reader of the problem .*judge_reads: problem.* synthetic"):
        steps_look_right(t, True)


def test_warm_start_targets_of_a_problem_reader_follow_its_reading():
    from rubricflow.methods.roro.judge.alternation import warm_start_examples
    from rubricflow.methods.roro.judge.prompts import FAMILY_SETS
    from rubricflow.methods.roro.judge.rubricor import problem_views

    t = _traj(writers=("SLM", "SLM", "SLM"))  # the all-SLM route: the Rubricor's view of the problem
    t.steps[0].text, t.steps[1].text, t.steps[2].text = "7 + 6 = 13", "13 * 2 = 26", "#### 26"
    views = problem_views([t])
    six = FAMILY_SETS["six"]
    _, steps = warm_start_examples(views, [t], random.Random(0), label_noise=0.0, families=six)
    _, prob = warm_start_examples(views, [t], random.Random(0), label_noise=0.0, families=six, reads="problem")
    (m_steps, y_steps), (m_prob, y_prob) = steps[0], prob[0]
    assert "Problem:" not in m_steps and "Problem: Start with 7. Add 5. Multiply by 2." in m_prob
    right = '"SLM steps are right", "score": {}, "satisfied": {}'
    assert any(right.format(s, "true") in y_steps for s in ("0.5", "1.0"))
    assert any(right.format(s, "false") in y_prob for s in ("0.5", "1.0"))


def test_a_judge_with_a_calculator_reads_each_steps_check_against_the_problem():
    import pytest

    from rubricflow.methods.roro.judge.prompts import CHECK_MARKS, added_tokens

    q = "Start with 7. Add 5. Multiply by 2."
    rubric = random_rubric(random.Random(0), 3)
    t = _traj()
    t.steps[0].text, t.steps[1].text, t.steps[2].text = "7 + 6 = 13", "13 * 2 = 26", "#### 26"  # misread operand
    text = judge_input(q, rubric, t, "checked")
    assert f"Problem: {q}" in text
    assert "1 S1: 7 + 6 = 13 [wrong]\n2 L7: 13 * 2 = 26 [right]\n3 S0: #### 26 [right]\nLRM steps: 1 of 3" in text
    assert text.replace(" [wrong]", "").replace(" [right]", "") == judge_input(q, rubric, t, "problem")
    t.steps = t.steps + [replace(t.steps[2], index=3, text="#### 26")]  # a step after the final one
    assert judge_input(q, rubric, t, "checked").endswith("4 S0: #### 26 [wrong]\nLRM steps: 1 of 4")
    assert set(CHECK_MARKS) <= set(added_tokens(checked=True)) and not set(CHECK_MARKS) & set(added_tokens())
    with pytest.raises(ValueError, match=r"judge_reads: unknown reading 'tools'"):
        judge_input(q, rubric, t, "tools")
