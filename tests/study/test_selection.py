"""Selection studies: evaluated on val, scored per setting under the guard, naming the setting they choose; a val
study never reads test."""

import json

import pytest

from rubricflow.config import config_from_dict
from rubricflow.methods.rucl.study import rucl_spec
from rubricflow.study.harness import RESULT_FILE, Unit, run_study, unit_dir
from rubricflow.study.spec import StudySpec
from rubricflow.study.stats import aggregate
from tests.study.helpers import harness_cfg, make_shared
from tests.study.test_stats import _results


def test_selection_scores_each_setting_over_its_variants():
    from rubricflow.study.spec import Selection
    from rubricflow.study.stats import select

    results = _results({
        "o-lo": {1: {"acc": 0.50}, 2: {"acc": 0.52}}, "r-lo": {1: {"acc": 0.60}, 2: {"acc": 0.62}},
        "o-hi": {1: {"acc": 0.70}, 2: {"acc": 0.72}}, "r-hi": {1: {"acc": 0.30}, 2: {"acc": 0.32}},
        "o-mid": {1: {"acc": 0.56}, 2: {"acc": 0.56}}, "r-mid": {1: {"acc": None}, 2: {"acc": None}},
    })
    agg = aggregate(results, [], ["acc"])
    chosen = select(agg, Selection(metric="acc", settings={"lo": ["o-lo", "r-lo"], "hi": ["o-hi", "r-hi"],
                                                          "mid": ["o-mid", "r-mid"]}))
    # lo: (0.51 + 0.61) / 2 = 0.56; hi: (0.71 + 0.31) / 2 = 0.51 (the best single variant is o-hi, but the setting
    # must serve both methods); mid has no value for r-mid: not eligible, though o-mid alone would tie lo
    assert chosen["settings"]["lo"]["score"] == pytest.approx(0.56)
    assert chosen["settings"]["hi"]["score"] == pytest.approx(0.51)
    assert chosen["settings"]["mid"]["score"] is None
    assert chosen["settings"]["mid"]["missing"] == {"r-mid": [1, 2]} and "missing" not in chosen["settings"]["lo"]
    assert chosen["selected"] == "lo"
    from rubricflow.study.report import render_markdown

    md = render_markdown("tune", agg, {"eval_split": "val"}, chosen)
    assert "Not eligible, acc missing: mid (r-mid seed 1, 2)." in md  # a missing unit is named, not only "n/a"
    partial = select(agg, Selection(metric="acc", settings={"lo": ["o-lo", "r-lo"], "new": ["o-new", "r-lo"]}))
    assert partial["settings"]["new"]["missing"] == {"o-new": "no units"}  # a variant left out of the run
    lower = select(agg, Selection(metric="acc", direction="lower", settings={"lo": ["o-lo", "r-lo"],
                                                                            "hi": ["o-hi", "r-hi"]}))
    assert lower["selected"] == "hi"
    per_variant = select(agg, {"metric": "acc"})  # no settings: every variant is its own
    assert per_variant["selected"] == "o-hi"
    assert select(agg, None) is None


def test_a_grid_selection_names_a_winning_end_and_gives_each_setting_per_seed():
    """A grid's winner at either end is named (the rule that extends the grid reads it), one inside is not; every
    setting's score comes seed by seed (the mean over its variants on that seed), and both reach the report."""
    from rubricflow.study.report import render_markdown
    from rubricflow.study.spec import Selection
    from rubricflow.study.stats import select

    def chosen(acc_lo, acc_mid, acc_hi, grid=True):
        results = _results({
            "a-lo": {1: {"acc": acc_lo}, 2: {"acc": acc_lo + 0.1}}, "b-lo": {1: {"acc": acc_lo}, 2: {"acc": acc_lo}},
            "a-mid": {1: {"acc": acc_mid}, 2: {"acc": acc_mid}}, "b-mid": {1: {"acc": acc_mid}, 2: {"acc": acc_mid}},
            "a-hi": {1: {"acc": acc_hi}, 2: {"acc": acc_hi}}, "b-hi": {1: {"acc": acc_hi}, 2: {"acc": acc_hi}},
        })
        agg = aggregate(results, [], ["acc"])
        sel = Selection(metric="acc", grid=grid, settings={k: [f"a-{k}", f"b-{k}"] for k in ("lo", "mid", "hi")})
        return agg, select(agg, sel)

    agg, top = chosen(0.5, 0.6, 0.7)
    assert (top["selected"], top["grid_end"]) == ("hi", "hi")
    assert top["settings"]["lo"]["per_seed"] == {"1": pytest.approx(0.5), "2": pytest.approx(0.55)}
    md = render_markdown("tune", agg, {"eval_split": "val"}, top)
    assert "**hi is an end of the grid**" in md and "| lo | a-lo 0.550, b-lo 0.500 | 0.525 | 1: 0.500, 2: 0.550 |" in md
    assert chosen(0.7, 0.6, 0.5)[1]["grid_end"] == "lo"
    agg, inside = chosen(0.5, 0.7, 0.6)
    assert (inside["selected"], inside["grid_end"]) == ("mid", None)
    assert "The winner is inside the grid." in render_markdown("tune", agg, {"eval_split": "val"}, inside)
    assert chosen(0.5, 0.6, 0.7, grid=False)[1]["grid_end"] is None  # settings that are not one grid: no end


def test_a_setting_whose_metric_is_missing_on_some_seeds_is_not_eligible():
    from rubricflow.study.stats import select

    # "part" has the best mean over the seeds where its metric exists (0.9 on seed 1) but none on seed 2 (e.g. a
    # range mean that is n/a where the routers miss the range): scored on its successes only it would win
    results = _results({"full": {1: {"acc": 0.60}, 2: {"acc": 0.64}}, "part": {1: {"acc": 0.90}, 2: {"acc": None}}})
    agg = aggregate(results, [], ["acc"])
    assert agg["variants"]["part"]["acc"]["mean"] == pytest.approx(0.90)
    chosen = select(agg, {"metric": "acc"})
    assert chosen["settings"]["part"]["score"] is None
    assert chosen["settings"]["full"]["score"] == pytest.approx(0.62)
    assert chosen["selected"] == "full"


def test_the_most_defined_fallback_compares_settings_over_the_same_methods_only():
    from rubricflow.study.stats import select

    vals = {"g": (None, None, None), "b": (0.8, 0.7, None), "n": (0.9, 0.6, None), "x": (0.1, None, 0.99)}
    results = _results({f"{k}-{i}": {1: {"acc": x}, 2: {"acc": x}} for k, xs in vals.items() for i, x in enumerate(xs)})
    agg = aggregate(results, [], ["acc"])
    settings = {k: [f"{k}-{i}" for i in range(3)] for k in vals}
    assert select(agg, {"metric": "acc", "settings": settings})["selected"] is None  # the rule alone: none has all
    chosen = select(agg, {"metric": "acc", "settings": settings, "fallback": "most_defined"})
    fb = chosen["fallback"]
    assert fb["defined"] == {"g": 0, "b": 2, "n": 2, "x": 2}
    # b, n and x have two each, but x's are other methods (places 0 and 2): nothing is comparable, nothing chosen
    assert chosen["selected"] is None and "different places" in fb["why_none"]
    del settings["x"]
    chosen = select(agg, {"metric": "acc", "settings": settings, "fallback": "most_defined"})
    assert chosen["fallback"]["scores"] == {"b": pytest.approx(0.75), "n": pytest.approx(0.75)}
    assert chosen["selected"] == "b"  # an exact tie keeps the first listed
    assert chosen["fallback"]["over"] == ["b-0", "b-1"]


def test_a_selection_study_must_be_evaluated_on_val():
    with pytest.raises(ValueError, match="must be evaluated on val"):
        StudySpec(**{**rucl_spec().model_dump(), "selection": {"metric": "accuracy"}, "claims": [],
                     "preconditions": []})
    with pytest.raises(ValueError, match=r"selection.settings.x: \['nope'\] are not variants"):
        StudySpec(**{**rucl_spec().model_dump(), "eval_split": "val", "claims": [], "preconditions": [],
                     "selection": {"metric": "accuracy", "settings": {"x": ["nope"]}}})
    tune = config_from_dict({}).study.rucl_tune
    assert tune.eval_split == "val" and tune.selection is not None
    assert not set(tune.seeds) & set(config_from_dict({}).study.rucl.seeds)  # tuning seeds are not the study's
    # every setting is trained under both reward modes, so the choice favours neither method
    for setting, members in tune.selection.settings.items():
        assert sorted(tune.variants[v]["rucl.reward.mode"] for v in members) == ["outcome", "rucl"], setting
        assert len({tuple(sorted((k, x) for k, x in tune.variants[v].items() if k != "rucl.reward.mode"))
                    for v in members}) == 1, setting
    # the rule: sampled val accuracy (the RL objective), guarded by greedy val accuracy within 0.02 of the start
    assert (tune.selection.metric, tune.selection.guard_metric, tune.selection.guard_baseline,
            tune.selection.guard_margin) == ("sampled_accuracy", "accuracy", "sft", 0.02)


class SplitReadingUnit:
    """A unit that reads the split its config says it is evaluated on, as the RuCL unit
    (rubricflow.methods.rucl.study.run_unit) does."""

    def __init__(self, tmp_path):
        self.tmp_path, self.splits = tmp_path, []

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        from rubricflow.data.schema import read_dataset

        self.splits.append(ucfg.rucl.eval_split)
        rows = read_dataset(self.tmp_path / "ds", split=ucfg.rucl.eval_split)
        acc = {"o-a": 0.5, "r-a": 0.7, "o-b": 0.6, "r-b": 0.5}[unit.variant] + 0.01 * (unit.seed % 3)
        return {"metrics": {"accuracy": acc, "correct_but_flawed": 0.1}, "eval_samples": len(rows)}


def _tiny_dataset(path):
    from rubricflow.data.schema import Sample, write_dataset

    samples = [Sample(f"t-{sp}-{i}", [], "q?", "1", "int", "counting", {}, sp, "synthetic/counting")
               for sp in ("train", "val", "test") for i in range(3)]
    write_dataset(path, samples, manifest={"generator": "test"})


def test_a_val_study_never_reads_test_and_reports_its_choice(tmp_path):
    from rubricflow.pipeline.splits import TestSplitAccess

    _tiny_dataset(tmp_path / "ds")
    variants = {"o-a": {"rucl.reward.mode": "outcome"}, "r-a": {"rucl.reward.mode": "rucl"},
                "o-b": {"rucl.reward.mode": "outcome", "rucl.grpo.lr": 1e-3},
                "r-b": {"rucl.reward.mode": "rucl", "rucl.grpo.lr": 1e-3}}
    study = {"variants": variants, "untrained": [], "claims": [], "metrics": ["accuracy", "correct_but_flawed"],
             "eval_split": "val", "selection": {"metric": "accuracy", "settings": {"a": ["o-a", "r-a"],
                                                                                 "b": ["o-b", "r-b"]}}}
    cfg = harness_cfg(tmp_path, study)
    make_shared(tmp_path)
    unit = SplitReadingUnit(tmp_path)
    out = run_study(cfg, "rucl", unit_fn=unit)
    assert set(unit.splits) == {"val"} and out["eval_split"] == "val"
    # a: (0.51 + 0.71) / 2 = 0.61 > b: (0.61 + 0.51) / 2 = 0.56 (seed wobble 11, 22, 33 -> +.02, +.01, 0)
    assert out["selected"] == "a"
    assert out["selected_overrides"] == {"o-a": variants["o-a"], "r-a": variants["r-a"]}
    md = (tmp_path / "reports" / "studies" / "rucl.md").read_text()
    assert "val split" in md and "**selected: a**" in md and "test split" not in md
    data = json.loads((tmp_path / "reports" / "studies" / "rucl.json").read_text())
    assert data["selection"]["selected"] == "a" and data["eval_split"] == "val"
    assert data["selection"]["settings"]["b"]["score"] == pytest.approx(0.56)
    saved = json.loads((unit_dir(cfg.study.rucl, Unit("o-b", 22)) / RESULT_FILE).read_text())
    assert saved["eval_split"] == "val"

    # the guard is real: a selection unit that asks for test rows fails, and leaves no result behind
    class Peeking(SplitReadingUnit):
        def __call__(self, ucfg, unit, udir, run, secret_resolver):
            from rubricflow.data.schema import read_dataset

            read_dataset(self.tmp_path / "ds", split="test")

    peek = harness_cfg(tmp_path, {**study, "out_dir": str(tmp_path / "peek")})
    with pytest.raises(TestSplitAccess, match="study rucl"):
        run_study(peek, "rucl", unit_fn=Peeking(tmp_path))
    assert not list((tmp_path / "peek").rglob(RESULT_FILE))
    # the same unit in a reporting study (eval_split test) may read test
    report = harness_cfg(tmp_path, {"out_dir": str(tmp_path / "rep"), "variants": {"o-a": variants["o-a"]},
                             "untrained": [], "claims": [], "metrics": ["accuracy"]})
    unit = SplitReadingUnit(tmp_path)
    run_study(report, "rucl", unit_fn=unit)
    assert set(unit.splits) == {"test"}


def test_the_selection_guard_makes_a_setting_that_breaks_the_start_ineligible():
    from rubricflow.study.spec import Selection
    from rubricflow.study.stats import select

    rows = [{"variant": v, "seed": s, "metrics": {"sampled": sm, "greedy": g}}
            for s in (1, 2) for v, sm, g in (("sft", 0.50, 0.80), ("fast", 0.70, 0.70), ("slow", 0.60, 0.79))]
    agg = aggregate(rows, [], ["sampled", "greedy"])
    sel = Selection(metric="sampled", settings={"fast": ["fast"], "slow": ["slow"]}, guard_metric="greedy",
                    guard_baseline="sft", guard_margin=0.02)
    chosen = select(agg, sel)
    # "fast" has the best sampled score but its greedy accuracy fell 0.10 below the start: not eligible
    assert chosen["selected"] == "slow"
    assert chosen["settings"]["fast"]["guard_ok"] is False and chosen["settings"]["slow"]["guard_ok"] is True
    assert select(agg, sel.model_copy(update={"guard_margin": 0.2}))["selected"] == "fast"


def test_a_setting_whose_precondition_fails_is_not_eligible_when_the_rule_requires_them():
    """The router-capacity case: the best-scoring setting's oracle router falls below the threshold on one seed, so
    the claims it prepares would be untestable; with require_preconditions the next setting that meets it wins."""
    from rubricflow.study.spec import Precondition, Selection
    from rubricflow.study.stats import select

    per_seed = {"best": (0.90, 0.70, 0.95), "steady": (0.84, 0.84, 0.84), "threshold": (0.83, 0.83, 0.83)}
    rows = [{"variant": v, "seed": s, "metrics": {"acc": xs[i]}} for v, xs in per_seed.items()
            for i, s in enumerate((1, 2, 3))]
    pres = [Precondition(name=f"reaches the threshold ({v})", variant=v, minus="threshold", metric="acc",
                         threshold=0.0, gates=[f"{v} vs threshold (acc)"]) for v in ("best", "steady")]
    agg = aggregate(rows, [], ["acc"], preconditions=pres)
    sel = Selection(metric="acc", settings={"best": ["best"], "steady": ["steady"]})
    assert select(agg, sel)["selected"] == "best"  # without the requirement the mean wins
    chosen = select(agg, sel.model_copy(update={"require_preconditions": True}))
    assert chosen["selected"] == "steady"
    assert chosen["settings"]["best"]["preconditions_failed"] == ["reaches the threshold (best)"]
    assert chosen["settings"]["steady"]["preconditions_ok"] is True
    from rubricflow.study.report import render_markdown

    md = render_markdown("capacity", agg, {"eval_split": "val"}, chosen)
    assert "a setting is eligible only if every precondition on its variants holds" in md
    assert "| best | best 0.850 | 0.850 | 1: 0.900, 2: 0.700, 3: 0.950 | fail: reaches the threshold (best) |  |" in md
    assert "| steady | steady 0.840 | 0.840 | 1: 0.840, 2: 0.840, 3: 0.840 | hold | **selected** |" in md
    # a precondition that gates no claim gates the setting: the report says so
    free = [p.model_copy(update={"gates": []}) for p in pres]
    md = render_markdown("capacity", aggregate(rows, [], ["acc"], preconditions=free), {"eval_split": "val"}, chosen)
    assert "| **fails** | the setting's eligibility (selection) |" in md
