"""The warm start (rubricflow.methods.deltarubric.warmstart): the stage trained to its bars and its records, the
induction pretraining of the base, the verdict weights, the checkpoints a stopped start resumes from (the phases
themselves: test_bars.py)."""


def _tiny_config(tmp_path, dr: dict):
    """A config whose DeltaRubric section is ``dr``, on a one-layer tiny policy, writing under ``tmp_path``."""
    from rubricflow.config import config_from_dict

    return config_from_dict({"seed": 1, "artifacts_dir": str(tmp_path / "a"), "reports_dir": str(tmp_path / "reports"),
                             "models": {"policy": {"source": "tiny", "hidden_size": 32, "num_layers": 1,
                                                   "num_heads": 2, "vision_hidden_size": 32, "vision_depth": 1,
                                                   "vocab_size": 400}},
                             "deltarubric": dr})


def _bar_config(tmp_path, **sft):
    """``_tiny_config`` with a warm start to a bar in blocks of 2 steps, capped at 4 per phase (``sft``: the test's own
    settings), and its pairs built."""
    from rubricflow.methods.deltarubric.stages import pairs_stage

    dr = {"pairs": {"out_dir": str(tmp_path / "pairs"), "tasks": ["counting"], "train": 4, "val": 2, "test": 2,
                    "balance_tol": 0.5},
          "sft": {"out_dir": str(tmp_path / "sft"), "base_dir": str(tmp_path / "base"), "batch_size": 4,
                  "warmup_steps": 1, "hidden_size": None, "perception_images": 2, "perception_batch_size": 2,
                  "bar_reading": 0.5, "bar_oracle": 0.5, "block_steps": 2, "max_steps": 4, **sft}}
    cfg = _tiny_config(tmp_path, dr)
    pairs_stage(cfg, track=False)
    return cfg


def test_the_sft_stage_trains_to_the_bar_and_records_every_attempt(tmp_path, monkeypatch):
    """The stage wiring on a toy model: the staged phases, a restart from init seed + 1000 (a fresh base), the
    summary and the attempts file; the val measure is a fake that reads the attempt's init seed and steps."""
    import json

    from rubricflow.methods.deltarubric import warmstart
    from rubricflow.methods.deltarubric.stages import sft_stage

    cfg = _bar_config(tmp_path, max_restarts=1, generative=True, equal_mode_examples=True)
    built = []
    real_build = warmstart.build_or_load_base

    def build(models, d, train, seed, init_seed=None):
        built.append((seed, init_seed))
        return real_build(models, d, train, seed, init_seed)

    def fake_measure(d, items, model, proc):
        init_seed = built[-1][1]
        steps = {"n": 0}
        real_train = model.train

        def counting_train(mode=True):  # train_sft calls model.train() once per block
            steps["n"] += mode
            return real_train(mode)

        model.train = counting_train
        # seed 1 misses the oracle bar; 1001 meets each bar after its second block
        return lambda names: {n: (0.0 if init_seed == 1 and n == "oracle" else 0.25 * steps["n"]) for n in names}

    monkeypatch.setattr(warmstart, "build_or_load_base", build)
    monkeypatch.setattr(warmstart, "val_measure", fake_measure)
    logged = []
    m = sft_stage(cfg, track=False, log_fn=lambda s, x: logged.append(s))
    assert built == [(1, 1), (1, 1001)]
    assert (m["init_seed"], m["restarts"]) == (1001, 1)
    assert [(a["init_seed"], a["met"]) for a in m["attempts"]] == [(1, False), (1001, True)]
    assert [p["phase"] for p in m["attempts"][0]["phases"]] == ["reading", "evidence"]  # stopped at the miss
    assert list(m["phases"]) == ["reading", "evidence", "comparison", "verdicts"]
    assert m["phases"]["reading"]["steps"] == 4 and m["phases"]["reading"]["met"]
    assert m["steps"] == sum(p["steps"] for p in m["phases"].values()) and m["reading_steps"] == 4
    assert m["bars"] == {"reading": 0.5, "oracle": 0.5} and all(v >= 0.5 for v in m["reached"].values())
    # per pair: planner + 2 x (verifier, exhaustive, no-rubric, static, reading, generative)
    assert m["pair_examples"] == 4 * 13 and m["reading_examples"] == 2
    # every attempt's steps, numbered on: the first attempt's 8 (reading 4, evidence 4 to its cap), then the kept one's
    assert m["attempts"][0]["steps"] == 8 and logged == list(range(8 + m["steps"]))
    loss = json.loads((tmp_path / "reports" / "plots" / "deltarubric_sft_loss.json").read_text())
    assert [c["step"] for c in loss] == list(range(m["steps"])) and {c["init_seed"] for c in loss} == {1001}
    saved = json.loads((tmp_path / "reports" / "plots" / "deltarubric_sft_bars.json").read_text())
    assert saved["met"] and len(saved["attempts"]) == 2
    assert (tmp_path / "sft" / "config.json").exists()
    # the checkpoint carries its bars record (a study unit reads it: start_met, start_steps)
    assert warmstart.bars_record(tmp_path / "sft") == {
        "met": True, "steps": m["steps"], "restarts": 1, "init_seed": 1001, "bars": {"reading": 0.5, "oracle": 0.5},
        "reached": m["reached"]}
    # a study's per-seed start keeps the last attempt when every attempt misses, and says so
    import pytest

    built.clear()
    missed = cfg.deltarubric.model_copy(update={"sft": cfg.deltarubric.sft.model_copy(update={
        "max_restarts": 0, "out_dir": str(tmp_path / "sft-missed")})})
    with pytest.raises(warmstart.BarMissed):
        warmstart.warm_start(missed, cfg.models, 1, tmp_path / "r2", _NullRun())
    assert not (tmp_path / "sft-missed").exists()
    kept = warmstart.warm_start(missed, cfg.models, 1, tmp_path / "r3", _NullRun(), keep_missed=True)
    assert kept["met"] is False and kept["restarts"] == 0 and (tmp_path / "sft-missed" / "config.json").exists()
    assert warmstart.bars_record(tmp_path / "sft-missed")["met"] is False
    assert not json.loads((tmp_path / "r3" / "plots" / "deltarubric_sft_bars.json").read_text())["met"]


class _NullRun:
    def log_metrics(self, metrics, step=None):
        pass


def test_a_missed_bar_is_not_retried_by_the_stage():
    """The same settings miss the bar again: the stage's retry condition lets it fail at once."""
    from rubricflow.methods.deltarubric.bars import BarMissed
    from tasks.stage import NOT_RETRIED

    assert issubclass(BarMissed, NOT_RETRIED)


def test_the_base_is_induction_pretrained_when_asked_and_records_it(tmp_path):
    """sft.induction_steps: the fresh base trains on the induction task before it is saved (its copy accuracy
    before and after beside the weights); 0 builds the same base as before, with no record."""
    import json

    import torch

    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.deltarubric.stages import pairs_stage
    from rubricflow.methods.deltarubric.warmstart import INDUCTION_FILE, build_or_load_base

    def cfg(steps, base):
        dr = {"pairs": {"out_dir": str(tmp_path / "pairs"), "tasks": ["counting"], "train": 4, "val": 2, "test": 2,
                        "balance_tol": 0.5},
              "sft": {"base_dir": str(tmp_path / base), "batch_size": 4, "hidden_size": None,
                      "induction_steps": steps}}
        return _tiny_config(tmp_path, dr)

    plain, pre = cfg(0, "plain"), cfg(5, "pre")
    pairs_stage(plain, track=False)
    train = read_pairs(tmp_path / "pairs", "train")
    m0, _ = build_or_load_base(plain.models, plain.deltarubric, train, 1)
    m1, _ = build_or_load_base(pre.models, pre.deltarubric, train, 1)
    assert not (tmp_path / "plain" / INDUCTION_FILE).exists()
    rec = json.loads((tmp_path / "pre" / INDUCTION_FILE).read_text())
    assert rec["steps"] == 5 and 0 <= rec["copy_acc_before"] <= 1 and 0 <= rec["copy_acc_after"] <= 1
    w0, w1 = m0.state_dict(), m1.state_dict()
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)  # same init seed, then 5 steps of the induction task


def test_the_induction_pool_task_draws_from_the_warm_starts_own_frequent_tokens(tmp_path, monkeypatch):
    """sft.induction_pool 'task': the pretraining's sequences use the most frequent tokens of the warm start's texts
    (the tokenizer corpus), as many as the task's pool; sft.grad_clip reaches its updates."""
    from models.processor import text_tokenizer
    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.deltarubric.stages import pairs_stage
    from rubricflow.methods.deltarubric.examples import pair_tokenizer_corpus
    from rubricflow.methods.deltarubric.warmstart import build_or_load_base
    from rubricflow.training import induction

    seen = {}

    def fake(model, proc, steps, batch_size, lr, seed=0, pool=None, clip=1.0, **kw):
        seen.update(pool=pool, clip=clip, proc=proc)
        return {"steps": steps, "copy_acc_before": 0.0, "copy_acc_after": 0.0, "chance": 0.0, "final_loss": 0.0}

    monkeypatch.setattr(induction, "pretrain_induction", fake)
    dr = {"pairs": {"out_dir": str(tmp_path / "pairs"), "tasks": ["counting"], "train": 4, "val": 2, "test": 2,
                    "balance_tol": 0.5},
          "sft": {"base_dir": str(tmp_path / "base"), "batch_size": 4, "hidden_size": None, "induction_steps": 5,
                  "induction_pool": "task", "grad_clip": None}}
    cfg = _tiny_config(tmp_path, dr)
    pairs_stage(cfg, track=False)
    train = read_pairs(tmp_path / "pairs", "train")
    build_or_load_base(cfg.models, cfg.deltarubric, train, 1)
    ids, sep = seen["pool"]
    tok = text_tokenizer(seen["proc"])
    corpus_ids = {i for t in pair_tokenizer_corpus(train, cfg.deltarubric.sft, 1)
                  for i in tok(t, add_special_tokens=False)["input_ids"]}
    assert len(ids) == induction.InductionTask().pool and set(ids) <= corpus_ids and sep not in ids
    assert seen["clip"] is None


def test_induction_after_reading_runs_once_the_reading_bar_is_met(tmp_path, monkeypatch, capsys):
    """induction_at 'after_reading': the pretraining runs between the reading and the evidence phases (recorded
    beside the checkpoint); without a bar there are no phases to run it between, and the warm start says so."""
    import pytest

    from rubricflow.methods.deltarubric import warmstart

    cfg = _bar_config(tmp_path, max_restarts=0, induction_steps=3, induction_at="after_reading")
    monkeypatch.setattr(warmstart, "val_measure", lambda d, items, model, proc: lambda names: {n: 1.0 for n in names})
    warmstart.warm_start(cfg.deltarubric, cfg.models, 1, tmp_path / "reports", _NullRun())
    out = capsys.readouterr().out
    assert "deltarubric base: induction" not in out  # not on the fresh base
    reading_done, induction = out.index("phase reading: 2 steps"), out.index("deltarubric sft: induction pretraining")
    assert reading_done < induction < out.index("phase evidence: 2 steps")
    rec = warmstart.bars_record(tmp_path / "sft")
    assert rec["met"] and rec["induction"]["steps"] == 3
    fixed = cfg.deltarubric.model_copy(update={"sft": cfg.deltarubric.sft.model_copy(update={
        "bar_reading": 0.0, "bar_oracle": 0.0})})
    with pytest.raises(ValueError, match="induction_at"):
        warmstart.warm_start(fixed, cfg.models, 1, tmp_path / "r2", _NullRun())


def test_the_verdict_weight_falls_on_the_verdict_letter_of_every_judge_target_and_nowhere_else(tmp_path):
    """sft.verdict_weight: the weighted token of a judge's target is its final verdict letter (every judge mode
    alike); the planner's checklist and the reads keep every weight 1; weight 1 is no weighting at all."""
    from models.processor import text_tokenizer
    from rubricflow.data.pairs import read_pairs
    from rubricflow.methods.deltarubric.evaluate import load_items
    from rubricflow.methods.deltarubric.examples import mode_examples
    from rubricflow.methods.deltarubric.stages import pairs_stage
    from rubricflow.methods.deltarubric.warmstart import build_or_load_base, verdict_weights
    from rubricflow.training.sft import target_ids

    dr = {"pairs": {"out_dir": str(tmp_path / "pairs"), "tasks": ["counting"], "train": 6, "val": 2, "test": 2,
                    "balance_tol": 0.5},
          "sft": {"base_dir": str(tmp_path / "base"), "hidden_size": None}}
    cfg = _tiny_config(tmp_path, dr)
    pairs_stage(cfg, track=False)
    train = read_pairs(tmp_path / "pairs", "train")
    _, proc = build_or_load_base(cfg.models, cfg.deltarubric, train, 1)
    assert verdict_weights(proc, 1.0) is None
    weigh, tok = verdict_weights(proc, 10.0), text_tokenizer(proc)
    modes = set()
    for e, ex in mode_examples(proc, load_items(tmp_path / "pairs", train), cfg.deltarubric.sft, seed=1):
        ids = target_ids(proc, ex.target)
        w = weigh(ex.target, ids)
        if e.mode == "planner":
            assert w is None
            continue
        assert len(w) == len(ids) and sorted(set(w)) == [1.0, 10.0]
        heavy = [tok.decode([i]).strip() for i, x in zip(ids, w) if x == 10.0]
        assert heavy == [ex.target[-1]] and ex.target[-1] in "AB", (e.mode, ex.target[-20:])
        modes.add(e.mode)
    assert {"verifier", "no_rubric", "static", "reading"} <= modes


def test_weighted_sft_loss_adds_gradient_to_the_weighted_tokens_only():
    """sft_loss with weights: every weight 1 is the plain mean; a weight w on one completion token adds (w - 1) times
    that token's term, still over the completion-token count; batch_weights places a target's weights on its own
    completion positions."""
    import pytest
    import torch

    from rubricflow.training.sft import batch_weights, sft_loss

    class Fixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0)))

        def forward(self, input_ids, attention_mask):
            return type("Out", (), {"logits": self.logits})()

    batch = {"input_ids": torch.tensor([[1, 2, 3, 4, 0], [1, 5, 6, 2, 3]]),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
             "completion_mask": torch.tensor([[0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])}
    model = Fixed()
    plain = sft_loss(model, batch)
    ones = batch_weights(batch, ["x", "y"], [[3, 4], [2, 3]], lambda text, ids: [1.0] * len(ids))
    assert torch.equal(ones, torch.ones(2, 5)) and torch.allclose(sft_loss(model, batch, ones), plain)
    w = batch_weights(batch, ["x", "verdict: A"], [[3, 4], [2, 3]],
                      lambda text, ids: [1.0, 5.0] if text.startswith("verdict") else None)
    assert w[1].tolist() == [1, 1, 1, 1, 5] and w[0].tolist() == [1] * 5
    logp = torch.log_softmax(model.logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    assert torch.allclose(sft_loss(model, batch, w), plain - 4 * logp[1, 3] / 4)
    with pytest.raises(ValueError, match="3 weights for a target of 2 tokens"):
        batch_weights(batch, ["x", "y"], [[3, 4], [2, 3]], lambda text, ids: [1.0] * 3)


def test_the_warm_start_checkpoints_each_block_and_an_interrupted_one_resumes_to_the_same_weights(tmp_path,
                                                                                              monkeypatch):
    """The stage on a toy model with a resume folder: interrupted after one of several blocks and run again, it goes on
    from the checkpoint and saves the weights, loss curve and logged steps of the run that was never interrupted;
    the record says it was resumed and where (each run's machine)."""
    import json
    import time

    import pytest
    import torch
    from safetensors.torch import load_file

    from rubricflow.methods.deltarubric import warmstart

    cfg = _bar_config(tmp_path, max_restarts=0, induction_steps=3, induction_at="after_reading")
    # each bar is met after a phase's second block: 4 phases x 2 blocks
    monkeypatch.setattr(warmstart, "val_measure", lambda d, items, model, proc: (
        lambda names: {n: 0.3 * (1 + fake_blocks[-1] % 2) for n in names}))
    real_train = warmstart.train_sft
    fake_blocks: list = []

    def counting_train(*a, **k):
        if stop_at is not None and len(fake_blocks) == stop_at:
            raise RuntimeError("interrupted")
        out = real_train(*a, **k)
        fake_blocks.append(len(fake_blocks))
        return out

    monkeypatch.setattr(warmstart, "train_sft", counting_train)

    def run(name, resume_dir=None, logged=None):
        sft = cfg.deltarubric.sft.model_copy(update={"out_dir": str(tmp_path / name)})
        d = cfg.deltarubric.model_copy(update={"sft": sft})
        return warmstart.warm_start(d, cfg.models, 1, tmp_path / f"r-{name}", _NullRun(), resume_dir=resume_dir,
                                    log_fn=None if logged is None else (lambda s, m: logged.append((s, m["sft/loss"]))))

    stop_at, logged_full = None, []
    full = run("full", logged=logged_full)
    assert len(fake_blocks) == 8 and full["met"] and "resumes" not in full
    strip = ("sft_seconds", "resumes", "segments")
    full_weights = load_file(tmp_path / "full" / "model.safetensors")
    # stopped after a block within a phase (1), after a phase's last block before the induction that follows it
    # (2), after the induction and a block (3), in the last phase (7)
    for stop in (1, 2, 3, 7):
        fake_blocks.clear()
        stop_at, logged = stop, []
        resume, name = tmp_path / f"resume{stop}", f"resumed{stop}"
        with pytest.raises(RuntimeError, match="interrupted"):
            run(name, resume_dir=resume, logged=logged)
        progress = json.loads((resume / "progress.json").read_text())
        assert progress["weights"] == f"block{stop:05d}.safetensors"
        assert sorted(p.name for p in resume.iterdir()) == [progress["weights"], "progress.json"]
        assert not (tmp_path / name).exists()
        stop_at = None
        t_resumed = time.perf_counter()
        resumed = run(name, resume_dir=resume, logged=logged)
        t_resumed = time.perf_counter() - t_resumed
        assert len(fake_blocks) == 8, stop  # no block trained twice
        got = load_file(tmp_path / name / "model.safetensors")
        assert got.keys() == full_weights.keys() and all(torch.equal(got[k], full_weights[k]) for k in got), stop
        assert logged == logged_full, stop  # every step logged once, numbered as in the uninterrupted run
        curve = json.loads((tmp_path / f"r-{name}" / "plots" / "deltarubric_sft_loss.json").read_text())
        assert curve == json.loads((tmp_path / "r-full" / "plots" / "deltarubric_sft_loss.json").read_text())
        assert {k: v for k, v in resumed.items() if k not in strip} == \
            {k: v for k, v in full.items() if k not in strip}, stop  # the induction record included
        assert resumed["resumes"] == 1 and len(resumed["segments"]) == 2
        # the time counts every run's training to its last checkpointed block, once: the earlier run's checkpointed
        # seconds plus at most this run's wall time
        earlier = progress["state"]["seconds"]
        assert earlier > 0 and round(earlier, 1) <= resumed["sft_seconds"] <= round(earlier + t_resumed, 1) + 0.1
        assert warmstart.bars_record(tmp_path / name)["segments"] == resumed["segments"]
        ph = {1: ("reading", 1), 2: ("reading", 2), 3: ("evidence", 3), 7: ("verdicts", 7)}[stop]
        assert resumed["segments"][1] | {"machine": None} == {"machine": None, "init_seed": 1, "phase": ph[0],
                                                             "block": ph[1]}
    assert full["induction"]["steps"] == 3
