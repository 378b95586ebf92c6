"""Prefect flows and tasks against a temporary Prefect server (prefect_test_harness, one per module).

Each test works in its own throw-away project (tests/ops_helpers.make_project): stage outputs, reports, MLflow
and Prefect results never touch the checkout. Stages are the real ones (data, validate) with tiny sizes, plus
a toy GRPO stage built from the real trainer for the retry-resume check.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.ops_helpers import make_project, share_placeholder_rucl_start

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path, monkeypatch):
    proj = make_project(tmp_path / "proj")
    monkeypatch.chdir(proj)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RUBRICFLOW_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    monkeypatch.setenv("RUBRICFLOW_RETRY_DELAY_S", "0")
    monkeypatch.delenv("RUBRICFLOW_PIPELINE_ID", raising=False)
    return proj


def _artifacts(flow_run_id: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as c:
        return c.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))


def _mlflow_runs(experiment: str = "rubricflow"):
    import mlflow

    client = mlflow.tracking.MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], max_results=100) if exp else []


# ----------------------------------------------------------------------------------------------------------------


def test_rucl_flow_runs_stages_once_then_reuses_them(prefect_api, project):
    from flows.pipelines import OVERRIDES, rucl

    RuCLOverrides = OVERRIDES["rucl"]

    first = rucl(until="validate")
    assert first["stages"] == {"data": "ran", "validate": "ran"}
    assert first["metrics"]["data"]["n_samples"] == 20  # 8 + 4 + 4 + 4 samples of one task
    assert first["metrics"]["validate"]["n_rows"] == 20
    assert (project / "data/synthetic/samples.parquet").exists()
    assert json.loads((project / "reports/data.json").read_text())["n_samples"] == 20

    # one MLflow parent per flow run, tagged with the flow run id; the stage runs are its children
    runs = _mlflow_runs()
    parent = next(r for r in runs if r.data.tags.get("rubricflow.stage") == "pipeline")
    assert parent.info.run_id == first["mlflow_parent_run_id"]
    assert parent.data.tags["prefect_flow_run_id"] == first["flow_run_id"]
    assert parent.data.tags["rubricflow.pipeline_id"] == f"prefect-{first['flow_run_id']}"
    children = {r.data.tags["rubricflow.stage"]: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(children) == {"data", "validate"}
    assert all(c.data.tags["prefect_flow_run_id"] == first["flow_run_id"] for c in children.values())

    # the report artifact names both stages, their MLflow runs and the skipped (unregistered) stages
    arts = _artifacts(first["flow_run_id"])
    report = next(a for a in arts if a.key == "rucl-report")
    assert "| data | ran |" in report.data and "| validate | ran |" in report.data
    assert children["data"].info.run_id in report.data
    assert os.environ.get("RUBRICFLOW_PIPELINE_ID") is None  # restored after the flow

    # same inputs: both stages come from the cache, no new MLflow runs
    second = rucl(until="validate")
    assert second["stages"] == {"data": "cached", "validate": "cached"}
    assert second["metrics"]["data"]["n_samples"] == 20
    assert len(_mlflow_runs()) == len(runs)
    assert "Cached (inputs unchanged" in next(
        a for a in _artifacts(second["flow_run_id"]) if a.key == "rucl-report").data

    # a declared param of data changes (data.seed): data reruns, and so does validate (its dep changed content)
    third = rucl(until="validate", overrides=RuCLOverrides(extra={"data.seed": 99}))
    assert third["stages"] == {"data": "ran", "validate": "ran"}

    # an output deleted behind Prefect's back is not trusted: the stage reruns although its key matches
    (project / "reports/validation/data/synthetic.json").unlink()
    fourth = rucl(until="validate", overrides=RuCLOverrides(extra={"data.seed": 99}))
    assert fourth["stages"] == {"data": "cached", "validate": "ran"}
    assert (project / "reports/validation/data/synthetic.json").exists()


def test_bad_parameter_fails_the_flow_naming_the_key(prefect_api, project):
    from flows.pipelines import OVERRIDES, rucl

    RuCLOverrides = OVERRIDES["rucl"]
    from rubricflow.config import ConfigError

    with pytest.raises(ConfigError, match="data.nope"):
        rucl(until="data", overrides=RuCLOverrides(extra={"data.nope": 1}))
    assert not (project / "data/synthetic").exists()


def test_flow_parameters_are_a_typed_form_with_params_yaml_defaults(project):
    import importlib

    from prefect.utilities.callables import parameter_schema

    import flows.pipelines
    from rubricflow.config import load_config

    # the form's defaults are read from the working directory's params.yaml when the module is imported; another
    # test may have imported it from the repository root first
    mod = importlib.reload(flows.pipelines)
    rucl, RuCLOverrides = mod.rucl, mod.OVERRIDES["rucl"]

    schema = parameter_schema(rucl).model_dump()
    defs = schema["definitions"]
    assert schema["properties"]["profile"]["enum"] == ["tiny", "gpu", "smol"]  # the profiles of params.yaml
    assert schema["properties"]["profile"]["default"] == "tiny"
    assert parameter_schema(mod.smol).model_dump()["properties"]["profile"]["default"] == "smol"  # its own
    knobs = defs["RuclOverrides"]["properties"]
    assert knobs["reward_mode"]["enum"] == ["rucl", "uniform", "outcome"]
    assert knobs["curriculum_shape"]["enum"] == ["sigmoid", "linear"]
    assert "rucl.reward.mode" in knobs["reward_mode"]["description"]
    cfg = load_config()
    assert knobs["sft_steps"]["default"] == cfg.sft.steps == 4  # the project's params.yaml (tiny sizes)
    assert schema["properties"]["until"]["anyOf"][0]["enum"][:2] == ["data", "validate"]
    assert schema["required"] == []  # a deployment that passes only `profile` is valid

    assert RuCLOverrides().changed() == {}
    assert RuCLOverrides(reward_mode="outcome", extra={"sft.lr": 0.01}).changed() == {
        "rucl.reward.mode": "outcome",
        "sft.lr": 0.01,
    }
    with pytest.raises(ValueError, match="reward_mode"):
        RuCLOverrides(reward_mode="bogus")


# ----------------------------------------------------------------------------------------------------------------
# retry + resume: the real GRPO trainer (toy task) as a stage, crashed mid-training on the first attempt

TOY_STEPS = 12


def _toy_grpo_stage(ctx) -> dict:
    """A resumable training stage: GRPOTrainer on the toy task, checkpoint every 2 steps, progress per step."""
    from models.generation import GenRequest, TransformersGenerator
    from rubricflow.grpo.causal_lm import CausalLMAdapter
    from rubricflow.grpo.config import EngineConfig, GRPOConfig
    from rubricflow.grpo.engine import make_engine
    from rubricflow.testing.toy_task import build_toy_policy, chat_prompt, target_token_id, toy_prompts, toy_reward
    from rubricflow.grpo.trainer import GRPOTrainer
    from rubricflow.grpo.types import Episode
    from rubricflow.grpo.updater import GRPOUpdater
    from rubricflow.pipeline.progress import progress

    g = GRPOConfig(group_size=4, prompts_per_step=2, steps=TOY_STEPS, lr=2e-2, max_new_tokens=4,
                   checkpoint_every=2, seed=0, engine=EngineConfig(kind="torch"))
    model, tok = build_toy_policy("text", seed=0)
    engine = make_engine(model, g)
    gen = TransformersGenerator(engine.module, tok)
    tid, eos = target_token_id(tok), tok.convert_tokens_to_ids("<|im_end|>")

    def rollout(step, prompts):
        reqs = [GenRequest(chat_prompt(tok, p["question"])) for p in prompts]
        outs = gen.generate(reqs, n=g.group_size, max_new_tokens=g.max_new_tokens, temperature=1.0)
        eps = [Episode(r.prompt, c.token_ids + ([eos] if c.finished else []), toy_reward(c.token_ids, tid), p["id"])
               for p, r, cs in zip(prompts, reqs, outs) for c in cs]
        time.sleep(0.3)  # a step long enough that progress reports (every ~2 s) land mid-training
        return eps, {"reward_mean": sum(e.reward for e in eps) / len(eps)}

    steps_seen = []
    with progress("toy_grpo", total=TOY_STEPS) as bar:
        trainer = GRPOTrainer(GRPOUpdater(CausalLMAdapter(engine.module, tok), engine, g), toy_prompts(8), rollout,
                              g, Path("artifacts/toy_grpo/checkpoints"),
                              log_fn=lambda s, m: (steps_seen.append(s), bar.advance(1)))
        if trainer.ckpt.latest() is not None:
            bar.advance(trainer.ckpt.latest()[0])  # progress continues where the checkpoint is
        summary = trainer.run()
    return {"steps": summary["steps"], "resumed_from": summary["resumed_from"], "steps_run": len(steps_seen),
            "first_step_run": steps_seen[0] if steps_seen else None}


def test_retry_resumes_training_from_its_checkpoint(prefect_api, project, monkeypatch, register_method):
    from prefect import flow

    from rubricflow import registry
    from rubricflow.pipeline.stage import stage
    from tasks.concurrency import JUDGE_LIMIT

    spec = stage("toy_grpo", retries=2, judge=True, resumable=True)(_toy_grpo_stage)
    register_method(registry.Method("toy", "toy", stages=(spec,),
                                    pipelines=(registry.Pipeline("toy", "toy", ("toy_grpo",), compare="toy_grpo"),)))
    monkeypatch.setenv("RUBRICFLOW_INJECT_CRASH", "toy_grpo:2")

    from tasks.pipeline import run_pipeline

    @flow(name="toy")
    def toy() -> dict:
        return run_pipeline("toy", "tiny")

    out = toy()
    m = out["metrics"]["toy_grpo"]
    assert out["stages"] == {"toy_grpo": "ran (attempt 2)"}
    # the first attempt crashed mid-training after at least one checkpoint; the retry resumed there
    assert 0 < m["resumed_from"] < TOY_STEPS, m
    assert m["resumed_from"] % 2 == 0  # checkpoints every 2 steps
    assert m["first_step_run"] == m["resumed_from"]
    assert m["steps_run"] == TOY_STEPS - m["resumed_from"]
    assert m["steps"] == TOY_STEPS
    print(f"\ninjected crash on attempt 1; attempt 2 resumed from checkpoint step {m['resumed_from']} "
          f"and ran steps {m['first_step_run']}..{TOY_STEPS - 1}")

    # the task logged the resume, and mirrored the training progress into a progress artifact
    arts = _artifacts(out["flow_run_id"])
    prog = [a for a in arts if a.type == "progress"]
    assert prog and max(float(a.data) for a in prog) == 100.0
    # a judge stage ran under the global concurrency limit, created on demand
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as c:
        lim = c.read_global_concurrency_limit_by_name(JUDGE_LIMIT)
    assert lim.limit >= 1 and lim.active_slots == 0  # released after the task


# The real DeltaRubric training stage (GRPO trainer, checkpoints, progress) crashed on its first attempt.
DR_TINY = {
    "deltarubric": {
        "pairs": {"tasks": ["counting"], "train": 12, "val": 4, "test": 6, "balance_tol": 0.2},
        "sft": {"steps": 6, "batch_size": 8, "warmup_steps": 1, "hidden_size": None},
        "train": {"n_checklists": 2, "m_verdicts": 2, "k_no_rubric": 2, "planner_max_tokens": 12,
                  "verifier_max_tokens": 12, "probe_every": 0, "probe_pairs": 2,
                  "grpo": {"steps": 5, "prompts_per_step": 1, "lr": 1e-3, "scale_rewards": "batch",
                           "checkpoint_every": 1}},
    },
    "models": {"policy": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "vision_hidden_size": 32,
                          "vision_depth": 1, "vocab_size": 400}},
}


def test_deltarubric_training_retry_resumes_from_checkpoint(prefect_api, tmp_path, monkeypatch):
    import yaml

    from tests.ops_helpers import deep_merge

    proj = make_project(tmp_path / "dr")
    raw = yaml.safe_load((proj / "params.yaml").read_text())
    # the tiny model dims live in the profile overlay (top-level keys win over it)
    (proj / "params.yaml").write_text(yaml.safe_dump(deep_merge(raw, DR_TINY), sort_keys=False))
    monkeypatch.chdir(proj)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RUBRICFLOW_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    monkeypatch.setenv("RUBRICFLOW_RETRY_DELAY_S", "0")
    monkeypatch.setenv("RUBRICFLOW_INJECT_CRASH", "deltarubric_train:2")

    from flows.pipelines import deltarubric

    out = deltarubric(until="deltarubric_train")
    m = out["metrics"]["deltarubric_train"]
    assert out["stages"]["deltarubric_train"] == "ran (attempt 2)", out["stages"]
    assert m["steps"] == 5 and 1 <= m["resumed_from"] < 5, m
    print(f"\ndeltarubric_train: injected crash on attempt 1, attempt 2 resumed from checkpoint step "
          f"{m['resumed_from']}")


def test_fanned_out_units_run_after_the_unit_they_wait_for(prefect_api, project, monkeypatch):
    """Submitted together (fan_out), a unit that waits for another (a seed's start being built: start_order) runs
    only once that one has finished, while the others run in between."""
    import functools
    import time

    import flows.study as study_flow
    from rubricflow.study.adapter import Unit
    from rubricflow.study.harness import run_unit
    from tests.study.helpers import FakeUnit

    share_placeholder_rucl_start(project)
    spans: dict[str, tuple[float, float]] = {}

    class Slow(FakeUnit):  # the builder takes a while, so a unit that ignored the wait would start inside it
        def __call__(self, ucfg, unit, udir, run, secret_resolver):
            t0 = time.monotonic()
            time.sleep(1.5 if unit.key == "sft/seed11" else 0.0)
            out = super().__call__(ucfg, unit, udir, run, secret_resolver)
            spans[unit.key] = (t0, time.monotonic())
            return out

    monkeypatch.setattr(study_flow, "run_unit", functools.partial(run_unit, unit_fn=Slow()))
    builder = Unit("sft", 11)
    monkeypatch.setattr(study_flow, "start_order", lambda spec, units: [(builder, None)] + [
        (u, builder if u.seed == 11 else None) for u in units if u != builder])
    out = study_flow.study(name="rucl", seeds=[11, 22], variants=["sft", "outcome"], fan_out=True, track=False)
    assert out["ran"] == 4
    assert spans["outcome/seed11"][0] >= spans["sft/seed11"][1]  # waited for its builder


def test_study_flow_runs_one_task_per_unit_then_skips_them(prefect_api, project, monkeypatch):
    """The Prefect `study` flow: one `study-unit` task run per (variant, seed), an MLflow child run per unit under
    one parent, the report written; a second flow run finds every unit finished and trains nothing."""
    import functools

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    import flows.study as study_flow
    from rubricflow.study.harness import run_unit
    from tests.study.helpers import FakeUnit

    # the shared start (the SFT model and tiers of the main pipeline): this test is about the flow, not the start
    share_placeholder_rucl_start(project)
    unit = FakeUnit()
    monkeypatch.setattr(study_flow, "run_unit", functools.partial(run_unit, unit_fn=unit))

    state = study_flow.study(name="rucl", seeds=[11, 22], variants=["sft", "outcome"], return_state=True)
    out = state.result()
    assert out["ran"] == 4 and sorted(unit.calls) == ["outcome/seed11", "outcome/seed22", "sft/seed11", "sft/seed22"]
    assert out["claims"]["rucl-sigmoid vs outcome (accuracy)"] == "not shown"  # rucl-sigmoid not in this run
    assert (project / "reports/studies/rucl.md").exists()
    flow_run_id = str(state.state_details.flow_run_id)
    with get_client(sync_client=True) as c:
        tasks = c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    units = [t for t in tasks if t.name.startswith("study-unit")]
    assert len(units) == 4 and all(t.state.is_completed() for t in units)

    runs = _mlflow_runs()
    children = [r for r in runs if r.data.tags.get("study") == "rucl"]
    assert len(children) == 4
    assert {c.data.tags["prefect_flow_run_id"] for c in children} == {flow_run_id}
    parents = {c.data.tags["mlflow.parentRunId"] for c in children}
    assert len(parents) == 1

    unit.calls.clear()
    again = study_flow.study(name="rucl", seeds=[11, 22], variants=["sft", "outcome"])
    assert again["ran"] == 0 and again["skipped"] == 4 and unit.calls == []
    assert len([r for r in _mlflow_runs() if r.data.tags.get("study") == "rucl"]) == 4  # no new unit runs
