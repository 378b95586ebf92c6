"""The parity reading of the task (``roro.task.answer``): same step models and routes, the outcome is the parity of
the final value, so a route that accepted a small-model error can still be right; chain-exact accuracy is not fooled."""

import re

import pytest

from rubricflow.config import ConfigError, config_from_dict
from rubricflow.methods.roro.router.evaluate import chain_exact_accuracy, summarize
from rubricflow.methods.roro.env.problems import problems
from rubricflow.methods.roro.env.routing import ConstantPolicy, RoutingEnv
from rubricflow.methods.roro.env.step_lm import StepOutput
from rubricflow.methods.roro.env.task import (
    OPS,
    Problem,
    answer_correct,
    apply_op,
    make_problems,
    render_question,
    solution_steps,
)

_WORD = {word: op for op, (word, _) in OPS.items()}


class Chain:
    """A step model that reads the question and continues from whatever value the prefix carries; with ``slip`` it
    writes step ``slip`` one too high (an arithmetic error that the later steps carry on)."""

    def __init__(self, name, slip=None, n_params=100):
        self.name, self.slip, self.n_params = name, slip, n_params

    def prompt(self, question):
        return f"Q: {question}\n"

    def propose(self, prefixes):
        out = []
        for pre in prefixes:
            head, *lines = [ln for ln in pre.split("\n") if ln]
            start = int(re.search(r"Start with (\d+)", head).group(1))
            ops = [(_WORD[w], int(a)) for w, a in re.findall(r"(Add|Subtract|Multiply by) (\d+)\.", head)]
            k = len(lines)
            carried = int(lines[-1].split("=")[-1]) if lines else start
            if k == len(ops):
                out.append(StepOutput(f"#### {carried}", 2, 0.0, True))
                continue
            op, arg = ops[k]
            res = apply_op(op, carried, arg) + (1 if k == self.slip else 0)
            out.append(StepOutput(f"{carried} {OPS[op][1]} {arg} = {res}", 4, 0.9 if k == self.slip else 0.05, True))
        return out


def _problem(start, ops, answer_kind):
    steps = solution_steps(start, ops)
    return Problem(f"p{start}{ops}", render_question(start, ops), steps[-1].split()[-1], start=start, ops=ops,
                   reference_steps=steps, answer_kind=answer_kind)


def _env():
    return RoutingEnv(Chain("slm", slip=1), Chain("lrm"), "slm:x", "lrm:x", max_steps=6)


# the slip at step 2 is one too high: carried on by additions it flips the final parity, doubled it keeps it
FLIPS = (3, [("add", 2), ("add", 1), ("add", 1)])
KEEPS = (3, [("add", 1), ("add", 1), ("mul", 2)])


def test_parity_outcome_is_lucky_for_some_accepted_errors_and_chain_exact_is_not():
    probs = [_problem(*FLIPS, "parity"), _problem(*KEEPS, "parity")]
    routes = _env().rollout(probs, ConstantPolicy(0))  # all-SLM: accepts the slip
    assert [t.accepted_slm_errors for t in routes] == [1, 1]
    assert [t.outcome for t in routes] == [False, True]  # the second route is right by luck
    assert [t.chain_exact for t in routes] == [False, False]
    saved = _env().rollout(probs, ConstantPolicy(1))  # all-LRM: every step right
    assert [(t.outcome, t.chain_exact) for t in saved] == [(True, True), (True, True)]
    all_lrm = {t.problem_id: t.lrm_tokens for t in saved}
    row = summarize("all-slm", None, routes, all_lrm)
    assert (row["accuracy"], row["chain_exact"]) == (0.5, 0.0)


def test_value_reading_is_unchanged():
    probs = [_problem(*FLIPS, "value"), _problem(*KEEPS, "value")]
    routes = _env().rollout(probs, ConstantPolicy(0))
    assert [t.outcome for t in routes] == [False, False]  # a wrong final value is wrong
    assert chain_exact_accuracy(routes) == 0.0
    assert all(t.outcome and t.chain_exact for t in _env().rollout(probs, ConstantPolicy(1)))
    p = probs[0]
    assert answer_correct(p, f"#### {p.answer}") and not answer_correct(p, f"#### {int(p.answer) + 2}")


def test_parity_answer_check():
    p = _problem(*FLIPS, "parity")  # answer 7
    assert answer_correct(p, "#### 7") and answer_correct(p, "#### 9") and answer_correct(p, "#### -1")
    assert not answer_correct(p, "#### 8") and not answer_correct(p, "#### 7.5") and not answer_correct(p, None)


def test_generated_problems_under_parity_score_an_accepted_error_right_on_some_and_wrong_on_others():
    probs = make_problems(40, "train", 3, min_ops=3, max_ops=4, max_value=9, answer="parity")
    assert {p.answer_kind for p in probs} == {"parity"}
    same = make_problems(40, "train", 3, min_ops=3, max_ops=4, max_value=9)
    assert [p.question for p in probs] == [p.question for p in same]  # the same problems and prompts
    routes = _env().rollout(probs, ConstantPolicy(0))
    assert all(t.accepted_slm_errors == 1 and t.chain_exact is False for t in routes)
    lucky = sum(t.outcome for t in routes)
    assert 0 < lucky < len(routes)
    with pytest.raises(ValueError, match="answer: unknown kind 'sign'"):
        make_problems(2, "train", 3, answer="sign")


def test_config_reads_parity_and_refuses_it_without_checkable_steps():
    cfg = config_from_dict({"roro": {"task": {"n_sft": 4}}}, overrides={"roro.task.answer": "parity"})
    ps = problems(cfg.roro)
    assert {p.answer_kind for p in ps["train"] + ps["val"]} == {"parity"}
    assert config_from_dict({}).roro.task.answer == "value"
    with pytest.raises(ConfigError, match="roro.task.*answer=parity needs source=synthetic"):
        config_from_dict({"roro": {"task": {"answer": "parity", "source": "gsm8k", "gsm8k_path": "g.jsonl"}}})


def test_both_arithmetic_tasks_check_one_step_grammar():
    """RoRo's operation chains and the arith word problems read and compute a step ``x op y = z`` the same way
    (rubricflow.data.arith)."""
    from rubricflow.data.arith import OPS as ARITHMETIC
    from rubricflow.data.arith import parse_step
    from rubricflow.methods.roro.env.task import OPS, apply_op

    assert parse_step(" 12 * 2 = 24 ") == (12, "*", 2, 24) and parse_step("12 x 2 = 24") is None
    assert all(apply_op(name, 7, 3) == ARITHMETIC[sym](7, 3) for name, (_, sym) in OPS.items())
    with pytest.raises(ValueError, match="unknown operation 'div'"):
        apply_op("div", 6, 2)
