"""Step checking, error propagation and the routing environment with scripted step models."""


import pytest

from rubricflow.methods.roro.env.routing import (
    ConstantPolicy,
    RandomPolicy,
    RoutingEnv,
    StepCache,
    ThresholdPolicy,
    Trajectory,
)
from rubricflow.methods.roro.env.step_lm import StepOutput, step_uncertainty
from rubricflow.methods.roro.env.task import (
    Problem,
    answer_correct,
    check_step,
    make_problems,
    render_question,
    solution_steps,
)

OPS = [("add", 5), ("mul", 3), ("sub", 4)]
P = Problem("p0", render_question(7, OPS), "32", start=7, ops=OPS, reference_steps=solution_steps(7, OPS))


def test_question_and_gold_steps():
    assert P.question == "Start with 7. Add 5. Multiply by 3. Subtract 4."
    assert P.reference_steps == ["7 + 5 = 12", "12 * 3 = 36", "36 - 4 = 32", "#### 32"]
    assert P.true_values() == [12, 36, 32]


def test_step_checks():
    c = check_step(P, 0, "7 + 5 = 12", 7)
    assert (c.correct, c.on_track, c.value) == (True, True, 12)
    c = check_step(P, 1, "12 * 3 = 35", 12)  # arithmetic error
    assert (c.correct, c.on_track, c.value) == (False, False, 35)
    assert "arithmetic: 12 * 3 != 35" in c.reason
    c = check_step(P, 1, "12 + 3 = 15", 12)  # wrong operation
    assert c.correct is False and "operation '+ 3' != '* 3'" in c.reason
    c = check_step(P, 0, "8 + 5 = 13", 7)  # wrong left operand
    assert c.correct is False and "left operand 8 != carried value 7" in c.reason
    c = check_step(P, 0, "seven plus five", 7)
    assert c.kind == "unparsed" and c.correct is False and c.value is None


def test_error_propagates_locally_correct_but_off_track():
    # step 2 wrote 35: step 3 continuing from 35 is locally correct but off track, and the answer is wrong
    c = check_step(P, 2, "35 - 4 = 31", 35)
    assert (c.correct, c.on_track) == (True, False)
    c = check_step(P, 3, "#### 31", 31)
    assert (c.correct, c.on_track) == (True, False)
    assert not answer_correct(P, "#### 31") and answer_correct(P, "#### 32")
    assert check_step(P, 3, "#### 32", 31).correct is False  # does not restate the carried value


def test_generator_keeps_values_in_range_and_is_deterministic():
    a = make_problems(50, "train", 3, min_ops=2, max_ops=3, max_value=9)
    b = make_problems(50, "train", 3, min_ops=2, max_ops=3, max_value=9)
    assert [p.question for p in a] == [p.question for p in b]
    assert all(2 <= len(p.ops) <= 3 and all(0 <= v <= 9 for v in p.true_values()) for p in a)
    assert all(p.reference_steps[-1] == f"#### {p.answer}" for p in a)
    for p in a:
        carried = p.start
        for k, s in enumerate(p.reference_steps):
            c = check_step(p, k, s, carried)
            assert c.correct and c.on_track
            carried = c.value


def test_uncertainty_kinds():
    assert step_uncertainty([0.9, 0.5, 1.0], [0.1, 0.7, 0.0], "one_minus_min_maxprob", 100) == pytest.approx(0.5)
    assert step_uncertainty([0.9, 0.5, 1.0], [0.1, 0.7, 0.0], "one_minus_mean_maxprob", 100) == pytest.approx(0.2)
    import math

    assert step_uncertainty([1.0], [math.log(100) / 2], "max_entropy", 100) == pytest.approx(0.5)
    assert step_uncertainty([], [], "mean_entropy", 100) == 1.0


class Scripted:
    """A step model that answers from a table {(question, n_prefix_steps): (text, uncertainty)}."""

    def __init__(self, name, table, n_params=1000):
        self.name, self.table, self.n_params = name, table, n_params
        self.calls = 0

    def prompt(self, question):
        return f"Q: {question}\n"

    def propose(self, prefixes):
        self.calls += len(prefixes)
        out = []
        for pre in prefixes:
            q = pre.split("\n", 1)[0][3:]
            k = pre.count("\n") - 1
            text, u = self.table[(q, k)]
            out.append(StepOutput(text, len(text.split()) + 1, u, True))
        return out


def _lrm():
    q = P.question
    return Scripted("lrm", {(q, 0): ("7 + 5 = 12", 0.0), (q, 1): ("12 * 3 = 36", 0.0), (q, 2): ("36 - 4 = 32", 0.0),
                            (q, 3): ("#### 32", 0.0)}, n_params=1000)


class PrefixAware(Scripted):
    """SLM that continues correctly from whatever the prefix's last result is (errors only at step 2)."""

    def propose(self, prefixes):
        self.calls += len(prefixes)
        out = []
        for pre in prefixes:
            lines = pre.rstrip("\n").split("\n")[1:]
            k = len(lines)
            carried = int(lines[-1].split("=")[-1]) if lines else 7
            if k == 0:
                out.append(StepOutput("7 + 5 = 12", 4, 0.05, True))
            elif k == 1:
                out.append(StepOutput(f"{carried} * 3 = {carried * 3 - 1}", 4, 0.7, True))  # arithmetic slip
            elif k == 2:
                out.append(StepOutput(f"{carried} - 4 = {carried - 4}", 4, 0.1, True))
            else:
                out.append(StepOutput(f"#### {carried}", 2, 0.0, True))
        return out


def test_env_error_propagation_and_cost():
    lrm = _lrm()
    slm = PrefixAware("slm", {}, n_params=100)
    env = RoutingEnv(slm, lrm, "slm:x", "lrm:x", max_steps=6)
    (all_slm,) = env.rollout([P], ConstantPolicy(0))
    assert [s.text for s in all_slm.steps] == ["7 + 5 = 12", "12 * 3 = 35", "35 - 4 = 31", "#### 31"]
    assert [s.correct for s in all_slm.steps] == [True, False, True, True]
    assert [s.on_track for s in all_slm.steps] == [True, False, False, False]
    assert not all_slm.outcome and all_slm.lrm_tokens == 0
    assert (all_slm.accepted_slm_errors, all_slm.interventions, all_slm.first_error_step) == (1, 0, 1)

    (thr,) = env.rollout([P], ThresholdPolicy(0.5))  # calls the LRM exactly at the uncertain step 2
    assert [s.writer for s in thr.steps] == ["SLM", "LRM", "SLM", "SLM"]
    assert [s.text for s in thr.steps] == ["7 + 5 = 12", "12 * 3 = 36", "36 - 4 = 32", "#### 32"]
    assert thr.outcome and thr.accepted_slm_errors == 0 and thr.interventions == 1 and thr.wasted_calls == 0
    lrm_step_tokens = len("12 * 3 = 36".split()) + 1
    assert thr.lrm_tokens == lrm_step_tokens and thr.lrm_flops == 2 * 1000 * lrm_step_tokens
    assert thr.total_flops == thr.lrm_flops + 2 * 100 * thr.slm_tokens

    (all_lrm,) = env.rollout([P], ConstantPolicy(1))
    assert all_lrm.outcome and all_lrm.lrm_calls == 4 and all_lrm.wasted_calls == 3 and all_lrm.interventions == 1
    # router states: current, min, mean uncertainty, tokens / 16, index / 8
    assert thr.steps[1].state == pytest.approx([0.7, 0.05, 0.375, 4 / 16, 1 / 8])
    # round trip through a row
    back = Trajectory.from_row(thr.to_row())
    assert back.key() == thr.key() and back.lrm_tokens == thr.lrm_tokens and back.outcome


def test_step_cache_makes_repeats_free(tmp_path):
    lrm = _lrm()
    slm = PrefixAware("slm", {}, n_params=100)
    env = RoutingEnv(slm, lrm, "slm:x", "lrm:x")
    env.rollout([P], RandomPolicy(0.5, seed=1), repeats=8)
    calls = slm.calls
    env.rollout([P], RandomPolicy(0.5, seed=2), repeats=8)
    assert slm.calls <= calls + 2  # a handful of new prefixes at most; the rest are cache hits
    path = env.cache.save(tmp_path / "cache.jsonl")
    c2 = StepCache()
    assert c2.load(path) == len(env.cache.entries)
    env2 = RoutingEnv(PrefixAware("slm", {}, 100), lrm, "slm:x", "lrm:x", cache=c2)
    before = env2.slm.calls
    env2.rollout([P], ConstantPolicy(0))
    assert env2.slm.calls == before  # everything served from the loaded cache


def test_enumerate_routes_covers_the_decision_tree():
    lrm = _lrm()
    slm = PrefixAware("slm", {}, n_params=100)
    env = RoutingEnv(slm, lrm, "slm:x", "lrm:x", max_steps=6)
    routes = env.enumerate_routes([P])
    assert len(routes) == 16  # 4 decisions, 2 choices each
    assert len({tuple(t.actions) for t in routes}) == 16
    by_actions = {tuple(t.actions): t for t in routes}
    assert by_actions[(0, 1, 0, 0)].outcome and not by_actions[(0, 0, 0, 0)].outcome
    assert [s.text for s in by_actions[(1, 1, 1, 1)].steps] == P.reference_steps
    calls = (slm.calls, lrm.calls)
    env.rollout([P], RandomPolicy(0.5, seed=3), repeats=16)
    assert (slm.calls, lrm.calls) == calls  # every rollout is now a cache lookup


def test_vllm_step_model_reports_what_is_missing():
    import importlib.util

    from models.generation import BackendUnavailable
    from rubricflow.methods.roro.env.step_lm import VLLMStepModel

    with pytest.raises(ValueError, match=r"roro.lrm.n_params"):
        VLLMStepModel("Qwen/Qwen2.5-14B-Instruct", "lrm", n_params=0)
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(BackendUnavailable, match="roro.lrm.backend=vllm but the `vllm` package is not importable"):
            VLLMStepModel("Qwen/Qwen2.5-14B-Instruct", "lrm", n_params=14_700_000_000)
