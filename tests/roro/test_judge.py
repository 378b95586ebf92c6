"""What the Judge and the Rubricor see and produce, and the pairwise-accuracy arithmetic."""

import random

import pytest

from rubricflow.methods.roro.routing import LRM, SLM, StepRecord, Trajectory
from rubricflow.methods.roro.prompts import (
    ADDED_TOKENS,
    FAMILIES,
    judge_input,
    random_judgments,
    random_rubric,
    rubricor_input,
    u_digit,
)
from rubricflow.methods.roro.rubric import parse_criterion_judgments, parse_rubric, render_judgment_json, render_rubric_json
from rubricflow.methods.roro.rubricor_judge import ProblemView, mean_score, pair_credit, problem_views, warm_start_examples


def _traj(writers=(SLM, LRM, SLM), us=(0.12, 0.71, 0.0), policy="all-slm"):
    texts = ["7 + 5 = 12", "12 * 2 = 24", "#### 24"]
    steps = [StepRecord(k, w, t, 5, t, 5, u, k != 1, t if w == LRM else None, 5 if w == LRM else 0, True, True, True,
                        [u] * 5, int(w == LRM)) for k, (w, t, u) in enumerate(zip(writers, texts, us))]
    return Trajectory("p1", "train", policy, "Start with 7. Add 5. Multiply by 2.", steps, True, True)


def test_judge_sees_writers_and_uncertainty_not_the_truth():
    rubric = random_rubric(random.Random(0), 3)
    text = judge_input("Start with 7. Add 5. Multiply by 2.", rubric, _traj())
    assert "1 S1: 7 + 5 = 12\n2 L7: 12 * 2 = 24\n3 S0: #### 24\nLRM steps: 1 of 3" in text
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
    views = problem_views([_traj(), _traj(writers=(SLM, SLM, SLM), policy="enumerate")])
    assert views == {"p1": ProblemView("Start with 7. Add 5. Multiply by 2.", [0.12, 0.71, 0.0])}
    rub_ex, jud_ex = warm_start_examples(views, [_traj()], rng, per_problem=3)
    assert len(rub_ex) == 3 and len(jud_ex) == 1
    assert all(parse_rubric(t).status == "ok" for _, t in rub_ex)
    assert jud_ex[0][1].startswith('{"criterion_judgments": [{"criterion": "risky step to LRM", "score": ')
    assert sum(t.count(tok) for _, t in jud_ex for tok in ADDED_TOKENS[:5]) >= 3  # boilerplate occurs in targets


def test_problem_views_need_the_all_slm_route():
    # the view is the route with no LRM call, whatever policy produced it; a policy named all-slm is not enough
    with pytest.raises(ValueError, match="no all-slm trajectory for problems \\['p1'\\]"):
        problem_views([_traj(policy="random-0.5"), _traj(policy="all-slm")])


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
    from rubricflow.methods.roro.prompts import literal_satisfied, noisy_judgments, steps_look_right

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


# ------------------------------------------------------------------------------------------------------------
# the process score: the paper's sampled sum(weight * score * 1[satisfied]), and the probability-weighted option

RUBRIC2 = [{"criterion": "few LRM steps", "weight": 0.75, "score_guidance": ""},
           {"criterion": "steps are right", "weight": 0.25, "score_guidance": ""}]


def _judgment(s1, v1, s2, v2):
    return ('{"criterion_judgments": [{"criterion": "few LRM steps", "score": %s, "satisfied": %s}, '
            '{"criterion": "steps are right", "score": %s, "satisfied": %s}]}' % (s1, v1, s2, v2))


class ScriptedJudge:
    """Returns fixed judgment texts per call (sampled: the listed samples; greedy: the first)."""

    def __init__(self, texts):
        self.texts, self.calls = texts, []

    def generate(self, contents, n=1, temperature=0.0, seed=None):
        self.calls.append((len(contents), n, temperature))
        return [list(self.texts[:n]) for _ in contents]


def test_sampled_score_is_the_mean_of_the_papers_formula_with_numeric_scores():
    from rubricflow.methods.roro.rubricor_judge import process_scores

    texts = [_judgment("0.25", "true", "1.0", "true"),  # 0.75 * 0.25 + 0.25 * 1.0 = 0.4375
             _judgment("1.0", "false", "0.6", "true"),  # 0 + 0.25 * 0.6 = 0.15
             "no JSON at all",  # failed: left out of the mean, not counted 0
             _judgment("0.5", "true", "0.5", "false")]  # 0.375
    judge = ScriptedJudge(texts)
    (score,) = process_scores(judge, [("q", RUBRIC2, _traj())], "sampled", 4, 1.0, 0)
    assert score == pytest.approx((0.4375 + 0.15 + 0.375) / 3)
    assert judge.calls == [(1, 4, 1.0)]
    (none,) = process_scores(ScriptedJudge(["garbage"] * 2), [("q", RUBRIC2, _traj())], "sampled", 2, 1.0, 0)
    assert none is None  # every judgment failed: missing, never 0
    with pytest.raises(ValueError, match="roro.rubricor_judge.score_mode: unknown mode 'mean'"):
        process_scores(judge, [("q", RUBRIC2, _traj())], "mean", 4, 1.0, 0)


def test_expected_score_takes_the_written_score_and_the_verdict_probability():
    import torch

    from rubricflow.methods.roro.rubricor_judge import RubricLM, criterion_expected, expected_scores, routing_tokenizer_corpus

    assert criterion_expected(0.5, 0.25, p_true=0.3, p_false=0.1) == pytest.approx(0.5 * 0.25 * 0.75)
    # a tiny real tokenizer and a model with flat logits: P(true) = P(false), so each criterion counts
    # weight * score * 0.5 with the score as written ("0.25" is 0.25, not the 0.5 its first digit would give)
    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.methods.roro.prompts import ADDED_TOKENS

    corpus = routing_tokenizer_corpus(problem_views([_traj(writers=(SLM, SLM, SLM))]),
                                      [_traj(writers=(SLM, SLM, SLM))], 0)
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                                                  vocab_size=320, max_positions=512))
    tok.add_tokens(ADDED_TOKENS)

    class Flat(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, **_):
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, len(tok))})()

    judge = RubricLM(model, tok, "judge")
    judge.model = Flat()
    judge.generate = lambda contents, n=1, temperature=0.0, seed=None: [
        [_judgment("0.25", "true", "1.0", "false")] for _ in contents]
    (score,) = expected_scores(judge, [("q", RUBRIC2, _traj())])
    assert score == pytest.approx(0.5 * (0.75 * 0.25 + 0.25 * 1.0))
    judge.generate = lambda contents, n=1, temperature=0.0, seed=None: [[_judgment("0.25", "true", "x", "true")]
                                                                        for _ in contents]
    assert expected_scores(judge, [("q", RUBRIC2, _traj())]) == [None]  # an incomplete greedy judgment: missing


def test_phase_selection_reads_val_accuracy_only():
    from rubricflow.methods.roro.rubricor_judge import select_phase

    rows = [{"val_pairwise_acc": 0.52}, {"val_pairwise_acc": 0.61}, {"val_pairwise_acc": 0.61},
            {"val_pairwise_acc": 0.55}]
    assert select_phase(rows, "val") == 1  # the best; ties: the earliest
    assert select_phase(rows, "last") == 3
    with pytest.raises(ValueError, match="select_on: unknown rule 'train'"):
        select_phase(rows, "train")


def test_the_alternation_refuses_pairs_of_the_wrong_split():
    from rubricflow.methods.roro.pairs import Pair
    from rubricflow.methods.roro.rubricor_judge import alternate

    t_train, t_test = _traj(writers=(SLM, SLM, SLM)), _traj(writers=(SLM, SLM, SLM))
    t_test.problem_id, t_test.split = "p2", "test"
    trajs = [t_train, t_test]
    with pytest.raises(ValueError, match=r"val_pairs must be pairs of val problems, got problems of split \['test'\]"):
        alternate(None, None, None, trajs, [Pair("p1", 0, 0, "cost")], [Pair("p2", 1, 1, "cost")])


def test_pair_accuracy_per_category_by_hand():
    from rubricflow.methods.roro.pairs import Pair
    from rubricflow.methods.roro.rubricor_judge import pair_accuracy

    right, wrong = _traj(), _traj()
    wrong.outcome = False
    trajs = [right, wrong, right, wrong]
    pairs = [Pair("p1", 0, 1, "outcome"), Pair("p1", 2, 0, "cost"), Pair("p1", 0, 2, "process"),
             Pair("p1", 1, 3, "process")]
    scores = {0: 0.9, 1: 0.2, 2: 0.9, 3: None}
    acc = pair_accuracy(pairs, trajs, scores)
    # outcome 1, cost tie 0.5, process-right tie 0.5, process-wrong missing 0
    assert acc["pairwise_acc"] == pytest.approx(2.0 / 4) and acc["strict_acc"] == pytest.approx(1 / 4)
    assert (acc["acc_outcome"], acc["acc_cost"], acc["acc_process_right"], acc["acc_process_wrong"]) == (
        1.0, 0.5, 0.5, 0.0)
    assert acc["acc_process"] == pytest.approx(0.25) and acc["n_process"] == 2.0


def test_warm_start_rubrics_never_weigh_a_family_zero():
    # a greedy Rubricor takes each weight's most likely digit; a 0.0 among the warm targets made one write 0.0 for
    # every family (a rubric that fails to parse)
    rng = random.Random(3)
    weights = [c["weight"] for _ in range(500) for c in random_rubric(rng, 4)]
    assert min(weights) == 0.1 and max(weights) == 0.9
    assert parse_rubric(render_rubric_json([{**c, "weight": 0.0} for c in random_rubric(rng, 4)])).status == "failed"


def test_the_warm_start_trains_each_role_with_its_own_steps_and_learning_rate():
    """roro.rubricor_judge.judge.warm_steps / lr (tiny profile 1500 at 1e-3, chosen on val) reach the Judge's warm
    start, and the Rubricor's own values reach the Rubricor's; the alternation's rounds do not use them."""
    import torch

    from rubricflow.config import config_from_dict
    from rubricflow.methods.roro.pairs import Pair
    from rubricflow.methods.roro.rubricor_judge import alternate

    rj = config_from_dict({"roro": {"rubricor_judge": {"rounds": 0, "judge": {"warm_steps": 1500, "lr": 1e-3}}}}
                          ).roro.rubricor_judge
    rubric = [{**c, "weight": 0.5} for c in random_rubric(random.Random(0), 3)]

    class StubLM:
        def __init__(self, text):
            self.text, self.calls, self.model, self._greedy = text, [], torch.nn.Linear(1, 1), {}

        def sft(self, examples, steps, batch_size, lr, seed):
            self.calls.append((len(examples), steps, lr))
            return []

        def generate(self, contents, n=1, temperature=0.0, seed=None):
            return [[self.text] * n for _ in contents]

    judge = StubLM(render_judgment_json(random_judgments(random.Random(1), rubric)))
    rubricor = StubLM(render_rubric_json(rubric))
    a, b = _traj(writers=(SLM, SLM, SLM)), _traj(writers=(SLM, SLM, SLM))
    b.problem_id, b.split = "p2", "val"
    rows = alternate(judge, rubricor, rj, [a, b], [Pair("p1", 0, 0, "cost")], [Pair("p2", 1, 1, "cost")])
    assert judge.calls == [(1, 1500, 1e-3)] and rubricor.calls == [(4, 80, 3e-3)]
    assert [(r["phase"], r["selected"]) for r in rows] == [("warm", True)]
