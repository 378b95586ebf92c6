"""ZeRO-3 across two CPU ranks (torchrun, gloo): RuCL, DeltaRubric and RoRo through their real training functions.

Two launches of ``tests.grpo.zero3_train`` (see its docstring): the first runs an uninterrupted 4-step RuCL
run, the first 2 steps of a second one, a RuCL run whose second rank has a judge that fails everything, DeltaRubric
and RoRo; the second launch (fresh processes) resumes the interrupted RuCL run to step 4. With the parameters
partitioned, any rank that skips a forward, a generation step or an update of the others hangs the run (the
launches have a timeout), and any rank that saves its partition writes empty tensors.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_TIMEOUT_S = 400


def launch(work: Path, *jobs: str) -> None:
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "tests.grpo.zero3_train", "run",
           "--work", str(work)]
    for j in jobs:
        cmd += ["--job", j]
    env = {**os.environ, "RUBRICFLOW_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-6000:]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    from tests.grpo.zero3_train import prepare

    w = tmp_path_factory.mktemp("zero3")
    prepare(w)
    launch(w, "rucl:full:4", "rucl:resumed:2", "rucl-missing:missing:2", "deltarubric:dr:2", "roro:roro:3")
    launch(w, "rucl:resumed:4")
    return w


def ranks(work: Path, name: str) -> list[dict]:
    return [json.loads((work / name / f"rank{r}.json").read_text()) for r in (0, 1)]


def tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_zero3_rucl_resume_continues_bit_for_bit_against_an_uninterrupted_run(work):
    full, resumed = ranks(work, "full"), ranks(work, "resumed")
    for r in (0, 1):
        assert full[r]["world_size"] == 2 and resumed[r]["world_size"] == 2
        assert resumed[r]["result"]["steps"] == 4
    assert resumed[0]["result"]["resumed_from"] == 2
    assert sorted(resumed[0]["steps"]) == ["2", "3"]  # the second launch ran only the remaining steps
    for r in (0, 1):
        for step in ("2", "3"):
            a, b = full[r]["steps"][step], resumed[r]["steps"][step]
            for key in ("loss", "grad_norm", "reward/total", "outcome_accuracy", "curriculum/lambda_t"):
                assert a[key] == b[key], (r, step, key)  # exact: same batches, same parameters, same samples
    assert full[0]["steps"]["3"]["loss"] != 0.0  # something was learned, so equality is not trivial
    assert same_tensors(tensors(work / "full" / "model" / "model.safetensors"),
                        tensors(work / "resumed" / "model" / "model.safetensors"))


@pytest.mark.slow
def test_zero3_rucl_saves_full_weights_and_every_rank_evaluates(work):
    from models.loader import load_policy
    from rubricflow.data.schema import read_dataset
    from rubricflow.evaluation.heldout import evaluate_policy
    from rubricflow.sections import GenerationConfig

    full = ranks(work, "full")
    saved = tensors(work / "full" / "model" / "model.safetensors")
    sft = tensors(work / "rucl-sft" / "model.safetensors")
    assert saved.keys() == sft.keys()
    assert all(saved[k].shape == sft[k].shape and saved[k].numel() > 0 for k in saved)  # not ZeRO-3 placeholders
    assert not same_tensors(saved, sft)  # the trained weights
    # the averaged metrics and the evaluation are the same on both ranks, at every evaluation step
    for step in ("1", "3"):
        assert full[0]["steps"][step]["eval/overall"] == full[1]["steps"][step]["eval/overall"]
    for step in ("0", "1", "2", "3"):
        assert full[0]["steps"][step]["loss"] == full[1]["steps"][step]["loss"]
    # 5 val samples, answered 3 + 2 by the two ranks and gathered: the same accuracy as one process on the saved model
    model, proc = load_policy(work / "full" / "model")
    val = read_dataset(work / "data", split="val")
    assert len(val) == 5
    single = evaluate_policy(model, proc, work / "data", val, GenerationConfig())
    assert full[0]["result"]["accuracy_after"] == single
    assert full[0]["steps"]["3"]["eval/overall"] == single["overall"]
    assert 0.0 < single["overall"] < 1.0  # an informative accuracy (neither all wrong nor all right)


@pytest.mark.slow
def test_zero3_a_rank_whose_rewards_are_all_missing_joins_every_collective(work):
    missing = ranks(work, "missing")
    group, prompts = 4, 2  # per rank (zero3_train.rucl_cfg)
    for r in (0, 1):
        assert missing[r]["result"]["steps"] == 2
        for step in ("0", "1"):
            m = missing[r]["steps"][step]
            # averaged over ranks: rank 0 trained all 8 episodes, rank 1 none (8 missing)
            assert m["n_missing"] == group * prompts / 2 and m["n_trained"] == group * prompts / 2
            assert "skipped" not in m and m["loss"] != 0.0
    assert (math.isnan(missing[1]["steps"]["0"]["reward/total"])
            and not math.isnan(missing[0]["steps"]["0"]["reward/total"]))
    assert not same_tensors(tensors(work / "missing" / "model" / "model.safetensors"),
                            tensors(work / "rucl-sft" / "model.safetensors"))


@pytest.mark.slow
def test_zero3_deltarubric_trains_on_two_ranks_and_saves_the_consolidated_policy(work):
    dr = ranks(work, "dr")
    for r in (0, 1):
        assert dr[r]["result"]["steps"] == 2 and dr[r]["result"]["resumed_from"] is None
        assert sorted(dr[r]["steps"]) == ["0", "1", "2"]  # two steps and the final probe
    assert dr[0]["steps"]["2"]["probe/accuracy"] == dr[1]["steps"]["2"]["probe/accuracy"]  # every rank probed
    saved = tensors(work / "dr" / "model" / "model.safetensors")
    sft = tensors(work / "dr-sft" / "model.safetensors")
    assert saved.keys() == sft.keys() and all(saved[k].shape == sft[k].shape for k in saved)
    # the tiny warm start writes no valid checklist yet, so both steps had zero gradients: the consolidated policy is
    # exactly the warm start (a rank's own partition would be empty tensors)
    assert dr[0]["steps"]["1"]["grad_norm"] == 0.0
    assert same_tensors(saved, sft)
    curve = json.loads((work / "dr" / "reports" / "plots" / "deltarubric_train.json").read_text())
    assert [row["step"] for row in curve] == [0, 1]  # one writer: each step once


@pytest.mark.slow
def test_zero3_roro_router_trains_on_two_ranks_and_is_saved_whole(work):
    from rubricflow.methods.roro.router.mlp import RouterMLP, load_router
    from tests.grpo.zero3_train import roro_cfg

    ro = ranks(work, "roro")
    tags = [run["tag"] for run in ro[0]["result"]["runs"]]
    assert tags == ["roro-cw0.5", "outcome-cw0.5"]
    for r in (0, 1):
        assert [run["steps"] for run in ro[r]["result"]["runs"]] == [3, 3]
    assert ro[0]["steps"]["0"]["roro-cw0.5/grad_norm"] == ro[1]["steps"]["0"]["roro-cw0.5/grad_norm"] > 0
    rc = roro_cfg(work, "roro", 3)
    torch.manual_seed(rc.seed)
    init = RouterMLP(hidden=rc.router.hidden, init_call_bias=rc.router.init_call_bias).state_dict()
    for tag in tags:
        router, meta = load_router(work / "roro" / "out" / "router" / f"{tag}.pt")
        sd = router.state_dict()
        assert meta["tag"] == tag
        assert all(sd[k].shape == init[k].shape for k in init)
        assert not all(torch.equal(sd[k], init[k]) for k in init)  # trained, whole
    assert json.loads((work / "roro" / "out" / "router" / "summary.json").read_text())["runs"][0]["steps"] == 3
