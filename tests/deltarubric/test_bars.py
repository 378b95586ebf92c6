"""The phases of a warm start to a bar (rubricflow.methods.deltarubric.bars): blocks trained until a bar, staged
phases, the checks a bar reads, restarts from a new init seed, and a run stopped after any block resumed."""

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
