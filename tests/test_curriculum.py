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
    s = CurriculumScheduler(threshold=0.9, window=3, ramp_steps=4, peak=0.5, shape="linear", steepness=10.0,
                            threshold_rule="absolute", margin=0.0, window_test="every")
    # t:      0     1     2    3     4     5     6     7     8     9    10
    scores = [0.95, 0.95, 0.5, 0.95, 0.95, 0.95, 0.2, 0.2, 0.2, 0.2, 0.99]
    lams = run(s, scores)
    # the dip at t=2 resets the streak; t=3,4,5 complete the window -> transition at t=5
    assert s.transition_step == 5
    assert lams == pytest.approx([0, 0, 0, 0, 0, 0.125, 0.25, 0.375, 0.5, 0.5, 0.5])
    # holds at peak even though the foundational score dropped after the switch
    assert s.event == {"step": 5, "threshold": 0.9, "threshold_rule": "absolute", "baseline": None, "window": 3,
                       "window_scores": [0.95, 0.95, 0.95]}


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
        CurriculumScheduler(threshold=0.9, window=1, ramp_steps=1, peak=0.5, shape="cosine", steepness=10.0,
                            threshold_rule="absolute", margin=0.0, window_test="every")


def test_state_round_trip_mid_ramp_is_json_and_continues_identically():
    cfg = dict(threshold=0.8, window=4, ramp_steps=6, peak=0.6, shape="sigmoid", steepness=10.0,
               threshold_rule="absolute", margin=0.0, window_test="every")
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


FIELDS = ("threshold", "window", "ramp_steps", "peak", "shape", "steepness", "threshold_rule", "margin",
          "window_test")


def test_from_config_carries_every_field():
    default = CurriculumScheduler.from_config(CurriculumConfig())
    other = CurriculumConfig(threshold=0.42, window=7, ramp_steps=3, peak=0.25, shape="linear", steepness=4.0,
                             threshold_rule="relative", margin=0.12, window_test="mean")
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


def test_relative_threshold_measures_the_start_then_asks_for_the_margin():
    s = CurriculumScheduler(threshold=0.9, window=3, ramp_steps=0, peak=0.5, shape="linear", steepness=10.0,
                            threshold_rule="relative", margin=0.1, window_test="every")
    # steps 0-2 measure the start (0.5, 0.6, NaN -> baseline 0.55): no switch there even though later scores are
    # higher; the threshold is then 0.65, exceeded at every step of the window only at steps 5, 6, 7
    lams = run(s, [0.5, 0.6, NAN, 0.7, 0.64, 0.7, 0.66, 0.8, 0.2])
    assert s.baseline == pytest.approx(0.55) and s.active_threshold == pytest.approx(0.65)
    assert s.transition_step == 7 and lams == [0] * 7 + [0.5, 0.5]
    assert s.event["threshold"] == pytest.approx(0.65) and s.event["threshold_rule"] == "relative"
    # the absolute rule at 0.9 never switches on the same scores
    a = CurriculumScheduler(threshold=0.9, window=3, ramp_steps=0, peak=0.5, shape="linear", steepness=10.0,
                            threshold_rule="absolute", margin=0.1, window_test="every")
    run(a, [0.5, 0.6, NAN, 0.7, 0.64, 0.7, 0.66, 0.8, 0.2])
    assert a.transition_step is None
    # the baseline survives a state round trip
    b = CurriculumScheduler(threshold=0.9, window=3, ramp_steps=0, peak=0.5, shape="linear", steepness=10.0,
                            threshold_rule="relative", margin=0.1, window_test="every")
    b.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert b.baseline == pytest.approx(0.55) and b.transition_step == 7


def test_switch_step_replays_a_recorded_series_under_any_margin():
    from rubricflow.methods.rucl.curriculum import switch_step

    cfg = CurriculumConfig(window=3, threshold_rule="relative", margin=0.05)
    series = [0.5, 0.5, 0.5, 0.56, 0.57, 0.58, 0.62, 0.63, 0.64, 0.7]
    assert switch_step(series, cfg) == 5  # > 0.55 at steps 3, 4, 5
    assert switch_step(series, cfg, margin=0.1) == 8  # > 0.6 at steps 6, 7, 8
    assert switch_step(series, cfg, margin=0.3) is None
    assert switch_step(series, cfg, threshold_rule="absolute", threshold=0.6) == 8


def test_window_mean_test_switches_on_the_windows_mean_and_still_needs_every_score():
    from rubricflow.methods.rucl.curriculum import switch_step

    cfg = CurriculumConfig(window=3, threshold_rule="relative", margin=0.05)
    # baseline 0.5; noisy scores around 0.6: never three in a row above 0.55, but the window mean is above from step 5
    series = [0.5, 0.5, 0.5, 0.6, 0.5, 0.6, 0.7, 0.52, 0.7]
    assert switch_step(series, cfg) is None
    assert switch_step(series, cfg, window_test="mean") == 5  # (0.6 + 0.5 + 0.6) / 3 > 0.55; 0.533 before
    assert switch_step([0.5, 0.5, 0.5, 0.5, NAN, 0.9, 0.9, 0.9], cfg, window_test="mean") == 7  # NaN blocks
    with pytest.raises(ValueError, match="window_test"):
        switch_step(series, cfg, window_test="median")
