"""The exact-reader ceiling of the criterion families (rubricflow.methods.roro.study.family_ceiling): its readers,
and that the rubric search finds what orders the pairs, chosen on train only."""

from dataclasses import replace

from rubricflow.methods.roro.env.routing import LRM, SLM
from rubricflow.methods.roro.judge.pairs import Pair
from rubricflow.methods.roro.judge.prompts import literal_satisfied, visible_slm_errors
from rubricflow.methods.roro.study.family_ceiling import CANDIDATES, GRADED, accuracy, best_static
from tests.roro.test_judge import _traj


def _route(writers, us, texts=None, slm_correct=None):
    t = _traj(writers, us)
    for i, s in enumerate(t.steps):
        if texts:
            s.text = texts[i]
        if slm_correct is not None:
            s.slm_correct = slm_correct[i]
    return t


def test_visible_errors_count_only_the_slm_steps_a_reader_can_check():
    t = _route((SLM, SLM, SLM), (0.1, 0.1, 0.1))
    assert visible_slm_errors(t) == 0
    t.steps[0].text = "7 + 5 = 13"  # bad arithmetic, and the next step starts from 12: one visible error (step 1)
    assert visible_slm_errors(t) == 2  # step 2 no longer starts from the previous result either
    lrm = _route((LRM, SLM, SLM), (0.1, 0.1, 0.1), texts=["7 + 5 = 13", "13 * 2 = 26", "#### 26"])
    assert visible_slm_errors(lrm) == 0  # the LRM's slip is not the SLM's; the rest follows from it
    hidden = _route((SLM, SLM, SLM), (0.1, 0.1, 0.1), texts=["7 + 4 = 11", "11 * 2 = 22", "#### 22"])
    assert visible_slm_errors(hidden) == 0  # a misread operand is right arithmetic: invisible without the problem


def test_the_sure_call_readers_count_lrm_calls_where_the_slm_was_sure():
    t = _route((SLM, LRM, SLM), (0.1, 0.25, 0.0))  # the LRM step's SLM uncertainty digit is 2
    assert not literal_satisfied("no call on a sure step", {"s": 2}, t)
    assert literal_satisfied("no call on a sure step", {"s": 1}, t)
    assert GRADED["no call on a sure step (graded)"][2](t, 2) == 1.0 - 1 / 3
    assert literal_satisfied("SLM steps are right", {}, t)
    t.steps[2].text = "#### 25"  # the SLM's final answer does not restate the result
    assert not literal_satisfied("SLM steps are right", {}, t)


def test_the_static_rubric_is_chosen_on_train_and_read_on_val():
    # process pairs: the chosen route calls the LRM where the SLM is unsure, the rejected one where it is sure
    trajs = [_route((SLM, LRM, SLM), (0.0, 0.9, 0.0)), _route((LRM, SLM, SLM), (0.0, 0.9, 0.0)),
             replace(_route((LRM, SLM, SLM), (0.9, 0.0, 0.0)), problem_id="p2"),
             replace(_route((SLM, LRM, SLM), (0.9, 0.0, 0.0)), problem_id="p2")]
    train, val = [Pair("p1", 0, 1, "process")], [Pair("p2", 2, 3, "process")]
    assert accuracy(train, trajs, lambda t: 1.0) == 0.5  # a tie counts half
    four = best_static(train, val, trajs, {"risky step to LRM": None, "few LRM steps": None})
    assert four["params"]["risky step to LRM"] == 2 and four["train"] == 1.0
    assert four["val"] == 0.0  # "step 2 to the LRM" fits train's problem and is wrong on val's: chosen on train only
    more = best_static(train, val, trajs, {"few LRM steps": None, **CANDIDATES})
    assert more["train"] == 1.0 and more["val"] == 1.0
    assert more["weights"]["few LRM steps"] == 0.0  # equal calls: the family cannot tell them apart


def test_the_report_renders_each_source_and_the_interval_over_rebuilt_draws(tmp_path):
    import json

    from rubricflow.methods.roro.study.family_ceiling import ceiling, render, render_json

    trajs = [_route((SLM, LRM, SLM), (0.0, 0.9, 0.0)), _route((LRM, SLM, SLM), (0.0, 0.9, 0.0)),
             replace(_route((LRM, SLM, SLM), (0.9, 0.0, 0.0)), problem_id="p2"),
             replace(_route((SLM, LRM, SLM), (0.9, 0.0, 0.0)), problem_id="p2")]
    pairs = {"train": [Pair("p1", 0, 1, "process")], "val": [Pair("p2", 2, 3, "process")]}
    rows = [{"source": s, **ceiling(trajs, pairs)} for s in ("main pipeline", "task seed 8", "task seed 9")]
    md = render(rows)
    assert "| task seed 9 | 1 / 1 |" in md and "Over the 2 rebuilt problem draws" in md
    assert "no call on a sure step" in md and "(s=" in md  # a chosen rubric names its parameter
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert render_json(tmp_path / "rows.json") == md
