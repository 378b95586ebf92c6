"""The warm start (rubricflow.methods.deltarubric.warmstart and bars): phases trained in blocks to their bars, restarts,
the stage's records, the induction pretraining of the base."""

from rubricflow.methods.deltarubric.targets import worked_reading


def _phase_fakes(curve):
    """A trainer that counts steps and a measure that reads ``curve(total steps trained)``."""
    state = {"steps": 0, "blocks": []}

    def train_block(examples, steps, batch_size, seed):
        state["steps"] += steps
        state["blocks"].append((len(examples), steps, batch_size, seed))

    def measure(names):
        return {n: curve(n, state["steps"]) for n in names}

    return state, train_block, measure


def test_a_phase_trains_in_blocks_until_its_bar_and_stops_there():
    from rubricflow.methods.deltarubric.bars import Phase, train_phase

    state, train_block, measure = _phase_fakes(lambda n, s: s / 1000)  # 0.1 per 100 steps
    rec = train_phase(Phase("evidence", ["x"] * 5, {"oracle": 0.3}, 8), train_block, measure, block_steps=100,
                      max_steps=1000, seed=11)
    assert rec["met"] and rec["steps"] == 300 and state["steps"] == 300  # 0.1, 0.2, 0.3: stops at the bar
    assert [b["steps"] for b in rec["blocks"]] == [100, 200, 300] and rec["reached"] == {"oracle": 0.3}
    assert [b[3] for b in state["blocks"]] == [11, 11 + 100003, 11 + 2 * 100003]  # a new data order per block
    assert all(b[:3] == (5, 100, 8) for b in state["blocks"])
    # the cap: whole blocks, the last one cut; the bar missed is recorded with the value reached
    state, train_block, measure = _phase_fakes(lambda n, s: s / 1000)
    rec = train_phase(Phase("evidence", ["x"], {"oracle": 0.9}, 8), train_block, measure, 100, 250, seed=0)
    assert not rec["met"] and rec["steps"] == 250 and [b[1] for b in state["blocks"]] == [100, 100, 50]
    assert rec["reached"] == {"oracle": 0.25}
    # a phase without an active bar trains one block and measures nothing
    state, train_block, measure = _phase_fakes(lambda n, s: 1 / 0)
    rec = train_phase(Phase("comparison", ["x"], {}, 8), train_block, measure, 100, 1000, seed=0)
    assert rec["met"] and rec["steps"] == 100 and rec["blocks"] == [{"steps": 100}]


def test_staged_phases_are_cumulative_in_the_issues_order():
    from rubricflow.methods.deltarubric.bars import staged_phases
    from rubricflow.methods.deltarubric.config import DRSFTConfig

    roles = [("planner", "p"), ("verifier", "v1"), ("verifier", "v2"), ("no_rubric", "n"), ("static", "s"),
             ("reading", "r"), ("generative", "g")]
    cfg = DRSFTConfig(bar_reading=0.8, bar_oracle=0.9, perception_batch_size=32, batch_size=16)
    ph = staged_phases(["read1", "read2"], roles, cfg)
    assert [p.name for p in ph] == ["reading", "evidence", "comparison", "verdicts"]
    assert [p.examples for p in ph] == [
        ["read1", "read2"], ["read1", "read2", "v1", "v2"], ["read1", "read2", "v1", "v2", "s", "g"],
        ["read1", "read2", "v1", "v2", "s", "g", "p", "n", "r"]]
    assert [p.bars for p in ph] == [{"reading": 0.8}, {"oracle": 0.9}, {"oracle": 0.9},
                                    {"reading": 0.8, "oracle": 0.9}]
    assert [p.batch_size for p in ph] == [32, 16, 16, 16]
    # the generative judge with the lookup tool (both turns, role generative_tool) is a comparison example too
    tool = staged_phases(["read1"], [*roles, ("generative_tool", "g1"), ("generative_tool", "g2")], cfg)
    assert tool[2].examples == ["read1", "v1", "v2", "s", "g", "g1", "g2"]
    # no reading examples: no reading phase; a bar at 0 is off
    ph = staged_phases([], roles, cfg.model_copy(update={"bar_reading": 0.0}))
    assert [(p.name, p.bars) for p in ph] == [("evidence", {"oracle": 0.9}), ("comparison", {"oracle": 0.9}),
                                              ("verdicts", {"oracle": 0.9})]
    # the planner's bar holds the last phase, the only one with the planner's examples, until its checklists are valid
    ph = staged_phases(["read1"], roles, cfg.model_copy(update={"bar_planner": 0.95}))
    assert [p.bars for p in ph][-1] == {"reading": 0.8, "oracle": 0.9, "planner": 0.95}
    assert all("planner" not in p.bars for p in ph[:-1])


def test_a_well_formed_checklist_is_valid_and_made_of_the_tasks_checks(tmp_path):
    from rubricflow.methods.deltarubric.bars import bars_on, planner_well_formed
    from rubricflow.methods.deltarubric.config import DRSFTConfig
    from rubricflow.methods.deltarubric.synthetic import build_pairs

    (p,) = build_pairs(tmp_path, ["barchart"], {"val": 1}, seed=4, form="wide")
    assert planner_well_formed("1. read the height of bar K.\n2. check the final answer.", p)
    assert not planner_well_formed("1. read the height of bar K.\n2. look at the colours.", p)  # not a task check
    assert not planner_well_formed("1. read the height of bar K.", p)  # one check: not a valid checklist
    assert not planner_well_formed("1. read the height of bar K.\n2. Response A is better.", p)
    assert bars_on(DRSFTConfig(bar_planner=0.9)) and not bars_on(DRSFTConfig())


def test_a_start_that_misses_its_bar_restarts_from_a_new_init_seed_and_fails_after_the_last():
    import pytest

    from rubricflow.methods.deltarubric.bars import BarMissed, Phase, train_to_bar
    from rubricflow.methods.deltarubric.config import DRSFTConfig

    cfg = DRSFTConfig(bar_oracle=0.5, block_steps=100, max_steps=300, max_restarts=2)
    seeds = []

    def attempt_with(rate):  # init seed -> how fast its start learns
        def attempt(init_seed):
            seeds.append(init_seed)
            _, train_block, measure = _phase_fakes(lambda n, s: s * rate[init_seed])
            return [Phase("evidence", ["v"], {"oracle": 0.5}, 8), Phase("verdicts", ["v", "n"], {"oracle": 0.5}, 8)], \
                train_block, measure
        return attempt

    # seed 7 never reaches 0.5 in 300 steps; 1007 does, after 200 steps
    told = []
    attempts = train_to_bar(attempt_with({7: 0.001, 1007: 0.003}), cfg, seed=7,
                            on_block=lambda ph, b: told.append((ph, b["steps"])))
    assert seeds == [7, 1007]
    # progress: every block of every attempt is told as it ends (steps counted within the phase)
    assert told == [("evidence", 100), ("evidence", 200), ("evidence", 300), ("evidence", 100), ("evidence", 200),
                    ("verdicts", 100)]
    assert [(a["init_seed"], a["met"], a["steps"]) for a in attempts] == [(7, False, 300), (1007, True, 300)]
    first = attempts[0]["phases"]
    assert len(first) == 1 and first[0]["phase"] == "evidence" and not first[0]["met"]  # stopped at the first miss
    assert first[0]["reached"] == {"oracle": 0.3}
    assert [(p["phase"], p["steps"], p["met"]) for p in attempts[1]["phases"]] == [("evidence", 200, True),
                                                                                  ("verdicts", 100, True)]
    # every attempt misses: the error names the phase, the bar, the value reached and what to change
    seeds.clear()
    with pytest.raises(BarMissed) as err:
        train_to_bar(attempt_with({7: 0.001, 1007: 0.001, 2007: 0.0012}), cfg, seed=7)
    assert seeds == [7, 1007, 2007]
    msg = str(err.value)
    assert "phase 'evidence'" in msg and "bar_oracle 0.500, reached 0.360" in msg and "[7, 1007, 2007]" in msg
    assert "deltarubric.sft.max_steps" in msg and "max_restarts" in msg
    assert [a["met"] for a in err.value.attempts] == [False, False, False]
    # max_restarts 0: no restart
    seeds.clear()
    with pytest.raises(BarMissed):
        train_to_bar(attempt_with({7: 0.001}), cfg.model_copy(update={"max_restarts": 0}), seed=7)
    assert seeds == [7]


def test_reading_exactness_needs_every_claim_key_right():
    from rubricflow.methods.deltarubric.bars import reading_exact

    facts = {"task": "counting", "perception": [["red", 2], ["green", 1], ["blue", 0]], "intermediate": [],
             "target": "green", "question_type": "count"}
    assert reading_exact(worked_reading(facts), facts)
    assert not reading_exact("red = 2, green = 1, blue = 1. so green = 1. \\boxed{1}", facts)
    assert not reading_exact("red = 2, green = 1. so green = 1. \\boxed{1}", facts)  # a key left out
    assert not reading_exact("red = 2, green = 1, blue = 0. so green = 1.", facts)  # no answer


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


def test_a_start_to_a_bar_interrupted_after_any_block_resumes_and_ends_as_the_uninterrupted_one():
    """``train_to_bar`` with a checkpoint after each block: stopped after any block (a restart and a phase ended
    at its bar included) and given its last checkpoint (through JSON, as on disk) back, it trains the remaining
    blocks only, with the same data seeds, and returns the attempts of the run that was never stopped."""
    import json

    import pytest

    from rubricflow.methods.deltarubric.bars import Phase, train_to_bar
    from rubricflow.methods.deltarubric.config import DRSFTConfig

    cfg = DRSFTConfig(bar_oracle=0.5, block_steps=100, max_steps=300, max_restarts=2)
    rate = {7: 0.001, 1007: 0.003}  # init seed 7 misses at its cap; 1007 meets after 200 steps, then verdicts

    def make(log, stop_after=None, weights_from=None):
        """``weights_from``: a checkpoint; the attempt it names starts from the steps it had trained (its weights)."""
        current = {}

        def attempt(init_seed):
            st = {"steps": weights_from["weights"] if weights_from and weights_from["init_seed"] == init_seed else 0}
            current["st"] = st

            def train_block(examples, steps, batch_size, seed):
                if stop_after is not None and len(log) >= stop_after:
                    raise KeyboardInterrupt
                st["steps"] += steps
                log.append((init_seed, len(examples), steps, seed))

            return ([Phase("evidence", ["v"], {"oracle": 0.5}, 8), Phase("verdicts", ["v", "n"], {"oracle": 0.5}, 8)],
                    train_block, lambda names: {n: st["steps"] * rate[init_seed] for n in names})

        return attempt, current

    full_log: list = []
    full_phases: list = []
    full = train_to_bar(make(full_log)[0], cfg, seed=7, on_phase=lambda r: full_phases.append((r["phase"], r["steps"])))
    assert [(a["init_seed"], a["met"]) for a in full] == [(7, False), (1007, True)] and len(full_log) == 6
    for stop in range(1, len(full_log)):
        log: list = []
        saved = {}
        attempt, current = make(log, stop_after=stop)

        def checkpoint(progress, current=current, saved=saved):
            saved.update(json.loads(json.dumps(progress)), weights=current["st"]["steps"])

        with pytest.raises(KeyboardInterrupt):
            train_to_bar(attempt, cfg, seed=7, checkpoint=checkpoint)
        assert len(log) == stop
        told: list = []
        resumed = train_to_bar(make(log, weights_from=saved)[0], cfg, seed=7, progress=saved,
                               on_phase=lambda r, told=told: told.append((r["phase"], r["steps"])))
        assert log == full_log, stop  # every block once, in order, with its own data seed
        assert resumed == full, stop
        # every phase not ended at the checkpoint is told of again (the one whose last block it was included)
        ended = sum(len(a["phases"]) for a in saved["attempts"]) + len(saved["phases"])
        assert told == full_phases[ended:], stop


def test_the_warm_start_checkpoints_each_block_and_an_interrupted_one_resumes_to_the_same_weights(tmp_path,
                                                                                              monkeypatch):
    """The stage on a toy model with a resume folder: interrupted after one of several blocks and run again, it goes on
    from the checkpoint and saves the weights, loss curve and logged steps of the run that was never interrupted;
    the record says it was resumed and where (each run's machine)."""
    import json

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
        resumed = run(name, resume_dir=resume, logged=logged)
        assert len(fake_blocks) == 8, stop  # no block trained twice
        got = load_file(tmp_path / name / "model.safetensors")
        assert got.keys() == full_weights.keys() and all(torch.equal(got[k], full_weights[k]) for k in got), stop
        assert logged == logged_full, stop  # every step logged once, numbered as in the uninterrupted run
        curve = json.loads((tmp_path / f"r-{name}" / "plots" / "deltarubric_sft_loss.json").read_text())
        assert curve == json.loads((tmp_path / "r-full" / "plots" / "deltarubric_sft_loss.json").read_text())
        assert {k: v for k, v in resumed.items() if k not in strip} == \
            {k: v for k, v in full.items() if k not in strip}, stop  # the induction record included
        assert resumed["resumes"] == 1 and len(resumed["segments"]) == 2
        assert warmstart.bars_record(tmp_path / name)["segments"] == resumed["segments"]
        ph = {1: ("reading", 1), 2: ("reading", 2), 3: ("evidence", 3), 7: ("verdicts", 7)}[stop]
        assert resumed["segments"][1] | {"machine": None} == {"machine": None, "init_seed": 1, "phase": ph[0],
                                                             "block": ph[1]}
    assert full["induction"]["steps"] == 3
