"""The RoRo study adapter: per-unit configs, one routing method per variant, the harness with injected unit
functions (claims, the per-phase Judge table against chance, the curve bands), and the refusal without the shared
outputs. A real unit runs in the slow end-to-end test (tests/roro/test_pipeline.py)."""

import json

import pytest

from rubricflow.config import ConfigError, config_from_dict
from rubricflow.study.harness import SharedOutputsMissing, Unit, require_shared, run_study, unit_config


def _cfg(tmp_path, **study):
    a, d = tmp_path / "artifacts" / "roro", tmp_path / "data" / "roro"
    return config_from_dict({
        "reports_dir": str(tmp_path / "reports"),
        "roro": {"data_dir": str(d), "out_dir": str(a), "slm": {"path": str(a / "models" / "slm")},
                 "lrm": {"path": str(a / "models" / "lrm")},
                 "router": {"checkpoint_dir": str(tmp_path / "ckpt" / "roro")}},
        "study": {"roro": {"out_dir": str(tmp_path / "studies" / "roro"),
                           "report_dir": str(tmp_path / "reports" / "studies"), **study}},
    })


def _make_shared(tmp_path):
    for p in ("artifacts/roro/models/slm/config.json", "artifacts/roro/models/lrm/config.json",
              "data/roro/trajectories.parquet", "data/roro/step_cache.jsonl", "data/roro/pairs.parquet"):
        f = tmp_path / p
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")


def test_default_studies_preregister_matched_cost_claims_in_both_readings():
    study = config_from_dict({}).study
    spec = study.roro
    assert spec.method == "roro" and spec.seeds == [101, 202, 303, 404, 505] and spec.eval_split == "test"
    assert set(spec.variants) == {"roro", "oracle-process", "outcome-only", "threshold", "random"}
    claims = {(c.a, c.b, c.metric, c.direction) for c in spec.claims}
    assert claims == {(a, b, m, "higher") for a, b in (("oracle-process", "outcome-only"), ("roro", "outcome-only"),
                                                      ("roro", "threshold"))
                      for m in ("chain_pair_range_auc", "chain_acc_at_cost_50")}
    # the range mean is a pair metric: computed over the costs both methods' own points span, never a chord
    assert "chain_pair_range_auc" in spec.pair_metrics and "chain_pair_range_auc" not in spec.metrics
    assert not any("random" in (c.a, c.b) or c.metric == "auc" for c in spec.claims)  # chords are no evidence
    parity = study.roro_parity
    assert {v["roro.task.answer"] for v in parity.variants.values()} == {"parity"}
    assert {v["roro.task.answer"] for v in spec.variants.values()} == {"value"}
    assert parity.claims == spec.claims and parity.out_dir != spec.out_dir
    sweep = spec.variants["outcome-only"]["roro.router.sweep_cost_weights"]
    assert parity.variants["roro"]["roro.router.sweep_cost_weights"] == sweep and min(sweep) < 0.1 < 1.0 < max(sweep)
    # a partial study section keeps that study's own defaults (not StudySpec's, which are RuCL's)
    part = config_from_dict({"study": {"roro": {"seeds": [1, 2]}, "rucl_tune": {"seeds": [7]},
                                       "deltarubric": {"seeds": [3]}}}).study
    assert (part.roro.method, part.roro.seeds, sorted(part.roro.variants)) == ("roro", [1, 2], sorted(spec.variants))
    dr = config_from_dict({}).study.deltarubric
    assert (part.deltarubric.method, part.deltarubric.seeds, part.deltarubric.variants, part.deltarubric.out_dir) == (
        "deltarubric", [3], dr.variants, "artifacts/studies/deltarubric")
    assert part.rucl_tune.eval_split == "val" and part.rucl_tune.selection is not None


def test_router_tune_chooses_the_scaling_on_val_without_the_method_under_test(tmp_path):
    from rubricflow.methods.roro.study.unit import unit_kind
    from rubricflow.study.stats import aggregate, select

    cfg = _cfg(tmp_path)
    spec = cfg.study.roro_router_tune
    assert spec.eval_split == "val" and spec.claims == [] and not set(spec.seeds) & set(cfg.study.roro.seeds)
    sel = spec.selection
    assert sel.metric == "range_auc" and list(sel.settings) == ["group", "batch", "none"]
    assert sel.fallback == "most_defined"  # added after the first run chose nothing (the spec says so)
    # each setting averages the same four units: outcome-only and oracle-process (never RoRo's Judge) x both readings
    for sc, members in sel.settings.items():
        units = [unit_config(cfg, "roro_router_tune", spec, Unit(v, 11)).roro for v in members]
        assert {u.router.grpo.scale_rewards for u in units} == {sc}
        assert sorted((unit_kind(u), u.task.answer) for u in units) == sorted(
            (m, a) for m in ("outcome-only", "oracle-process") for a in ("value", "parity"))
        assert all(u.eval.split == "val" for u in units)
    assert sorted(v for m in sel.settings.values() for v in m) == sorted(spec.variants)
    # a scaling whose routers miss the common range on one unit is out, however well it does elsewhere
    vals = {"group": (0.95, None), "batch": (0.80, 0.82), "none": (0.78, 0.79)}
    results = [{"variant": v, "seed": s, "metrics": {"range_auc": vals[sc][i] if v.endswith("parity") else 0.8}}
               for sc, members in sel.settings.items() for v in members for i, s in enumerate(spec.seeds)]
    chosen = select(aggregate(results, [], ["range_auc"]), sel)
    assert chosen["settings"]["group"]["score"] is None and chosen["selected"] == "batch"


def test_unit_configs_have_their_own_seeds_dirs_and_one_method(tmp_path):
    from rubricflow.methods.roro.study.unit import unit_kind

    cfg = _cfg(tmp_path)
    spec = cfg.study.roro
    a, b = unit_config(cfg, "roro", spec, Unit("roro", 101)), unit_config(cfg, "roro", spec, Unit("roro", 202))
    o = unit_config(cfg, "roro", spec, Unit("outcome-only", 101))
    for u, seed in ((a, 101), (b, 202)):
        assert (u.roro.seed, u.roro.rubricor_judge.seed, u.roro.router.grpo.seed, u.roro.eval.seed) == (seed,) * 4
    assert a.roro.out_dir == str(tmp_path / "studies/roro/roro/seed101/out")
    assert a.roro.rubricor_judge.judge.path == str(tmp_path / "studies/roro/roro/seed101/out/judge")
    assert a.roro.router.checkpoint_dir == str(tmp_path / "ckpt/studies/roro/roro/seed101")
    assert a.roro.data_dir == cfg.roro.data_dir and a.roro.lrm.path == cfg.roro.lrm.path  # shared, not per seed
    assert a.roro.eval.split == "test" and cfg.roro.rubricor_judge.judge.path == "artifacts/roro/judge"
    assert (unit_kind(a.roro), unit_kind(o.roro)) == ("roro", "outcome-only")
    with pytest.raises(ConfigError, match=r"exactly one routing method.*\['roro', 'outcome-only', 'threshold', "
                                          r"'random'\]"):
        unit_kind(cfg.roro)  # the pipeline's config names four
    oracle = unit_config(cfg, "roro", spec, Unit("oracle-process", 101)).roro
    assert unit_kind(oracle) == "oracle-process" and oracle.task.answer == "value"
    bad = _cfg(tmp_path, variants={"x": {"roro.seed": 3}}, claims=[], untrained=[])
    with pytest.raises(ConfigError, match=r"\['roro.seed'\] are set by the study"):
        unit_config(bad, "roro", bad.study.roro, Unit("x", 1))


def test_require_shared_names_the_pipeline_outputs(tmp_path):
    cfg = _cfg(tmp_path)
    with pytest.raises(SharedOutputsMissing) as e:
        require_shared(cfg, "roro", cfg.study.roro, [Unit("roro", 101)])
    for p in ("models/slm/config.json", "models/lrm/config.json", "trajectories.parquet", "pairs.parquet",
              "step_cache.jsonl"):
        assert p in str(e.value), p
    assert "dvc repro roro_pairs" in str(e.value)


# fake units: RoRo above outcome-only by 0.02 AUC on every seed (+-0.005), threshold flat; the Judge's process
# accuracy rises from 0.50 to 0.60 +- 0.01 over the phases
DELTA = {101: 0.005, 202: -0.005, 303: 0.0}


def _chain_points(kind, seed):
    """Chain-exact curve points per method: outcome-only's stop at cost 0.6 (and on seed 303 it has only the
    all-SLM point), so its comparisons run over 0.2-0.6 and seed 303 has none."""
    w = DELTA[seed]
    return {"roro": [[0.1, 0.45 + w], [0.5, 0.75 + w], [0.9, 0.97]],
            "oracle-process": [[0.0, 0.1], [0.4, 0.7], [0.85, 0.96]],
            "outcome-only": [[0.0, 0.1]] if seed == 303 else [[0.0, 0.1], [0.3, 0.5], [0.6, 0.66]],
            "threshold": [[0.05, 0.3], [0.5, 0.74], [0.95, 0.99]],
            "random": [[0.5, 0.55]]}[kind]


class FakeUnit:
    def __init__(self):
        self.calls = []

    def __call__(self, ucfg, unit, udir, run, secret_resolver):
        from rubricflow.methods.roro.study.unit import unit_kind

        kind = unit_kind(ucfg.roro)
        self.calls.append((kind, unit.seed))
        w = DELTA[unit.seed]
        auc = {"roro": 0.80 + w, "oracle-process": 0.85, "outcome-only": 0.78, "threshold": 0.79, "random": 0.65}[kind]
        # outcome-only has no point below cost 0.5 on seed 303: its matched-cost accuracy there is n/a
        at50 = None if (kind, unit.seed) == ("outcome-only", 303) else 0.8 + w
        out = {"metrics": {"chain_range_auc": auc, "chain_acc_at_cost_50": at50, "range_auc": auc},
               "eval_samples": 64, "points": [[0.5, 0.8 + w], [0.7, 0.9]], "anchors": {"all-slm": 0.3, "all-lrm": 1.0},
               "chain_points": _chain_points(kind, unit.seed), "chain_anchors": {"all-slm": 0.1, "all-lrm": 1.0},
               "cost_range": [0.2, 0.8]}
        if kind == "roro":
            out["judge_rounds"] = [
                {"round": 0, "phase": "warm", "selected": False, "val_pairwise_acc": 0.50 + w, "val_acc_process": 0.50},
                {"round": 1, "phase": "judge", "selected": True, "val_pairwise_acc": 0.60 + w,
                 "val_acc_process": 0.60 + w}]
            out["judge_test"] = {"pairwise_acc": 0.58 + w, "acc_process": 0.45 + w}
            out["metrics"].update(judge_test_acc=0.58 + w, judge_test_process_acc=0.45 + w)
        return out


def test_study_report_has_claims_the_judge_table_and_the_curve_bands(tmp_path):
    cfg = _cfg(tmp_path, seeds=[101, 202, 303])
    _make_shared(tmp_path)
    unit = FakeUnit()
    out = run_study(cfg, "roro", unit_fn=unit)
    assert sorted(unit.calls) == sorted((k, s) for k in ("roro", "oracle-process", "outcome-only", "threshold",
                                                         "random") for s in (101, 202, 303))
    # on the 2 seeds with a range the interval excludes 0, but this fake Judge orders only 0.45 +- 0.01 of the process
    # pairs: the precondition fails on every seed, so RoRo's claims against outcome-only are untestable
    data = json.loads((tmp_path / "reports" / "studies" / "roro.json").read_text())
    (c,) = [c for c in data["claims"] if c["key"] == "roro vs outcome-only (chain_pair_range_auc)"]
    assert c["verdict_raw"] == "shown" and c["n_pairs"] == 2
    assert out["claims"][c["key"]] == c["verdict"] == "untestable"
    assert c["untestable_because"] == ["judge orders process pairs"]
    assert out["preconditions"] == {"oracle router reaches the threshold": "holds",
                                    "judge orders process pairs": "fails"}
    md = (tmp_path / "reports" / "studies" / "roro.md").read_text()
    # the pair metric: both hulls over the costs both methods' own points span inside 0.2-0.8
    from rubricflow.methods.roro.router.curves import range_auc

    anchors = [(0.0, 0.1), (1.0, 1.0)]
    want = {s: (range_auc(_chain_points("roro", s), anchors, 0.2, 0.6),
                range_auc(_chain_points("outcome-only", s), anchors, 0.2, 0.6)) for s in (101, 202)}
    # by hand, RoRo on seed 101: the hull through (0.1, 0.455), (0.5, 0.755), (0.9, 0.97) is 0.530 at cost 0.2 and
    # 0.80875 at 0.6; trapezoids (0.3 * 1.285 + 0.1 * 1.56375) / 2 over the width 0.4
    assert want[101][0] == pytest.approx(0.67734375)
    data = json.loads((tmp_path / "reports" / "studies" / "roro.json").read_text())
    claim = next(c for c in data["claims"] if (c["a"], c["b"], c["metric"]) == ("roro", "outcome-only",
                                                                              "chain_pair_range_auc"))
    assert claim["n_pairs"] == 2 and claim["pair_values"]["303"] == [None, None]  # no common range on seed 303
    for s, (va, vb) in want.items():
        assert claim["pair_values"][str(s)] == pytest.approx([va, vb])
        assert claim["diffs"][str(s)] == pytest.approx(va - vb)
    assert data["extras"]["pair_ranges"]["roro vs outcome-only (chain_pair_range_auc)"] == {
        "101": [0.2, 0.6], "202": [0.2, 0.6], "303": None}
    assert "- roro vs outcome-only (chain_pair_range_auc): 101: 0.20-0.60; 202: 0.20-0.60; 303: none" in md
    # RoRo and the threshold both span the whole fixed range on every seed
    assert data["extras"]["pair_ranges"]["roro vs threshold (chain_pair_range_auc)"]["303"] == [0.2, 0.8]
    assert "| roro vs threshold | chain_pair_range_auc | higher | 3 |" in md
    # the n/a seed is left out of the paired difference at matched cost (2 pairs, not 3)
    assert "| roro vs outcome-only | chain_acc_at_cost_50 | higher | 2 |" in md
    # per phase: mean +- t-interval and the mark against chance; warm 0.50 +- 0.012 includes 0.5, phase 1 above
    assert "| 0/warm | 0 | 0.500 ± 0.012 ~ |" in md
    assert "| 1/judge | 3 | 0.600 ± 0.012 above |" in md
    # the kept Judge on the evaluation split: process 0.45 +- 0.012 is below chance
    assert "| kept Judge | 0.580 ± 0.012 above | n/a | n/a | 0.450 ± 0.012 below |" in md
    assert "kept phase - warm start, overall: +0.100 [+0.100, +0.100]" in md
    band = data["extras"]["bands"]["roro"]
    assert band["n"] == 3 and len(band["mean"]) == 51
    assert band["mean"][0] == pytest.approx(0.3) and band["mean"][-1] == pytest.approx(1.0)  # the ends
    assert band["mean"][25] == pytest.approx(0.8) and band["low"][25] < 0.8 < band["high"][25]  # cost 0.5
    assert (tmp_path / "reports" / "studies" / "roro-curves.png").read_bytes()[:4] == b"\x89PNG"
    chain = data["extras"]["chain_bands"]["roro"]  # chain-exact accuracy, the primary metric, has its own bands
    assert chain["mean"][0] == pytest.approx(0.1) and chain["mean"][25] == pytest.approx(0.75)
    assert (tmp_path / "reports" / "studies" / "roro-chain-curves.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Chain-exact accuracy vs LRM cost" in md


def test_studies_dvc_yaml_runs_the_roro_study_on_the_pipelines_outputs():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    st = yaml.safe_load((root / "studies" / "dvc.yaml").read_text())["stages"]["roro_study"]
    assert st["cmd"] == "rubricflow study roro" and st["wdir"] == ".."
    for dep in ("artifacts/roro/models", "data/roro/trajectories.parquet", "data/roro/pairs.parquet",
                "data/roro/step_cache.jsonl", "reports/params/roro.json", "rubricflow/methods/roro",
                "rubricflow/study"):
        # the resolved config sections are params files (DVC names the key that changed), the rest plain deps
        assert dep in st["deps"] + [k for it in st["params"] for k in it], dep
    outs = {k: v for o in st["outs"] for k, v in o.items()}
    assert outs["artifacts/studies/roro"]["persist"] is True
    assert "roro_study" not in yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
