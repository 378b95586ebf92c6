"""The warm start, the alternation's split checks and the phase selection."""

import random
from dataclasses import replace

import pytest

from rubricflow.methods.roro.judge.prompts import ADDED_TOKENS, FAMILIES, random_judgments, random_rubric
from rubricflow.methods.roro.env.routing import SLM
from rubricflow.methods.roro.judge.rubric import (
    parse_criterion_judgments,
    parse_rubric,
    render_judgment_json,
    render_rubric_json,
)
from rubricflow.methods.roro.judge.rubricor import ProblemView, problem_views
from rubricflow.methods.roro.judge.pairs import Pair
from rubricflow.methods.roro.judge.alternation import alternate, select_phase, warm_start_examples
from tests.roro.test_judge import _traj


def test_warm_start_targets_are_the_paper_shapes():
    rng = random.Random(1)
    rub = random_rubric(rng, 4)
    assert [c.id for c in rub] == [name for name, _ in FAMILIES] and any(c.weight for c in rub)
    pr = parse_rubric(render_rubric_json(rub))
    assert pr.status == "ok" and sum(c.weight for c in pr.value) == pytest.approx(1.0)
    js = random_judgments(rng, pr.value)
    pj = parse_criterion_judgments(render_judgment_json(js), pr.value)
    assert pj.status == "ok" and pj.missing == ()
    views = problem_views([_traj(), _traj(writers=(SLM, SLM, SLM), policy="enumerate")])
    assert views == {"p1": ProblemView("Start with 7. Add 5. Multiply by 2.", [0.12, 0.71, 0.0])}
    rub_ex, jud_ex = warm_start_examples(views, [_traj()], rng, per_problem=3)
    assert len(rub_ex) == 3 and len(jud_ex) == 1
    assert all(parse_rubric(t).status == "ok" for _, t in rub_ex)
    assert jud_ex[0][1].startswith('{"criterion_judgments": [{"criterion": "risky step to LRM", "score": ')
    assert sum(t.count(tok) for _, t in jud_ex for tok in ADDED_TOKENS[:5]) >= 3  # boilerplate occurs in targets


def test_phase_selection_reads_val_accuracy_only():
    rows = [{"val_pairwise_acc": 0.52}, {"val_pairwise_acc": 0.61}, {"val_pairwise_acc": 0.61},
            {"val_pairwise_acc": 0.55}]
    assert select_phase(rows, "val") == 1  # the best; ties: the earliest
    assert select_phase(rows, "last") == 3
    with pytest.raises(ValueError, match="select_on: unknown rule 'train'"):
        select_phase(rows, "train")


def test_phase_selection_on_the_process_pairs_reads_their_accuracy_then_the_overall_one():
    rows = [{"val_pairwise_acc": 0.60, "val_acc_process": 0.74}, {"val_pairwise_acc": 0.65, "val_acc_process": 0.60},
            {"val_pairwise_acc": 0.62, "val_acc_process": 0.74}, {"val_pairwise_acc": 0.66, "val_acc_process": 0.70}]
    assert select_phase(rows, "val") == 3
    assert select_phase(rows, "val_process") == 2  # 0.74 twice: the better overall accuracy
    rows[2]["val_pairwise_acc"] = 0.60
    assert select_phase(rows, "val_process") == 0  # a full tie: the earliest
    with pytest.raises(ValueError, match="val_process needs val process pairs"):
        select_phase([{"val_pairwise_acc": 0.6, "val_acc_process": None}], "val_process")


def test_the_alternation_refuses_pairs_of_the_wrong_split():
    t_train, t_test = _traj(writers=(SLM, SLM, SLM)), _traj(writers=(SLM, SLM, SLM))
    t_test.problem_id, t_test.split = "p2", "test"
    trajs = [t_train, t_test]
    with pytest.raises(ValueError, match=r"val_pairs must be pairs of val problems, got problems of split \['test'\]"):
        alternate(None, None, None, trajs, [Pair("p1", 0, 0, "cost")], [Pair("p2", 1, 1, "cost")])


class _WordLM:
    """A stand-in LM whose tokenizer splits on whitespace (what the generation-cap check counts)."""

    reads, reads_problem = "steps", False

    def __init__(self, name, max_new_tokens):
        self.name, self.max_new_tokens = name, max_new_tokens
        self.tokenizer = lambda text, add_special_tokens=False: {"input_ids": text.split()}


def test_a_generation_cap_shorter_than_the_warm_start_targets_is_refused():
    from rubricflow.methods.roro.judge.alternation import check_generation_cap

    examples = [("prompt", "a b c d"), ("prompt", "a b")]
    check_generation_cap(_WordLM("judge", 5), examples, "roro.rubricor_judge.judge.max_new_tokens")  # 4 + end fits
    with pytest.raises(ValueError, match=r"roro.rubricor_judge.judge.max_new_tokens=4: the judge's warm-start targets "
                                         r"run up to 4 tokens .* at least 5"):
        check_generation_cap(_WordLM("judge", 4), examples, "roro.rubricor_judge.judge.max_new_tokens")


def test_the_warm_start_trains_each_role_with_its_own_steps_and_learning_rate():
    """roro.rubricor_judge.judge.warm_steps / lr (tiny profile 1500 at 1e-3, chosen on val) reach the Judge's warm
    start, and the Rubricor's own values reach the Rubricor's; the alternation's rounds do not use them."""
    import torch

    from rubricflow.config import config_from_dict

    rj = config_from_dict({"roro": {"rubricor_judge": {"rounds": 0, "judge": {"warm_steps": 1500, "lr": 1e-3}}}}
                          ).roro.rubricor_judge
    rubric = [replace(c, weight=0.5) for c in random_rubric(random.Random(0), 3)]

    class StubLM(_WordLM):
        def __init__(self, text, name):
            super().__init__(name, 96)
            self.text, self.calls, self.model, self._greedy = text, [], torch.nn.Linear(1, 1), {}

        def sft(self, examples, steps, batch_size, lr, seed):
            self.calls.append((len(examples), steps, lr))
            return []

        def generate(self, contents, n=1, temperature=0.0, seed=None):
            return [[self.text] * n for _ in contents]

    judge = StubLM(render_judgment_json(random_judgments(random.Random(1), rubric)), "judge")
    rubricor = StubLM(render_rubric_json(rubric), "rubricor")
    a, b = _traj(writers=(SLM, SLM, SLM)), _traj(writers=(SLM, SLM, SLM))
    b.problem_id, b.split = "p2", "val"
    rows = alternate(judge, rubricor, rj, [a, b], [Pair("p1", 0, 0, "cost")], [Pair("p2", 1, 1, "cost")])
    assert judge.calls == [(1, 1500, 1e-3)] and rubricor.calls == [(4, 80, 3e-3)]
    assert [(r["phase"], r["selected"]) for r in rows] == [("warm", True)]


def test_six_families_add_two_to_the_rubric_and_leave_the_four_family_draws_as_they_were():
    from rubricflow.methods.roro.judge.prompts import FAMILY_SETS, added_tokens, guidance_params

    four_rng, six_rng = random.Random(5), random.Random(5)
    four = random_rubric(four_rng, 4)
    # the four families' draws as before the six existed (values from the code before them, seed 5)
    assert [(c.weight, c.guidance) for c in four] == [
        (0.5, "1.0 if step 4 is by the LRM"), (0.6, "1.0 if no SLM step has u above 4"),
        (0.9, "1.0 if at most 2 LRM steps"), (0.1, "1.0 if every step is right")]
    assert four_rng.random() == pytest.approx(0.05185325369909766)  # and the generator left where it was
    six = random_rubric(six_rng, 4, FAMILY_SETS["six"])
    assert [c.id for c in six] == [n for n, _ in FAMILY_SETS["six"]] and [c.id for c in six[:4]] == [c.id for c in four]
    sure = six[4]
    assert sure.id == "no call on a sure step" and 0 <= guidance_params(sure.id, sure.guidance)["s"] <= 8
    assert added_tokens(FAMILIES) == ADDED_TOKENS  # the four-family tokenizer is unchanged
    assert {"no call on a sure step", "SLM steps are right"} <= set(added_tokens(FAMILY_SETS["six"]))
    views = {"p1": ProblemView("Start with 7. Add 5. Multiply by 2.", [0.12, 0.71, 0.0])}
    rub_ex, jud_ex = warm_start_examples(views, [_traj()], random.Random(0), per_problem=1,
                                         families=FAMILY_SETS["six"])
    assert [c.id for c in parse_rubric(rub_ex[0][1]).value][-2:] == ["no call on a sure step", "SLM steps are right"]
    assert '"criterion": "SLM steps are right"' in jud_ex[0][1]


def test_the_rubricor_phase_keeps_only_candidates_that_list_the_configured_families():
    from rubricflow.methods.roro.judge.alternation import rubricor_phase
    from rubricflow.methods.roro.judge.prompts import FAMILY_SETS

    six = [replace(c, weight=0.5) for c in random_rubric(random.Random(0), 3, FAMILY_SETS["six"])]

    class LM:
        reads = "steps"

        def __init__(self, texts):
            self.texts, self.sft_calls = texts, []

        def generate(self, contents, n=1, temperature=0.0, seed=None):
            return [self.texts[:n] for _ in contents]

        def sft(self, examples, steps, batch_size, lr, seed):
            self.sft_calls.append(examples)
            return []

    judgment = render_judgment_json({c.id: v for c, v in zip(six, random_judgments(random.Random(1), six).values())})
    trajs = [_traj((SLM, "LRM", SLM)), _traj((SLM, SLM, SLM))]
    views = problem_views(trajs)
    from rubricflow.config import config_from_dict

    rj = config_from_dict({}).roro.rubricor_judge
    for fams, kept in (("four", 0), ("six", 1)):
        rubricor = LM([render_rubric_json(six)])
        m = rubricor_phase(rubricor, LM([judgment]), views, trajs, [Pair("p1", 0, 1, "process")], rj.rubricor, 0, 12,
                           1, 1.0, True, "sampled", FAMILY_SETS[fams])
        assert len(rubricor.sft_calls and rubricor.sft_calls[0] or []) == kept, (fams, m)
