"""End-to-end RoRo on tiny sizes: models -> trajectories -> pairs -> Rubricor/Judge -> router GRPO -> eval,
through the real stage functions and the CLI. Asserts the outputs, not that it runs."""

import json
import re

import pyarrow.parquet as pq
import pytest

from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.router.evaluate import run_eval
from rubricflow.methods.roro.judge.pairs import run_pairs
from rubricflow.methods.roro.paths import cache_path, eval_dir, pairs_path, router_dir, rubrics_path, trajectories_path
from rubricflow.methods.roro.router.train import run_router
from rubricflow.methods.roro.judge.alternation import run_rubricor_judge
from rubricflow.methods.roro.env.step_models import run_models
from rubricflow.methods.roro.env.trajectories import read_trajectories, run_trajectories


def tiny_roro_dict(tmp_path) -> dict:
    a, d = tmp_path / "artifacts" / "roro", tmp_path / "data" / "roro"
    return {
        "data_dir": str(d), "out_dir": str(a),
        "task": {"n_sft": 300, "n_train": 10, "n_val": 6, "n_test": 12, "min_ops": 2, "max_ops": 3},
        "slm": {"path": str(a / "models" / "slm"), "hidden_size": 32, "num_layers": 1, "sft_steps": 30,
                "sft_decay_steps": 0, "target_step_acc": 0.0},
        "lrm": {"path": str(a / "models" / "lrm"), "hidden_size": 64, "num_layers": 2, "sft_steps": 60,
                "sft_decay_steps": 10, "target_step_acc": 0.99, "extra_block": 10, "max_extra_steps": 10},
        "trajectories": {"random_rates": [0.5], "random_repeats": 1, "thresholds": [0.3]},
        "pairs": {"max_pairs_per_problem": 3},
        "rubricor_judge": {"rounds": 1,
                           "judge": {"path": str(a / "judge"), "warm_steps": 15, "rft_steps": 5, "samples": 2},
                           "rubricor": {"path": str(a / "rubricor"), "warm_steps": 15, "rft_steps": 5, "samples": 2}},
        "router": {"grpo": {"steps": 3, "group_size": 4, "prompts_per_step": 4, "checkpoint_every": 2},
                   "sweep_cost_weights": [0.5], "cost_weight": 0.5,
                   "methods": ["roro", "oracle-process", "outcome-only"],
                   "checkpoint_dir": str(a / "router" / "checkpoints")},
        "eval": {"thresholds": [0.1, 0.5], "random_rates": [0.5], "random_repeats": 1, "judge_problems": 4},
    }


def tiny_roro(tmp_path) -> RoRoConfig:
    return RoRoConfig.model_validate(tiny_roro_dict(tmp_path))


@pytest.mark.slow
def test_roro_pipeline_end_to_end(tmp_path, capsys):
    rc = tiny_roro(tmp_path)
    m = run_models(rc)
    assert m["slm_params"] < m["lrm_params"]
    assert m["lrm_extra_steps"] in (0, 10) and len(m["lrm_acc_trace"]) >= 1
    assert 0.0 <= m["slm_val_step_acc"] <= 1.0 and 0.0 <= m["lrm_val_step_acc"] <= 1.0

    t = run_trajectories(rc)
    assert t["n_problems"] == 16 and t["collection"] == "every route"
    assert set(t["policies"]) == {"all-slm", "all-lrm", "random-0.5", "threshold-0.3"}
    assert t["policies"]["all-slm"]["lrm_tokens"] == 0 and t["policies"]["all-lrm"]["lrm_call_rate"] == 1.0
    rows = pq.read_table(trajectories_path(rc)).to_pylist()
    assert len(rows) == t["n_unique"] and {r["split"] for r in rows} == {"train", "val"}
    # every route: each problem's decision tree is complete (the other choice at any route's last decision is a
    # route too), with the all-SLM and all-LRM routes in it
    per_problem = {}
    for r in rows:
        per_problem.setdefault(r["problem_id"], set()).add(r["writers"])
    flip = {"S": "L", "L": "S"}
    for ws in per_problem.values():
        assert any(set(w) == {"S"} for w in ws) and any(set(w) == {"L"} for w in ws)
        assert all(any(o.startswith(w[:-1] + flip[w[-1]]) for o in ws) for w in ws)
    steps = json.loads(rows[0]["steps"])
    assert {"writer", "slm_uncertainty", "slm_correct", "correct", "state", "action"} <= set(steps[0])
    assert all(len(s["state"]) == 5 for s in steps)
    assert cache_path(rc).exists()

    p = run_pairs(rc)
    assert p["n_pairs"] > 0 and p["train_pairs"] > 0 and p["val_pairs"] > 0
    for split in ("train", "val"):  # categories are counted, kept <= decided
        cats = ("outcome", "cost", "process-right", "process-wrong")
        assert sum(p[f"{split}_{c}"] for c in cats) == p[f"{split}_pairs"]
        assert all(p[f"{split}_{c}"] <= p[f"{split}_available_{c}"] for c in cats)
    pairs = pq.read_table(pairs_path(rc)).to_pylist()
    trajs = read_trajectories(trajectories_path(rc))
    for pr in pairs:  # the ordering rules hold on the stored pairs
        c, r = trajs[pr["chosen"]], trajs[pr["rejected"]]
        assert c.problem_id == r.problem_id == pr["problem_id"] and c.split == pr["split"]
        if pr["reason"] == "outcome":
            assert c.outcome and not r.outcome
        elif pr["reason"] == "cost":
            assert c.outcome == r.outcome and c.lrm_calls < r.lrm_calls
        else:  # process: same outcome, same number of LRM calls
            assert c.outcome == r.outcome and c.lrm_calls == r.lrm_calls

    capsys.readouterr()
    rj = run_rubricor_judge(rc)
    assert [(r["round"], r["phase"]) for r in rj["rounds"]] == [(0, "warm"), (1, "judge"), (1, "rubricor")]
    # one progress line per phase, with what the phase measured
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("roro rubricor-judge: ")]
    assert [ln.split(":")[1].strip().split(" (")[0] for ln in lines] == ["phase 1/3", "phase 2/3", "phase 3/3"]
    assert all(f"accuracy {r['val_pairwise_acc']:.3f} over" in ln for r, ln in zip(rj["rounds"], lines))
    assert all(0.0 <= r["val_pairwise_acc"] <= 1.0 for r in rj["rounds"])
    assert all(r["val_n_pairs"] == p["val_pairs"] for r in rj["rounds"])  # measured on the val pairs
    kept = [r for r in rj["rounds"] if r["selected"]]  # the best val accuracy (ties: the earliest) is kept
    assert len(kept) == 1 and kept[0]["val_pairwise_acc"] == max(r["val_pairwise_acc"] for r in rj["rounds"])
    assert rj["score_mode"] == "sampled" and rj["optimizer"] == "rft"
    assert (tmp_path / "artifacts" / "roro" / "judge" / "config.json").exists()
    rub_rows = [json.loads(x) for x in rubrics_path(rc).read_text().splitlines()]
    assert len(rub_rows) == 16 and all(r["status"] in ("ok", "repaired", "failed") for r in rub_rows)

    rt = run_router(rc)
    tags = [r["tag"] for r in rt["runs"]]
    assert tags == ["roro-cw0.5", "oracle-cw0.5", "outcome-cw0.5"]
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("roro router: ")]
    assert [ln.split(":")[1].strip() for ln in lines] == [f"{i}/3 {t}" for i, t in enumerate(tags, 1)]
    assert all(ln.split(": ")[2].startswith("3 steps in ") for ln in lines)
    assert all(r["steps"] == 3 for r in rt["runs"])
    assert rt["judge_calls"] > 0  # the RoRo router's reward asked the Judge
    assert sorted(x.name for x in router_dir(rc).glob("*.pt")) == ["oracle-cw0.5.pt", "outcome-cw0.5.pt",
                                                                  "roro-cw0.5.pt"]

    ev = run_eval(rc)
    methods = {r["method"] for r in ev["rows"]}
    assert methods == {"all-slm", "all-lrm", "threshold", "random", "roro", "oracle-process", "outcome-only",
                       "random-matched"}
    assert all(0.0 <= r["chain_exact"] <= r["accuracy"] + 1e-9 for r in ev["rows"])  # value: every step right -> right
    # one swept weight per method: the val_span rule keeps it (nothing else to choose), its val cost recorded
    assert {m: c["kept"] for m, c in ev["cost_weights"].items()} == {m: [0.5] for m in ("roro", "oracle-process",
                                                                                           "outcome-only")}
    # a single point per method brackets no range: the common-range comparisons are n/a, never a chord
    assert set(ev["range_auc"]) == set(ev["auc"]) and ev["range_auc"]["roro"] is None
    by = {r["method"]: r for r in ev["rows"]}
    assert by["all-slm"]["lrm_tokens"] == 0 and by["all-lrm"]["lrm_cost_frac"] == pytest.approx(1.0)
    assert by["all-lrm"]["lrm_flops"] > 0 and by["all-lrm"]["total_flops"] > by["all-lrm"]["lrm_flops"]
    assert ev["matched"] and "outcome-only_accuracy_at_cost" in ev["matched"][0]
    chord = (by["all-slm"]["accuracy"] + by["all-lrm"]["accuracy"]) / 2  # the AUC floor: mixing the two ends
    assert set(ev["auc"]) == {"roro", "oracle-process", "outcome-only", "threshold", "random"}
    assert all(chord - 1e-9 <= a <= 1.0 for a in ev["auc"].values())
    jt = ev["judge_test"]  # the kept Judge on pairs of 4 test problems, by category
    assert jt["n_problems"] == 4 and jt["n_pairs"] > 0 and 0.0 <= jt["pairwise_acc"] <= 1.0
    assert jt["pair_counts"]["n_pairs"] == jt["n_pairs"]
    out = eval_dir(rc)
    assert (out / "curve.png").stat().st_size > 5000
    curve = json.loads((out / "curve.json").read_text())
    assert {c["method"] for c in curve} >= {"roro", "outcome-only", "threshold", "random"}
    assert (out / "curve.csv").read_text().startswith("method,param,lrm_tokens,lrm_cost_frac,accuracy")
    assert "roro" in (out / "table.txt").read_text()

    # the CLI: `rubricflow route-eval` (through the stage wrapper) prints the table and writes the stage report
    import yaml
    from typer.testing import CliRunner

    from flows.cli import app

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"reports_dir": str(tmp_path / "reports"), "roro": tiny_roro_dict(tmp_path)}))
    res = CliRunner().invoke(app, ["--params", str(params), "--no-track", "route-eval"])
    assert res.exit_code == 0, res.output
    assert "method" in res.output and "LRM tok/problem" in res.output and "outcome-only" in res.output
    assert re.search(r"at that cost oracle-process (n/a|[\d.]+), outcome-only (n/a|[\d.]+)", res.output)
    assert "mean outcome accuracy of the hull over cost [0.2, 0.8]" in res.output
    report = json.loads((tmp_path / "reports" / "roro_eval.json").read_text())
    assert report["n_test"] == 12 and report["roro_accuracy"] is not None
    res = CliRunner().invoke(app, ["--params", str(params), "--no-track", "route-eval", "--from-file"])
    assert res.exit_code == 0 and "random-matched" in res.output

    # one real unit per trained kind of the RoRo study on the same shared outputs (the alternation with the unit's
    # seed, its routers, the evaluation); the report has the per-phase Judge table and the curve plot
    from rubricflow.config import config_from_dict
    from rubricflow.study.harness import run_study

    study = {"seeds": [5], "out_dir": str(tmp_path / "studies" / "roro"),
             "report_dir": str(tmp_path / "reports" / "studies")}
    cfg = config_from_dict({"reports_dir": str(tmp_path / "reports"), "roro": tiny_roro_dict(tmp_path),
                            "study": {"roro": study}})
    out = run_study(cfg, "roro", variants=["roro", "threshold"])
    assert (out["units"], out["ran"]) == (2, 2)
    unit = json.loads((tmp_path / "studies" / "roro" / "roro" / "seed5" / "result.json").read_text())
    assert unit["kind"] == "roro" and [r["phase"] for r in unit["judge_rounds"]] == ["warm", "judge", "rubricor"]
    from rubricflow.methods.roro.study.specs import STUDY_COST_WEIGHTS

    swept = sorted(set(STUDY_COST_WEIGHTS) | {0.5})
    assert [r["tag"] for r in unit["routers"]] == [f"roro-cw{w:g}" for w in swept]  # its own method's, the study grid
    assert set(unit["cost_weights"]) == {"roro"} and set(unit["cost_weights"]["roro"]["kept"]) <= set(swept)
    assert "chain_range_auc" in unit["metrics"] and "chain_acc_at_cost_50" in unit["metrics"]
    assert 0.0 <= unit["metrics"]["judge_test_acc"] <= 1.0 and unit["metrics"]["auc"] >= 0.0
    assert (tmp_path / "studies" / "roro" / "roro" / "seed5" / "out" / "judge" / "config.json").exists()
    md = (tmp_path / "reports" / "studies" / "roro.md").read_text()
    assert "## Judge: val pairwise accuracy per alternation phase" in md and "| 0/warm | " in md
    assert (tmp_path / "reports" / "studies" / "roro-curves.png").read_bytes()[:4] == b"\x89PNG"

    # the Judge warm-start selection study on the same trajectories and pairs: two settings, one seed, val only
    tune = {"seeds": [7], "out_dir": str(tmp_path / "studies" / "tune"),
            "report_dir": str(tmp_path / "reports" / "studies"),
            "variants": {"small": {"roro.rubricor_judge.judge.hidden_size": 32,
                                   "roro.rubricor_judge.judge.warm_steps": 10},
                         "big": {"roro.rubricor_judge.judge.hidden_size": 64,
                                 "roro.rubricor_judge.judge.warm_steps": 10}}}
    cfg = config_from_dict({"reports_dir": str(tmp_path / "reports"), "roro": tiny_roro_dict(tmp_path),
                            "study": {"roro_judge_tune": tune}})
    out = run_study(cfg, "roro_judge_tune")
    assert (out["units"], out["ran"], out["eval_split"]) == (2, 2, "val") and out["selected"] in ("small", "big")
    small = json.loads((tmp_path / "studies" / "tune" / "small" / "seed7" / "result.json").read_text())
    big = json.loads((tmp_path / "studies" / "tune" / "big" / "seed7" / "result.json").read_text())
    assert small["metrics"]["judge_params"] < big["metrics"]["judge_params"]
    assert [p["phase"] for p in small["phases"]] == ["0/warm", "1/judge", "1/rubricor"]
    assert small["kept_phase"] in ("0/warm", "1/judge", "1/rubricor")
    assert 0.0 <= small["metrics"]["kept_process"] <= 1.0 or small["metrics"]["kept_process"] is None
    md = (tmp_path / "reports" / "studies" / "roro_judge_tune.md").read_text()
    assert "competes on cost (judge_params, warm_steps" in md and "| small | 7 |" in md
