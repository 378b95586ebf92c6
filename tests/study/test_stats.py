"""The study statistics (rubricflow.study.stats): t-intervals and verdicts by hand, paired differences, a
non-inferiority margin."""

import math

import pytest

from rubricflow.study.spec import Claim
from rubricflow.study.stats import aggregate, t_interval, verdict

T_975_DF2 = 4.302652729911275  # Student t quantile 0.975 with 2 degrees of freedom (printed tables: 4.303)


def test_t_interval_by_hand():
    ci = t_interval([0.5, 0.6, 0.7])
    # mean 0.6; sd = sqrt((0.01 + 0 + 0.01) / 2) = 0.1; half = 4.3027 * 0.1 / sqrt(3) = 0.24841
    assert ci["n"] == 3
    assert ci["mean"] == pytest.approx(0.6)
    assert ci["sd"] == pytest.approx(0.1)
    assert ci["half_width"] == pytest.approx(T_975_DF2 * 0.1 / math.sqrt(3))
    assert ci["half_width"] == pytest.approx(0.24841, abs=1e-5)
    assert (ci["ci_low"], ci["ci_high"]) == pytest.approx((0.35159, 0.84841), abs=1e-5)
    # five values, t_{0.975,4} = 2.7764: [1..5] -> mean 3, sd sqrt(2.5), half 2.7764 * 1.5811 / 2.2361 = 1.9632
    assert t_interval([1, 2, 3, 4, 5])["half_width"] == pytest.approx(1.96324, abs=1e-4)
    one = t_interval([0.4])
    assert one["mean"] == 0.4 and one["half_width"] is None and one["ci_low"] is None
    assert t_interval([])["mean"] is None


def test_verdict_rules():
    assert verdict(0.01, 0.2, "higher") == "shown"
    assert verdict(-0.2, -0.01, "higher") == "reversed"
    assert verdict(-0.1, 0.1, "higher") == "not shown"
    assert verdict(-0.2, -0.01, "lower") == "shown"
    assert verdict(0.01, 0.2, "lower") == "reversed"
    assert verdict(0.0, 0.2, "higher") == "not shown"  # an interval touching 0 does not exclude it
    assert verdict(None, None, "higher") == "not shown"


def _results(table):
    """{variant: {seed: {metric: value}}} -> result dicts."""
    return [{"variant": v, "seed": s, "metrics": m} for v, seeds in table.items() for s, m in seeds.items()]


def test_aggregate_means_paired_differences_and_verdicts():
    results = _results({
        "a": {1: {"acc": 0.5, "flaw": 0.30}, 2: {"acc": 0.6, "flaw": 0.20}, 3: {"acc": 0.7, "flaw": 0.25}},
        "b": {1: {"acc": 0.4, "flaw": 0.20}, 2: {"acc": 0.45, "flaw": 0.10}, 3: {"acc": 0.5, "flaw": 0.15}},
        "c": {1: {"acc": 0.6, "flaw": None}, 2: {"acc": 0.5, "flaw": 0.5}, 3: {"acc": 0.7, "flaw": 0.5}},
    })
    claims = [
        Claim(a="a", b="b", metric="acc", direction="higher"),  # diffs .10 .15 .20 -> shown
        Claim(a="a", b="b", metric="acc", direction="lower"),  # same data, opposite claim -> reversed
        Claim(a="a", b="c", metric="acc", direction="higher"),  # diffs -.1 .1 0 -> not shown
        {"a": "a", "b": "b", "metric": "flaw", "direction": "lower"},  # diffs all +.10 (sd 0) -> reversed
        Claim(a="a", b="c", metric="flaw", direction="lower"),  # seed 1 of c has no value: 2 pairs
        Claim(a="a", b="missing", metric="acc", direction="higher"),  # not run: no pairs
    ]
    agg = aggregate(results, claims, ["acc", "flaw"])
    a = agg["variants"]["a"]
    assert a["seeds"] == [1, 2, 3]
    assert a["acc"]["mean"] == pytest.approx(0.6)
    assert a["acc"]["half_width"] == pytest.approx(0.24841, abs=1e-5)
    assert agg["variants"]["c"]["flaw"]["n"] == 2 and agg["variants"]["c"]["flaw"]["mean"] == pytest.approx(0.5)

    c0, c1, c2, c3, c4, c5 = agg["claims"]
    # diffs .10 .15 .20: mean .15, sd .05, half = 4.3027 * .05 / sqrt(3) = 0.12421
    assert c0["diffs"] == pytest.approx({1: 0.1, 2: 0.15, 3: 0.2})
    assert c0["diff_mean"] == pytest.approx(0.15)
    assert (c0["ci_low"], c0["ci_high"]) == pytest.approx((0.02579, 0.27421), abs=1e-5)
    assert c0["verdict"] == "shown"
    assert c0["note"] == "only 3 paired seeds (a claim needs 5)"
    assert c1["verdict"] == "reversed"
    assert c2["diff_mean"] == pytest.approx(0.0) and c2["verdict"] == "not shown"
    assert c3["diff_mean"] == pytest.approx(0.1) and c3["half_width"] == pytest.approx(0.0, abs=1e-12)
    assert c3["verdict"] == "reversed"
    assert c4["n_pairs"] == 2 and c4["diffs"] == pytest.approx({2: -0.3, 3: -0.25})
    assert c5["n_pairs"] == 0 and c5["verdict"] == "not shown" and "no interval" in c5["note"]
    # an exploratory comparison gets its interval and verdict like a claim, and says it is exploratory
    (ex,) = aggregate(results, [Claim(a="a", b="b", metric="acc", direction="higher", exploratory=True)],
                      ["acc"])["claims"]
    assert (ex["verdict"], ex["diff_mean"]) == (c0["verdict"], c0["diff_mean"])
    assert ex["note"] == "exploratory; only 3 paired seeds (a claim needs 5)" and ex["exploratory"] is True


def test_aggregate_rejects_a_duplicate_unit():
    with pytest.raises(ValueError, match="two results for variant 'a' seed 1"):
        aggregate(_results({"a": {1: {"acc": 1}}}) * 2, [], ["acc"])


def test_a_non_inferiority_claim_is_judged_against_its_margin():
    # a - b > -0.01 is shown when the whole interval lies above -0.01, reversed when it lies below
    assert verdict(-0.008, 0.004, "higher", margin=0.01) == "shown"
    assert verdict(-0.008, 0.004, "higher") == "not shown"
    assert verdict(-0.05, -0.02, "higher", margin=0.01) == "reversed"
    assert verdict(-0.004, 0.008, "lower", margin=0.01) == "shown"


def test_a_claim_on_a_pair_metric_takes_both_values_from_the_pair():
    """A pair metric exists only for two units of one seed together (e.g. a range both units span): the claim's
    values come from ``pair_metric``; a seed where the pair has none is left out of the difference, not counted 0."""
    results = [{"variant": v, "seed": s, "metrics": {"acc": 0.5}, "reach": r}
               for s in (1, 2, 3) for v, r in (("a", 1.0 + s), ("b", 1.0 if s != 3 else None))]
    calls = []

    def pair(metric, ra, rb):
        calls.append((metric, ra["variant"], rb["variant"], ra["seed"]))
        if rb["reach"] is None:
            return None, None
        return ra["reach"], rb["reach"]

    claim = Claim(a="a", b="b", metric="span_mean", direction="higher")
    agg = aggregate(results, [claim], ["acc"], pair_metrics=["span_mean"], pair_metric=pair)
    c = agg["claims"][0]
    assert calls == [("span_mean", "a", "b", s) for s in (1, 2, 3)]
    assert c["diffs"] == {1: 1.0, 2: 2.0} and c["n_pairs"] == 2 and c["pair_values"][3] == [None, None]
    assert "span_mean" not in agg["variants"]["a"]  # not a per-unit metric
    with pytest.raises(ValueError, match="'span_mean' is a pair metric and no pair_metric was given"):
        aggregate(results, [claim], ["acc"], pair_metrics=["span_mean"])


def test_a_spec_names_pair_metrics_apart_from_unit_metrics():
    from pydantic import ValidationError

    from rubricflow.study.spec import StudySpec

    base = {"method": "rucl", "variants": {"a": {}, "b": {}}, "metrics": ["acc"], "out_dir": "x"}
    ok = StudySpec(**base, pair_metrics=["span_mean"], claims=[{"a": "a", "b": "b", "metric": "span_mean",
                                                                "direction": "higher"}])
    assert ok.pair_metrics == ["span_mean"]
    with pytest.raises(ValidationError, match=r"metric 'span_mean' is not in metrics \['acc'\] or pair_metrics \[\]"):
        StudySpec(**base, claims=[{"a": "a", "b": "b", "metric": "span_mean", "direction": "higher"}])
    with pytest.raises(ValidationError, match=r"pair_metrics \['acc'\] are also in metrics"):
        StudySpec(**base, pair_metrics=["acc"])


def test_a_pair_value_that_is_not_a_finite_number_counts_as_none():
    results = [{"variant": v, "seed": s, "metrics": {}} for s in (1, 2) for v in ("a", "b")]
    claim = Claim(a="a", b="b", metric="span_mean", direction="higher")
    agg = aggregate(results, [claim], [], pair_metrics=["span_mean"],
                    pair_metric=lambda m, ra, rb: (float("nan"), 0.5) if ra["seed"] == 1 else (0.7, 0.5))
    c = agg["claims"][0]
    assert c["pair_values"] == {1: [None, 0.5], 2: [0.7, 0.5]} and c["diffs"] == {2: pytest.approx(0.2)}


def test_pair_metrics_without_the_adapters_pair_metric_are_refused_before_any_unit():
    from rubricflow.config import ConfigError
    from rubricflow.study.harness import study_method
    from rubricflow.study.spec import StudySpec

    spec = StudySpec(method="rucl", variants={"a": {}, "b": {}}, metrics=["acc"], out_dir="x",
                     pair_metrics=["span_mean"])
    with pytest.raises(ConfigError, match=r"pair_metrics \['span_mean'\] need a pair_metric in the 'rucl' study"):
        study_method(spec)
