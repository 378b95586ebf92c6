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
    assert c0["verdict_raw"] == "shown"  # the interval excludes 0 ...
    assert c0["note"] == "only 3 paired seeds (a claim needs 5)"
    assert c1["verdict_raw"] == "reversed"
    assert c2["diff_mean"] == pytest.approx(0.0) and c2["verdict"] == "not shown"
    assert c3["diff_mean"] == pytest.approx(0.1) and c3["half_width"] == pytest.approx(0.0, abs=1e-12)
    assert c3["verdict"] == "reversed" and c3["p_value"] < 1e-20  # sd ~0: the bound is excluded at any level
    assert c4["n_pairs"] == 2 and c4["diffs"] == pytest.approx({2: -0.3, 3: -0.25})
    assert c5["n_pairs"] == 0 and c5["verdict"] == "not shown" and "no interval" in c5["note"]
    # ... but not after Holm over the 5 claims with a p (c5 has none). By hand, two-sided t p-values:
    # c0, c1: t = .15 / (.05 / sqrt 3) = 5.19615, df 2: sf = (1 - t / sqrt(t^2 + 2)) / 2 -> p = 0.0350992
    # c4: diffs -.30 -.25, t = -.275 / (.0353553 / sqrt 2) = -11, df 1 (Cauchy): sf = 1/2 - atan(11)/pi -> p = 0.057716
    # c2: mean 0 -> p 1; c3: p 0. Sorted: c3 0, c0 .0351, c1 .0351, c4 .0577, c2 1 -> x5, x4, x3, x2, x1, then the
    # running maximum: 0, .140397, .140397 (.105298 raised), .140397 (.115432 raised), 1
    assert c0["p_value"] == pytest.approx(1 - 5.19615 / math.sqrt(5.19615**2 + 2), abs=1e-5)
    assert c4["p_value"] == pytest.approx(1 - 2 * math.atan(11) / math.pi, abs=1e-9)
    assert [c["p_adjusted"] for c in (c3, c0, c1, c4, c2)] == pytest.approx(
        [0.0, 0.140397, 0.140397, 0.140397, 1.0], abs=1e-5)
    assert c5["p_adjusted"] is None and c0["family_size"] == 5
    assert (c0["verdict"], c1["verdict"]) == ("not shown", "not shown")
    # an exploratory comparison gets its interval and raw verdict, says it is exploratory and is outside the family
    (ex,) = aggregate(results, [Claim(a="a", b="b", metric="acc", direction="higher", exploratory=True)],
                      ["acc"])["claims"]
    assert (ex["verdict"], ex["diff_mean"]) == (c0["verdict_raw"], c0["diff_mean"]) and ex["p_adjusted"] is None
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


def test_holm_by_hand():
    from rubricflow.study.stats import holm

    # m = 4 (None is no test): sorted .01 .02 .03 .04 -> x4 .04, x3 .06, x2 .06, x1 .04 -> running max .04 .06 .06 .06
    got = holm({"a": 0.03, "b": 0.01, "c": None, "d": 0.04, "e": 0.02})
    assert got == pytest.approx({"a": 0.06, "b": 0.04, "c": None, "d": 0.06, "e": 0.06})
    assert holm({"a": 0.5, "b": 0.4}) == pytest.approx({"a": 0.8, "b": 0.8})  # capped only at 1: 2 x .4, then max
    assert holm({"a": 0.7, "b": 0.6}) == {"a": 1.0, "b": 1.0}


def test_min_detectable_effect_by_hand():
    from rubricflow.study.stats import min_detectable_effect

    # n 5, sd .1, alpha .05, power .8: (t_.975,4 2.776445 + t_.8,4 0.940965) * .1 / sqrt 5 = 0.166248
    assert min_detectable_effect(0.1, 5, 0.05) == pytest.approx(0.166248, abs=1e-5)
    assert min_detectable_effect(None, 5, 0.05) is None and min_detectable_effect(0.1, 1, 0.05) is None


def test_a_failed_precondition_makes_its_claims_untestable_and_leaves_the_family():
    from rubricflow.study.spec import Precondition

    # b beats a by .1 on every seed; the curriculum "switched" on 2 of 5 seeds only
    results = _results({
        "rucl": {s: {"acc": 0.6 + 0.01 * s, "switch": 1.0 if s < 3 else 0.0} for s in range(1, 6)},
        "base": {s: {"acc": 0.5 + 0.01 * s, "switch": 0.0} for s in range(1, 6)},
    })
    claims = [Claim(a="rucl", b="base", metric="acc", direction="higher", name="curriculum helps"),
              Claim(a="rucl", b="base", metric="acc", direction="higher", margin=0.01)]
    pre = Precondition(name="switches", variant="rucl", metric="switch", threshold=1.0, min_share=0.8,
                       gates=["curriculum helps"])
    agg = aggregate(results, claims, ["acc", "switch"], preconditions=[pre])
    (p,) = agg["preconditions"]
    assert p["values"] == {1: 1.0, 2: 1.0, 3: 0.0, 4: 0.0, 5: 0.0} and p["n_met"] == 2 and p["need"] == 4
    assert p["holds"] is False
    gated, free = agg["claims"]
    assert gated["verdict"] == "untestable" and gated["untestable_because"] == ["switches"]
    assert gated["verdict_raw"] == "shown" and gated["p_adjusted"] is None  # the data alone would have shown it
    assert free["verdict"] == "shown" and free["family_size"] == 1  # alone in the family: not adjusted
    assert free["p_adjusted"] == free["p_value"]
    # the same precondition met on 4 of 5 seeds holds, and both claims are tested
    results[2]["metrics"]["switch"] = results[3]["metrics"]["switch"] = 1.0
    agg = aggregate(results, claims, ["acc", "switch"], preconditions=[pre])
    assert agg["preconditions"][0]["holds"] and [c["verdict"] for c in agg["claims"]] == ["shown", "shown"]
    # a difference between two variants, and a seed with no value, which does not meet it
    diff = Precondition(name="beats base", variant="rucl", minus="base", metric="acc", threshold=0.05,
                        gates=["curriculum helps"])
    del results[0]["metrics"]["acc"]
    (d,) = aggregate(results, claims, ["acc", "switch"], preconditions=[diff])["preconditions"]
    assert d["values"][1] is None and d["met"][1] is False and d["values"][2] == pytest.approx(0.1)
    assert (d["n_met"], d["need"], d["holds"]) == (4, 5, False)


def test_a_spec_checks_its_preconditions_and_claim_names():
    from pydantic import ValidationError

    from rubricflow.study.spec import StudySpec

    base = {"method": "rucl", "variants": {"a": {}, "b": {}}, "metrics": ["acc"], "out_dir": "x",
            "claims": [{"a": "a", "b": "b", "metric": "acc", "direction": "higher"}]}
    pre = {"name": "p", "variant": "a", "metric": "acc", "threshold": 0.5, "gates": ["a vs b (acc)"]}
    assert StudySpec(**base, preconditions=[pre]).preconditions[0].gates == ["a vs b (acc)"]
    with pytest.raises(ValidationError, match=r"precondition 'p' gates \['nope'\], which are not claims"):
        StudySpec(**base, preconditions=[{**pre, "gates": ["nope"]}])
    with pytest.raises(ValidationError, match=r"precondition 'p': metric 'x' is not in metrics"):
        StudySpec(**base, preconditions=[{**pre, "metric": "x"}])
    # a precondition gating no claim is a selection rule's eligibility condition, and only that
    with pytest.raises(ValidationError, match=r"precondition 'p' gates nothing"):
        StudySpec(**base, preconditions=[{**pre, "gates": []}])
    chooses = {**base, "eval_split": "val", "selection": {"metric": "acc", "require_preconditions": True}}
    assert StudySpec(**chooses, preconditions=[{**pre, "gates": []}]).preconditions[0].gates == []
    with pytest.raises(ValidationError, match=r"precondition 'p' gates nothing"):
        StudySpec(**{**chooses, "selection": {"metric": "acc"}}, preconditions=[{**pre, "gates": []}])
    with pytest.raises(ValidationError, match=r"precondition 'p': 'c' is not a variant"):
        StudySpec(**base, preconditions=[{**pre, "minus": "c"}])
    with pytest.raises(ValidationError, match=r"claims \['a vs b \(acc\)'\] appear twice"):
        StudySpec(**{**base, "claims": base["claims"] * 2})


def test_a_precondition_on_two_metrics_of_one_variant():
    from rubricflow.study.spec import Precondition

    results = _results({"start": {1: {"oracle": 0.9, "planner": 0.8}, 2: {"oracle": 0.8, "planner": 0.79}}})
    pre = Precondition(name="room", variant="start", metric="oracle", minus_metric="planner", threshold=0.05,
                       gates=["x"])
    (p,) = aggregate(results, [], ["oracle", "planner"], preconditions=[pre])["preconditions"]
    assert p["values"] == pytest.approx({1: 0.1, 2: 0.01}) and p["met"] == {1: True, 2: False} and not p["holds"]


def test_a_claim_on_two_metrics_of_one_variant_pairs_them_per_seed():
    # the planner's checklists against a fixed one, executed by the same trained verifier: one unit, two readouts
    results = _results({"dr": {1: {"acc": 0.70, "acc_fixed": 0.60}, 2: {"acc": 0.65, "acc_fixed": 0.60},
                               3: {"acc": 0.80, "acc_fixed": 0.62}, 4: {"acc": 0.50, "acc_fixed": None}}})
    claim = Claim(a="dr", b="dr", metric="acc", b_metric="acc_fixed", direction="higher")
    assert claim.key == "dr acc vs dr acc_fixed"
    (c,) = aggregate(results, [claim], ["acc", "acc_fixed"])["claims"]
    assert c["diffs"] == pytest.approx({1: 0.10, 2: 0.05, 3: 0.18}) and c["n_pairs"] == 3
    assert c["b_metric"] == "acc_fixed"
    # across two variants it compares a's metric with b's other metric
    two = _results({"a": {1: {"acc": 0.7, "x": 0.1}}, "b": {1: {"acc": 0.2, "x": 0.4}}})
    (c,) = aggregate(two, [Claim(a="a", b="b", metric="acc", b_metric="x", direction="higher")], ["acc", "x"])["claims"]
    assert c["diffs"] == pytest.approx({1: 0.3})
    from rubricflow.study.report import claim_lines

    (row,) = [line for line in claim_lines([c], 95) if line.startswith("| a vs b")]
    assert row.startswith("| a vs b | acc vs x | higher | 1 |")


def test_a_spec_checks_a_claims_second_metric():
    from pydantic import ValidationError

    from rubricflow.study.spec import StudySpec

    base = {"method": "rucl", "variants": {"a": {}, "b": {}}, "metrics": ["acc", "fixed"], "out_dir": "x"}
    one = {"a": "a", "b": "a", "metric": "acc", "direction": "higher"}
    assert StudySpec(**base, claims=[{**one, "b_metric": "fixed"}]).claims[0].key == "a acc vs a fixed"
    with pytest.raises(ValidationError, match=r"b_metric 'nope' is not in metrics"):
        StudySpec(**base, claims=[{**one, "b_metric": "nope"}])
    with pytest.raises(ValidationError, match=r"compares a's acc with itself"):
        StudySpec(**base, claims=[{**one, "b_metric": "acc"}])
    with pytest.raises(ValidationError, match=r"compares a with itself"):
        StudySpec(**base, claims=[one])
    with pytest.raises(ValidationError, match=r"b_metric with the pair metric 'span'"):
        StudySpec(**base, pair_metrics=["span"], claims=[{**one, "b": "b", "metric": "span", "b_metric": "acc"}])


def test_figure_intervals_stay_inside_the_metrics_range():
    from rubricflow.study.report import plot_interval

    # 2 of 5 seeds switched: Wilson (scipy), inside [0, 1], not the t-interval [-0.28, 1.08]-style bar
    lo, hi, how = plot_interval([1, 1, 0, 0, 0], 0.95)
    assert how == "wilson" and (lo, hi) == pytest.approx((0.1176, 0.7693), abs=1e-4)
    # accuracies near the top: the t-interval is clipped at 1
    lo, hi, how = plot_interval([0.9, 0.99, 1.0, 0.95, 0.7], 0.95)
    t = t_interval([0.9, 0.99, 1.0, 0.95, 0.7])
    assert how.startswith("t, clipped") and hi == 1.0 < t["ci_high"] and lo == pytest.approx(t["ci_low"])
    assert plot_interval([3.0, 5.0], 0.95)[2] == "t" and plot_interval([0.4], 0.95)[:2] == (None, None)


def test_the_figure_is_a_grid_not_one_long_row(tmp_path):
    from PIL import Image

    from rubricflow.study.report import plot_study

    results = _results({v: {s: {f"m{i}": 0.1 * i + 0.01 * s for i in range(12)} for s in (1, 2, 3)}
                        for v in ("a", "b", "c")})
    agg = aggregate(results, [], [f"m{i}" for i in range(12)])
    w, h = Image.open(plot_study("x", agg, tmp_path / "x.png")).size
    assert w <= 1500 and h <= 1100 and w / h < 2  # 3 rows of 4 panels
