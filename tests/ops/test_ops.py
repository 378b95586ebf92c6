"""Orchestration pieces without a Prefect server: cache keys from declared inputs, the stage registry, the crash
hook, the run report, plots (offline HTML), the MLflow comparison table, the CLI commands and ui.sh's stop."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.ops_helpers import ROOT, make_project


# ----------------------------------------------------------------------------------------------------------------
# cache keys


@pytest.fixture
def proj(tmp_path, monkeypatch):
    p = make_project(tmp_path / "proj")
    monkeypatch.chdir(p)
    return p


def _inputs(stage, cfg, dvc, memo_dir):
    import rubricflow.util.hashing as hashing
    from rubricflow.pipeline.inputs import stage_inputs
    from rubricflow.util.hashing import HashMemo

    hashing._memo = HashMemo(memo_dir / "memo.sqlite")
    return stage_inputs(stage, cfg, dvc_stages=dvc, raw_params={"profiles": {"tiny": {"a": 1}}}, sections=("data",))


def test_cache_key_follows_declared_params_and_dep_contents(proj, tmp_path):
    from rubricflow.config import load_config

    dvc = {"validate": {"deps": ["data/synthetic", "code.py"], "params": ["data.min_split_size", "profiles"],
                        "outs": ["reports/validation/synthetic.json"],
                        "metrics": [{"reports/validate.json": {"cache": False}}]}}
    (proj / "data/synthetic").mkdir(parents=True)
    (proj / "data/synthetic/a.txt").write_text("one")
    (proj / "code.py").write_text("x = 1\n")
    cfg = load_config()
    base = _inputs("validate", cfg, dvc, tmp_path)
    assert base.params["data.min_split_size"] == 4 and base.params["profiles"] == {"tiny": {"a": 1}}
    assert base.deps["data/synthetic"].endswith(".dir") and base.notes == []
    assert base.outs == ["reports/validation/synthetic.json", "reports/validate.json"]
    assert base.missing_outputs(proj) == base.outs

    same = _inputs("validate", cfg, dvc, tmp_path)
    assert same.key() == base.key()
    # a param the stage does not declare and that is outside its sections: same key
    other = load_config(overrides={"sft.steps": 99})
    assert _inputs("validate", other, dvc, tmp_path).key() == base.key()
    # a declared param: new key
    assert _inputs("validate", load_config(overrides={"data.min_split_size": 5}), dvc, tmp_path).key() != base.key()
    # dep content (file inside a dep directory; a code file): new key each
    (proj / "data/synthetic/a.txt").write_text("two")
    k2 = _inputs("validate", cfg, dvc, tmp_path).key()
    assert k2 != base.key()
    (proj / "code.py").write_text("x = 2\n")
    assert _inputs("validate", cfg, dvc, tmp_path).key() not in (base.key(), k2)


def test_stage_outside_dvc_yaml_is_not_trusted_for_caching_and_says_so(proj, tmp_path):
    from rubricflow.config import load_config

    inp = _inputs("mystery", load_config(), {}, tmp_path)
    assert inp.declared is False and inp.deps == {}
    assert "'mystery' is not in dvc.yaml" in inp.notes[0] and "not cached" in inp.notes[0]
    assert _inputs("validate", load_config(), {"validate": {"deps": []}}, tmp_path).declared is True


def test_hash_memo_reuses_hashes_until_the_file_changes(tmp_path):
    from rubricflow.util.hashing import HashMemo

    memo = HashMemo(tmp_path / "m.sqlite")
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    h1 = memo.md5(f)
    assert h1 == "900150983cd24fb0d6963f7d28e17f72"  # md5("abc")
    st = f.stat()
    f.write_bytes(b"xyz")  # same size; restore the mtime: the memo answers without reading
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert memo.md5(f) == h1
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert memo.md5(f) == "d16fb36f0911f878998c136191af705e"  # md5("xyz")


# ----------------------------------------------------------------------------------------------------------------
# manifest, stage framework, crash hook


def test_manifest_pipelines_and_until():
    from rubricflow import registry

    rucl = registry.pipeline("rucl")
    assert rucl.stage_names[:4] == ("data", "validate", "base_model", "sft")
    assert [s.name for s in rucl.until("sft")] == ["data", "validate", "base_model", "sft"]
    with pytest.raises(ValueError, match="`until` stage 'roro_eval' is not one of"):
        rucl.until("roro_eval")
    with pytest.raises(KeyError, match="unknown pipeline 'nope'"):
        registry.pipeline("nope")
    with pytest.raises(KeyError, match="unknown stage 'nope'"):
        registry.stage("nope")
    # every stage once (a stage shared by two pipelines is the same spec); no pipeline lists a stage twice; the
    # compared stage of each pipeline is one of its stages
    by_name = {}
    for p in registry.pipelines().values():
        assert len(set(p.stage_names)) == len(p.stage_names), p.name
        for s in p.stages:
            assert by_name.setdefault(s.name, s) is s, s.name
    assert set(registry.stages()) == set(by_name)
    assert all(p.compare in p.stage_names for p in registry.pipelines().values())


def test_stage_takes_its_sections_by_name_and_a_context(tmp_path):
    from rubricflow.config import load_config
    from rubricflow.pipeline.stage import StageContext, stage
    from rubricflow.sections import DataConfig, SFTConfig

    seen = {}

    @stage("demo", retries=2, judge=True)
    def demo(data: DataConfig, sft: SFTConfig, ctx: StageContext, extra: int = 0) -> dict:
        """Demo stage."""
        seen.update(data=data, sft=sft, ctx=ctx, extra=extra)
        return {"steps": sft.steps}

    assert (demo.sections, demo.retries, demo.judge, demo.cli, demo.help) == (("data", "sft"), 2, True, "demo",
                                                                              "Demo stage.")
    cfg = load_config(overrides={"reports_dir": str(tmp_path), "seed": 7})
    out = demo(cfg, track=False, extra=3, secret_resolver=str.upper)
    assert seen["data"] is cfg.data and seen["sft"] is cfg.sft and seen["extra"] == 3
    assert (seen["ctx"].seed, seen["ctx"].reports_dir, seen["ctx"].secret_resolver("k")) == (7, tmp_path, "K")
    assert json.loads((tmp_path / "demo.json").read_text())["steps"] == cfg.sft.steps == out["steps"]
    with pytest.raises(TypeError, match="must take a `ctx: StageContext` parameter"):
        stage("bad")(lambda data: {})


def test_a_variant_is_data_its_overrides_reach_the_function(tmp_path):
    from rubricflow.config import ConfigError, load_config
    from rubricflow.pipeline.stage import StageContext, stage
    from rubricflow.sections import SFTConfig

    @stage("demo")
    def demo(sft: SFTConfig, ctx: StageContext) -> dict:
        """Demo."""
        return {"steps": sft.steps, "lr": sft.lr}

    short = demo.variant("demo_short", {"sft.steps": 3}, doc="Demo, shorter.")
    assert (short.name, short.cli, short.base, short.fn) == ("demo_short", "demo-short", "demo", demo.fn)
    assert (short.help, demo.help) == ("Demo, shorter.", "Demo.")
    cfg = load_config(overrides={"reports_dir": str(tmp_path)})
    assert short(cfg, track=False)["steps"] == 3 and demo(cfg, track=False)["steps"] == cfg.sft.steps != 3
    assert json.loads((tmp_path / "demo_short.json").read_text())["steps"] == 3
    assert cfg.sft.steps != 3  # the composed config is not modified
    with pytest.raises(ConfigError, match="override `sft.nope`: no such config key"):
        demo.variant("v", {"sft.nope": 1}, doc="v")(cfg, track=False)


def test_rucl_outcome_variant_is_the_outcome_only_baseline():
    from rubricflow.config import load_config
    from rubricflow.registry import stage

    spec = stage("rucl_outcome")
    assert spec.base == "rucl" and spec.fn is stage("rucl").fn and spec.retries == stage("rucl").retries
    cfg = spec.configure(load_config())
    assert (cfg.rucl.reward.mode, cfg.rucl.name, cfg.rucl.out_dir) == ("outcome", "rucl_outcome",
                                                                        "artifacts/models/rucl_outcome")
    assert spec.report_name(cfg) == "rucl_outcome"


def test_crash_hook_fires_once_on_the_first_attempt_only(monkeypatch):
    from tasks.artifacts import CrashHook, InjectedCrash

    monkeypatch.setenv("RUBRICFLOW_INJECT_CRASH", "rucl:3")
    assert CrashHook.from_env("rucl", attempt=2) is None
    assert CrashHook.from_env("sft", attempt=1) is None
    hook = CrashHook.from_env("rucl", attempt=1)
    hook("rucl", 2, 10)  # below k: nothing
    with pytest.raises(InjectedCrash, match="stage rucl at progress 4"):
        hook("rucl", 4, 10)
    hook("rucl", 5, 10)  # fired already (the progress context's final report must not raise again)
    assert hook.fired_at == 4
    monkeypatch.setenv("RUBRICFLOW_INJECT_CRASH", "rucl:soon")
    with pytest.raises(ValueError, match="expected '<stage>:<step>'"):
        CrashHook.from_env("rucl", attempt=1)


def test_retry_condition_skips_errors_a_retry_cannot_fix():
    from prefect.states import Completed, Failed

    from rubricflow.config import ConfigError
    from tasks.stage import _retryable
    from tasks.artifacts import InjectedCrash

    assert _retryable(None, None, Failed(data=InjectedCrash("x"))) is True
    assert _retryable(None, None, Failed(data=ConnectionError("judge down"))) is True
    assert _retryable(None, None, Failed(data=ConfigError("params.yaml: key `x`"))) is False
    assert _retryable(None, None, Failed(data=FileNotFoundError("tiers.json"))) is False
    assert _retryable(None, None, Completed(data=1)) is True


# ----------------------------------------------------------------------------------------------------------------
# report


def test_report_names_stages_status_transition_links_and_skips():
    from tasks.artifacts import report_markdown

    outcomes = [
        {"stage": "data", "status": "cached", "seconds": 0.4, "metrics": {"n_samples": 20, "mlflow_run_id": "aaa111"}},
        {"stage": "rucl", "status": "ran (attempt 2)", "seconds": 61.25,
         "metrics": {"transition_step": 17, "final/reward_total": 0.81234, "accuracy_after": {"overall": 0.75, "x": 1},
                     "mlflow_run_id": "bbb222", "duration_s": 60}},
    ]
    md = report_markdown("rucl", "fr-1", "prefect-fr-1", outcomes, "ppp",
                         {"ppp": "http://m/#/experiments/1/runs/ppp", "bbb222": "http://m/#/experiments/1/runs/bbb222"},
                         params={"profile": "tiny", "rucl.reward.mode": "outcome"})
    assert "- curriculum transition: step **17** (stage rucl)" in md
    assert "[ppp](http://m/#/experiments/1/runs/ppp)" in md
    assert ("| rucl | ran (attempt 2) | 61.2 | transition_step: 17; final/reward_total: 0.8123; accuracy_after: 0.75 "
            "| [run](http://m/#/experiments/1/runs/bbb222) |") in md
    assert "| data | cached | 0.4 | n_samples: 20 | `aaa111` |" in md
    assert "`rucl.reward.mode=outcome`" in md
    no_switch = report_markdown("rucl", "f", "p", [{"stage": "rucl", "status": "ran", "seconds": 1,
                                                   "metrics": {"transition_step": None}}])
    assert "curriculum transition: none" in no_switch


# ----------------------------------------------------------------------------------------------------------------
# plots


def _write_plot_data(root: Path) -> None:
    (root / "reports/plots").mkdir(parents=True, exist_ok=True)
    (root / "reports/plots/sft_loss.json").write_text(json.dumps([{"step": i, "loss": 5 - i * 0.5} for i in range(8)]))
    (root / "reports/rubrics").mkdir(parents=True, exist_ok=True)
    (root / "reports/rubrics/stratification.csv").write_text("id,pass_rate\nr1,0.9\nr2,0.2\n")


def test_plot_specs_from_stage_and_top_level_sections():
    from rubricflow.tracking.plots import plot_specs

    stages = {"sft": {"plots": [{"reports/plots/sft_loss.json": {"x": "step", "y": "loss", "cache": False}}]},
              "stratify": {"plots": [{"r/s.csv": {"template": "bar_horizontal", "x": "pass_rate", "y": "id"}}]},
              "eval": {"plots": ["reports/curve.png"]}}
    top = [{"curriculum": {"x": "step", "y": {"reports/rucl/curriculum.json": ["curriculum/lambda_t", "reward/s_f"]},
                           "title": "Curriculum"}}]
    specs = {s.id: s for s in plot_specs(stages, top)}
    assert (specs["reports/plots/sft_loss.json"].x, specs["reports/plots/sft_loss.json"].y) == ("step", ["loss"])
    assert specs["r/s.csv"].template == "bar_horizontal" and specs["r/s.csv"].stage == "stratify"
    assert specs["reports/curve.png"].is_image
    c = specs["curriculum"]
    assert (c.files, c.y, c.title) == (["reports/rucl/curriculum.json"], ["curriculum/lambda_t", "reward/s_f"],
                                       "Curriculum")


def test_plots_of_the_stages_that_ran_with_unique_artifact_keys(proj):
    from tasks.artifacts import plot_key
    from rubricflow.tracking.plots import specs_for_stages

    doc = {"plots": [{"rucl_curriculum": {"x": "step", "y": {"reports/rucl/curriculum.json": ["reward/s_f"]}}},
                     {"vs": {"x": "step", "y": {"reports/rucl/curriculum.json": "reward/total",
                                                "reports/rucl_outcome/curriculum.json": "reward/total"}}}],
           "stages": {"sft": {"plots": [{"reports/plots/sft_loss.json": {"x": "step", "y": "loss"}}]},
                      "rucl": {"plots": ["reports/rucl/curriculum.json", "reports/rucl/curriculum.png"]}}}
    (proj / "dvc.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    ids = [s.id for s in specs_for_stages(["rucl"])]
    # the bare curriculum.json plot is superseded by the top-level plots that read it; sft did not run
    assert ids == ["reports/rucl/curriculum.png", "rucl_curriculum", "vs"]
    keys = [plot_key("rucl", s) for s in specs_for_stages(["rucl", "sft"])]
    assert keys == ["rucl-sft-loss", "rucl-rucl-curriculum-png", "rucl-rucl-curriculum", "rucl-vs"]


def test_offline_html_inlines_every_plot_and_loads_no_script(proj):
    """The dvc.yaml plots of the repository rendered offline: inline SVG, no <script>, no remote URL."""
    from rubricflow.tracking.plots import PlotSpec, plot_specs, table_rows, write_offline_html

    _write_plot_data(proj)
    specs = plot_specs()
    specs.append(PlotSpec("reports/rubrics/stratification.csv", ["reports/rubrics/stratification.csv"], "pass_rate",
                          ["id"], None, "stratify", "bar_horizontal"))
    out = write_offline_html(proj / "reports/plots/index.html", specs)
    html = out.read_text()
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']https?://""", html)
    assert html.count("<svg") >= 2  # sft loss (lines) and stratification (bars)
    assert "reports/plots/sft_loss.json" in html and "stratification.csv" in html
    rows = table_rows(next(s for s in specs if s.id == "reports/plots/sft_loss.json"), max_rows=4)
    assert [r["step"] for r in rows] == [0, 2, 5, 7] and rows[-1]["loss"] == 1.5


def test_plot_with_unknown_column_names_the_file(tmp_path):
    from rubricflow.tracking.plots import PlotSpec, render

    f = tmp_path / "c.json"
    f.write_text(json.dumps([{"step": 0, "loss": 1.0}]))
    with pytest.raises(ValueError, match=r"columns \['reward'\] not in .*c.json"):
        render(PlotSpec("c", [str(f)], "step", ["reward"]))


def test_rubricflow_plots_command_writes_the_offline_page(proj):
    from typer.testing import CliRunner

    from flows.cli import app

    _write_plot_data(proj)
    res = CliRunner().invoke(app, ["plots", "--out", "out/plots.html"])
    assert res.exit_code == 0, res.output
    assert "no scripts, opens offline" in res.output
    assert "<svg" in (proj / "out/plots.html").read_text()


# ----------------------------------------------------------------------------------------------------------------
# comparison


@pytest.fixture
def mlflow_runs(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("abl")
    for mode, shape, final, trans in [("rucl", "sigmoid", 0.8, 12), ("outcome", "sigmoid", 0.6, None),
                                      ("rucl", "linear", 0.7, 15)]:
        with mlflow.start_run(run_name="rucl"):
            mlflow.set_tags({"rubricflow.stage": "rucl"})
            mlflow.log_params({"rucl.reward.mode": mode, "rucl.curriculum.shape": shape, "seed": 1234})
            mlflow.log_metrics({"train/final/reward_total": final, "train/steps": 20,
                                "train/rollout_time_s_total": 3.0})
            if trans is not None:
                mlflow.set_tag("event.curriculum_transition", json.dumps({"step": trans, "window": [0.9]}))
        time.sleep(0.01)
    with mlflow.start_run(run_name="sft"):
        mlflow.set_tags({"rubricflow.stage": "sft"})
    return uri


def test_compare_table_shows_differing_params_final_metrics_and_transition(mlflow_runs):
    from rubricflow.tracking.compare import compare_runs

    cmp = compare_runs("abl", "rucl")
    assert cmp.differing_params == ["rucl.curriculum.shape", "rucl.reward.mode"]  # sorted; seed is the same
    assert cmp.metrics == ["train/final/reward_total", "train/steps"]  # the default patterns, not the timings
    assert cmp.columns[-1] == "transition_step"
    newest_first = [(r["rucl.reward.mode"], r["rucl.curriculum.shape"], r["train/final/reward_total"],
                     r["transition_step"]) for r in cmp.rows]
    assert newest_first == [("rucl", "linear", 0.7, 15), ("outcome", "sigmoid", 0.6, None),
                            ("rucl", "sigmoid", 0.8, 12)]
    md = cmp.markdown()
    assert ("| run | stage | pipeline | started | rucl.curriculum.shape | rucl.reward.mode | train/final/reward_total "
            "| train/steps | transition_step |") in md
    assert "| sigmoid | outcome | 0.6 | 20 | - |" in md
    with pytest.raises(ValueError,
                       match=r"no runs of stage 'train' in experiment 'abl'; stages with runs: \['rucl', 'sft'\]"):
        compare_runs("abl", "train")
    with pytest.raises(ValueError, match="experiment 'nope' does not exist"):
        compare_runs("nope", "rucl")


def test_compare_puts_the_methods_of_one_pipeline_run_side_by_side(tmp_path, monkeypatch):
    """Right after `make run`, `compare` (stage rucl) shows rucl and its variant rucl_outcome of the newest pipeline
    run first, then the older pipeline run's; `pipeline="latest"` keeps the newest run's two."""
    from rubricflow import tracking
    from rubricflow.tracking.compare import compare_runs

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'ml.db'}")
    for pid, finals in (("pipe-old", (0.5, 0.4)), ("pipe-new", (0.8, 0.6))):
        monkeypatch.setenv("RUBRICFLOW_PIPELINE_ID", pid)
        for stage, mode, final in (("sft", None, None), ("rucl_outcome", "outcome", finals[1]),
                                   ("rucl", "rucl", finals[0])):
            with tracking.stage_run(stage, experiment="side", params={"rucl": {"reward": {"mode": mode}}}) as run:
                if final is not None:
                    run.log_summary({"train/final/reward_total": final, "curriculum/transition_step": 7}
                                    if stage == "rucl" else {"train/final/reward_total": final})
            time.sleep(0.01)
    cmp = compare_runs("side", "rucl", tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    assert [(r["pipeline"], r["stage"], r["rucl.reward.mode"], r["train/final/reward_total"], r["transition_step"])
            for r in cmp.rows] == [("pipe-new", "rucl", "rucl", 0.8, 7),
                                   ("pipe-new", "rucl_outcome", "outcome", 0.6, None),
                                   ("pipe-old", "rucl", "rucl", 0.5, 7),
                                   ("pipe-old", "rucl_outcome", "outcome", 0.4, None)]
    assert cmp.differing_params == ["rucl.reward.mode"]
    latest = compare_runs("side", "rucl", pipeline="latest", tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    assert [(r["pipeline"], r["stage"]) for r in latest.rows] == [("pipe-new", "rucl"), ("pipe-new", "rucl_outcome")]
    one = compare_runs("side", "rucl", pipeline="pipe-old", tracking_uri=os.environ["MLFLOW_TRACKING_URI"])
    assert [r["train/final/reward_total"] for r in one.rows] == [0.5, 0.4]


def test_rubricflow_compare_prints_the_table(mlflow_runs, proj):
    from typer.testing import CliRunner

    from flows.cli import app

    res = CliRunner().invoke(app, ["compare", "--experiment", "abl", "--stage", "rucl"])
    assert res.exit_code == 0, res.output
    assert "rucl runs in MLflow experiment 'abl' (3)" in res.output
    assert "outcome" in res.output and "linear" in res.output and "final/reward_total" in res.output
    bad = CliRunner().invoke(app, ["compare", "--experiment", "abl", "--stage", "nope"])
    assert bad.exit_code == 1 and "no runs of stage 'nope'" in bad.output


# ----------------------------------------------------------------------------------------------------------------
# deployments and local services


def test_local_deployments_come_from_prefect_yaml():
    from flows.serve import local_deployments

    from rubricflow.registry import pipelines

    assert local_deployments() == [f"{p}-local" for p in pipelines()] + ["study-local", "compare-local"]
    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    import importlib

    from prefect import Flow

    for d in doc["deployments"]:
        mod, func = d["entrypoint"].split(":")
        assert (ROOT / mod).exists()
        obj = getattr(importlib.import_module(mod.removesuffix(".py").replace("/", ".")), func)
        assert isinstance(obj, Flow) and obj.name == func


def test_deploy_without_a_server_says_how_to_start_one(monkeypatch):
    from flows.serve import deploy

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with pytest.raises(RuntimeError, match="start a server first \\(make ui\\)"):
        deploy()


def _ui(root: Path, action: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RUBRICFLOW_ROOT": str(root)}
    return subprocess.run(["bash", str(ROOT / "infra/local/ui.sh"), action], env=env, capture_output=True, text=True,
                          timeout=60)


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_ui_stop_kills_only_the_recorded_process_group(tmp_path):
    run = tmp_path / ".rubricflow/run"
    run.mkdir(parents=True)
    ours = subprocess.Popen(["setsid", "sleep", "300"])
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        time.sleep(0.3)
        (run / "mlflow.pid").write_text(f"{ours.pid} {_start_time(ours.pid)}\n")
        # a pid file whose start time does not match: the pid was reused by a process we did not start
        (run / "prefect-worker.pid").write_text(f"{stranger.pid} 1\n")
        assert "mlflow: running" in _ui(tmp_path, "status").stdout
        res = _ui(tmp_path, "stop")
        assert res.returncode == 0, res.stderr
        assert f"mlflow stopped (pid {ours.pid})" in res.stdout
        assert "prefect-worker: not running (stale pid file removed)" in res.stdout
        assert ours.wait(timeout=10) is not None
        assert stranger.poll() is None  # untouched
        assert list(run.glob("*.pid")) == []
    finally:
        for p in (ours, stranger):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_ui_script_rejects_unknown_actions(tmp_path):
    res = _ui(tmp_path, "restart")
    assert res.returncode == 2 and "usage:" in res.stderr
