"""RuCL curriculum scheduler: exact transition step, ramp values, hold, and state round trip."""

import inspect
import json
import math

import pytest

from rubricflow.methods.rucl.curriculum import CurriculumScheduler, ramp
from rubricflow.methods.rucl.config import CurriculumConfig

NAN = float("nan")


def run(s, scores):
    return [s.update(x) for x in scores]


def test_transition_step_and_linear_ramp_hand_computed():
    s = CurriculumScheduler(threshold=0.9, window=3, ramp_steps=4, peak=0.5, shape="linear", steepness=10.0)
    # t:      0     1     2    3     4     5     6     7     8     9    10
    scores = [0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 0.2, 0.2, 0.2, 0.2, 0.99]
    lams = run(s, scores)
    # the dip at t=2 resets the streak; t=3,4,5 complete the window -> transition at t=5
    assert s.transition_step == 5
    assert lams == pytest.approx([0, 0, 0, 0, 0, 0.125, 0.25, 0.375, 0.5, 0.5, 0.5])
    # holds at peak even though the foundational score dropped after the switch
    assert s.event == {"step": 5, "threshold": 0.9, "window": 3, "window_scores": [0.95, 0.95, 0.95]}


def test_threshold_is_strict_and_missing_scores_do_not_count():
    s = CurriculumScheduler.from_config(CurriculumConfig(threshold=0.9, window=2, ramp_steps=0, peak=0.7))
    assert run(s, [0.9, 0.9, 0.9]) == [0, 0, 0]  # equal is not "exceeds"
    assert run(s, [0.95, NAN, 0.95]) == [0, 0, 0]  # a missing score breaks the streak
    assert s.update(0.96) == pytest.approx(0.7)  # ramp_steps = 0: straight to peak
    assert s.transition_step == 6


def test_sigmoid_ramp_values():
    lo, hi = 1 / (1 + math.exp(5)), 1 / (1 + math.exp(-5))
    expect_q = (1 / (1 + math.exp(2.5)) - lo) / (hi - lo)  # x = 0.25
    assert ramp(0.25, "sigmoid") == pytest.approx(expect_q)
    assert expect_q == pytest.approx(0.070104, abs=1e-6)
    assert ramp(0.0, "sigmoid") == 0.0 and ramp(1.0, "sigmoid") == pytest.approx(1.0)
    assert ramp(0.5, "sigmoid") == pytest.approx(0.5)
    assert ramp(1.7, "linear") == 1.0
    s = CurriculumScheduler.from_config(
        CurriculumConfig(threshold=0.5, window=1, ramp_steps=4, peak=0.8, shape="sigmoid")
    )
    lams = run(s, [0.6, 0.1, 0.1, 0.1, 0.1])
    assert lams == pytest.approx([0.8 * expect_q, 0.4, 0.8 * (1 - expect_q), 0.8, 0.8])
    with pytest.raises(ValueError, match="shape"):
        CurriculumScheduler(threshold=0.9, window=1, ramp_steps=1, peak=0.5, shape="cosine", steepness=10.0)


def test_state_round_trip_mid_ramp_is_json_and_continues_identically():
    cfg = dict(threshold=0.8, window=4, ramp_steps=6, peak=0.6, shape="sigmoid", steepness=10.0)
    scores = [0.85, 0.9, 0.95, 0.81, 0.99, 0.5, 0.7, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    ref = CurriculumScheduler(**cfg)
    full = run(ref, scores)
    a = CurriculumScheduler(**cfg)
    head = run(a, scores[:6])  # transition at t=3, stop mid-ramp
    assert a.transition_step == 3 and 0 < head[-1] < 0.6
    state = json.loads(json.dumps(a.state_dict()))  # checkpoint-able as JSON
    b = CurriculumScheduler(**cfg)
    b.load_state_dict(state)
    assert head + run(b, scores[6:]) == pytest.approx(full)
    assert b.event == ref.event and b.lambda_t == ref.lambda_t
    with pytest.raises(ValueError, match="window"):
        CurriculumScheduler(**{**cfg, "window": 5}).load_state_dict(state)


FIELDS = ("threshold", "window", "ramp_steps", "peak", "shape", "steepness")


def test_from_config_carries_every_field():
    default = CurriculumScheduler.from_config(CurriculumConfig())
    other = CurriculumConfig(threshold=0.42, window=7, ramp_steps=3, peak=0.25, shape="linear", steepness=4.0)
    s = CurriculumScheduler.from_config(other)
    for name in FIELDS:
        assert getattr(s, name) == getattr(other, name), name
        assert getattr(s, name) != getattr(default, name), name  # every value above differs from its default
    assert s.state_dict()["config"] == other.model_dump()
    assert s.recent.maxlen == 7


def test_defaults_are_written_once_in_the_section():
    """The scheduler has no defaults of its own: built from the default section it has the section's values."""
    params = inspect.signature(CurriculumScheduler).parameters
    assert set(params) == set(FIELDS) == set(CurriculumConfig.model_fields)
    for name, p in params.items():
        assert p.default is inspect.Parameter.empty and p.kind is inspect.Parameter.KEYWORD_ONLY, name
    s = CurriculumScheduler.from_config(CurriculumConfig())
    for name in FIELDS:
        assert getattr(s, name) == CurriculumConfig.model_fields[name].default, name
    assert s.threshold == 0.9
    with pytest.raises(TypeError):
        CurriculumScheduler(threshold=0.9)  # type: ignore[call-arg]
