"""The val-only choice of the Judge setting (the selection study `roro_judge_tune`,
rubricflow.methods.roro.study.judge_tune): the rule, the spec and the literal-agreement probe."""

import random

from rubricflow.methods.roro.study.judge_tune import FOUR_FAMILIES, SETTINGS, judge_tune_spec, literal_agreement
from rubricflow.methods.roro.study.specs import STEPS_READING
from rubricflow.study.stats import aggregate, select
from rubricflow.judge.protocol import Verdict
from rubricflow.methods.roro.judge.prompts import FAMILIES, family_satisfied, guidance_params, random_rubric
from rubricflow.methods.roro.judge.rubric import criterion, render_judgment_json
from rubricflow.methods.roro.judge.alternation import ProblemView
from rubricflow.methods.roro.env.routing import LRM, SLM, StepRecord, Trajectory


def _select(results: dict[str, tuple[int, int, float, float]]) -> str:
    """The study's choice from per-setting (judge params, warm steps, kept process on seeds 11 and 22)."""
    rows = [{"variant": name, "seed": seed, "metrics": {"kept_process": p, "judge_params": params, "warm_steps": warm}}
            for name, (params, warm, *kept) in results.items() for seed, p in zip((11, 22), kept)]
    spec = judge_tune_spec()
    agg = aggregate(rows, [], ["kept_process", "judge_params", "warm_steps"])
    return select(agg, spec.selection)["selected"]


def test_select_takes_the_best_mean_val_process_accuracy():
    results = {"h64-l2-w500": (100, 500, 0.55, 0.60), "h128-l2-w1000": (300, 1000, 0.70, 0.72),
               "h64-l2-w1500": (100, 1500, 0.60, 0.66)}
    assert _select(results) == "h128-l2-w1000"


def test_select_prefers_the_cheaper_setting_within_0_01():
    # h128-l4 is best by 0.005: the smaller model wins; between equal sizes, fewer warm-start steps win
    results = {"h128-l4-w1500": (500, 1500, 0.705, 0.705), "h128-l2-w1000": (300, 1000, 0.70, 0.70)}
    assert _select(results) == "h128-l2-w1000"
    results = {"h64-l2-w1500": (100, 1500, 0.70, 0.70), "h64-l2-w500": (100, 500, 0.695, 0.695)}
    assert _select(results) == "h64-l2-w500"
    results["h64-l2-w1500"] = (100, 1500, 0.72, 0.72)  # 0.025 better: the cost no longer decides
    assert _select(results) == "h64-l2-w1500"


def test_the_spec_is_a_val_study_whose_variants_set_only_the_judge():
    spec = judge_tune_spec()
    assert spec.method == "roro_judge" and spec.eval_split == "val" and spec.seeds == [11, 22]
    assert set(spec.variants) == set(SETTINGS)
    # each setting changes the Judge only, under the four criterion families and code caps it ran with (the tiny
    # profile has moved to six)
    for v in spec.variants.values():
        assert {k: v[k] for k in FOUR_FAMILIES} == FOUR_FAMILIES
        assert all(k.startswith("roro.rubricor_judge.judge.") for k in set(v) - set(FOUR_FAMILIES))
    assert FOUR_FAMILIES["roro.rubricor_judge.families"] == "four"
    assert (FOUR_FAMILIES["roro.rubricor_judge.judge.max_new_tokens"],
            FOUR_FAMILIES["roro.rubricor_judge.rubricor.max_new_tokens"]) == (48, 96)


def test_settings_start_from_the_previous_default_and_change_only_the_judge_spec():
    first = next(iter(SETTINGS.values()))
    assert first == {"hidden_size": 64, "num_layers": 2, "warm_steps": 500, "lr": 3e-3}
    assert all(set(s) <= {"hidden_size", "num_layers", "warm_steps", "lr"} for s in SETTINGS.values())


def _traj(writers, us):
    texts = ["7 + 5 = 12", "12 * 2 = 24", "#### 24"]
    steps = [StepRecord(k, w, t, 5, t, 5, u, k != 1, t if w == LRM else None, 5 if w == LRM else 0, True, True, True,
                        [u] * 5, int(w == LRM)) for k, (w, t, u) in enumerate(zip(writers, texts, us))]
    return Trajectory("p1", "val", "enumerate", "Start with 7. Add 5. Multiply by 2.", steps, True, True)


class _Judge:
    """Stands in for the RubricLM: answers every criterion with the literal reading, or its negation."""

    reads, reads_problem = "steps", False

    def __init__(self, flip: set[str]):
        self.flip = flip

    def generate(self, contents, n=1, temperature=0.0, seed=None):
        out = []
        for c in contents:
            rubric, traj = self.queue.pop(0)
            js = {r.id: Verdict(True, family_satisfied(r, traj) != (r.id in self.flip), score=1.0) for r in rubric}
            out.append([render_judgment_json(js)] * n)
        return out


def test_literal_agreement_counts_verdicts_against_the_literal_reading():
    trajs = [_traj((SLM, LRM, SLM), (0.12, 0.71, 0.0)), _traj((SLM, SLM, SLM), (0.1, 0.9, 0.3)),
             _traj((LRM, LRM, SLM), (0.5, 0.2, 0.0))]
    views = {"p1": ProblemView(trajs[0].question, [0.12, 0.71, 0.0])}
    judge = _Judge(flip={"few LRM steps"})
    rng = random.Random(3)  # the probe draws its rubrics with random.Random(seed): replay them for the stand-in
    judge.queue = [(random_rubric(rng, 3), t) for t in trajs]
    got = literal_agreement(judge, views, trajs, seed=3)
    names = [n for n, _ in FAMILIES]
    assert set(got) == set(names)
    assert got["few LRM steps"] == 0.0 and all(got[n] == 1.0 for n in names if n != "few LRM steps")


def test_guidance_params_read_back_the_family_templates():
    params = {"k": 3, "d": 7, "m": 2}
    for name, guide in FAMILIES:
        want = {k: params[k] for k in "kdm" if "{" + k + "}" in guide}
        assert guidance_params(name, guide.format(**params)) == want
    assert guidance_params("few LRM steps", "1.0 if at most two LRM steps") is None  # not the template
    assert guidance_params("steps are short", "1.0 if short") is None  # not a family


def test_exact_reader_scores_the_literal_reading_and_orders_pairs():
    from rubricflow.methods.roro.study.judge_tune import oracle_accuracy
    from rubricflow.methods.roro.env.oracles import literal_score
    from rubricflow.methods.roro.judge.pairs import Pair
    from rubricflow.judge.protocol import Parsed

    # weight only on "risky step to LRM" with k=2: a route that called the LRM at step 2 scores 1, others 0
    rubric = [criterion("risky step to LRM", 1.0, "1.0 if step 2 is by the LRM"),
              criterion("few LRM steps", 0.0, "1.0 if at most 0 LRM steps")]
    a = _traj((SLM, LRM, SLM), (0.1, 0.7, 0.0))
    b = _traj((LRM, SLM, SLM), (0.1, 0.7, 0.0))
    assert (literal_score(rubric, a), literal_score(rubric, b)) == (1.0, 0.0)
    assert literal_score([criterion("x", 1.0, "y")], a) is None
    trajs = [a, b]
    pairs = [Pair("p1", 0, 1, "process"), Pair("p1", 1, 0, "cost")]  # right on the first, wrong on the second
    acc = oracle_accuracy({"p1": Parsed("ok", rubric)}, trajs, pairs)
    assert (acc["pairwise_acc"], acc["acc_cost"], acc["acc_process"]) == (0.5, 0.0, 1.0)
    failed = oracle_accuracy({"p1": Parsed("failed", reason="x")}, trajs, pairs)
    assert failed["pairwise_acc"] == 0.0  # a failed rubric leaves every score missing


def test_the_study_is_registered_and_its_units_are_roro_judge_units():
    from rubricflow import registry
    from rubricflow.config import config_from_dict

    method, decl = registry.studies()["roro_judge_tune"]
    assert method.name == "roro" and "roro_judge" in registry.study_adapters()
    assert config_from_dict({}).study.roro_judge_tune.selection.cost == ["judge_params", "warm_steps"]


def test_the_families_study_compares_four_and_six_on_val_with_the_cheaper_winning_a_tie():
    from rubricflow import registry
    from rubricflow.config import config_from_dict

    method, decl = registry.studies()["roro_families"]
    spec = config_from_dict({}).study.roro_families
    assert method.name == "roro" and spec.method == "roro_judge" and spec.eval_split == "val"
    caps = {"roro.rubricor_judge.judge.max_new_tokens": 72, "roro.rubricor_judge.rubricor.max_new_tokens": 128}
    assert spec.variants == {"four": {"roro.rubricor_judge.families": "four", **caps, **STEPS_READING},
                             "six": {"roro.rubricor_judge.families": "six", **caps, **STEPS_READING}}
    assert (spec.selection.metric, spec.selection.tolerance, spec.selection.cost) == ("kept_process", 0.01,
                                                                                      ["judge_params"])
    assert "literal_no_call_on_a_sure_step" in spec.metrics and "literal_slm_steps_are_right" in spec.metrics


def test_the_reads_study_compares_what_the_judge_reads_on_several_draws_the_steps_winning_a_tie(tmp_path):
    from rubricflow import registry
    from rubricflow.config import config_from_dict
    from rubricflow.methods.roro.study.judge_tune import input_parts, shared_outputs, unit_overrides
    from rubricflow.study.adapter import Unit

    method, decl = registry.studies()["roro_judge_reads"]
    cfg = config_from_dict({})
    spec = cfg.study.roro_judge_reads
    assert method.name == "roro" and spec.method == "roro_judge" and spec.eval_split == "val"
    assert spec.variants == {r: {**STEPS_READING, "roro.rubricor_judge.judge_reads": r,
                                 "roro.task.draw_per_unit": True} for r in ("steps", "problem")}
    assert len(spec.seeds) >= 4 and (spec.selection.metric, spec.selection.tolerance, spec.selection.cost) == (
        "kept_process", 0.01, ["judge_reads_problem"])  # within 0.01: the shorter prompt, the previous setting
    # a unit draws its own problems (task seed = its seed) and keeps its routes and pairs in its directory ...
    vcfg = config_from_dict({"roro": {"task": {"draw_per_unit": True}}})
    unit = Unit("problem", 1601)
    over = unit_overrides(vcfg, "roro_judge_reads", spec, unit, tmp_path / "u")
    assert over["roro.task.seed"] == 1601 and over["roro.data_dir"] == str(tmp_path / "u" / "data")
    assert over["roro.rubricor_judge.seed"] == 1601 and over["roro.rubricor_judge.rounds"] == 1
    # ... reading only the step models; without draw_per_unit it reads the main pipeline's routes and pairs
    assert set(shared_outputs(vcfg)) == {"roro_models (SLM)", "roro_models (LRM)"}
    assert set(shared_outputs(cfg)) == {"roro_trajectories", "roro_pairs"}
    assert "roro.task.seed" not in unit_overrides(cfg, "roro_judge_tune", spec, unit, tmp_path / "u")
    fake = tmp_path / "m"
    fake.mkdir()
    (fake / "config.json").write_text("{}")
    ucfg = config_from_dict({"roro": {"task": {"draw_per_unit": True}, "slm": {"path": str(fake)},
                                      "lrm": {"path": str(fake)}}})
    parts = input_parts(ucfg, unit)
    assert set(parts) == {"config", "seed", "slm", "lrm"} and parts["config"]["roro"]["task"]["draw_per_unit"]


def test_the_checked_study_is_roro_judge_reads_on_other_draws_with_the_calculator_for_the_problem():
    from rubricflow.config import config_from_dict

    study = config_from_dict({}).study
    reads, checked = study.roro_judge_reads, study.roro_judge_checked
    assert checked.variants == {r: {**STEPS_READING, "roro.rubricor_judge.judge_reads": r,
                                    "roro.task.draw_per_unit": True} for r in ("steps", "checked")}
    assert not set(checked.seeds) & set(reads.seeds) and len(checked.seeds) == len(reads.seeds)
    assert checked.selection == reads.selection and checked.metrics == reads.metrics
    assert checked.out_dir != reads.out_dir and checked.eval_split == "val"


def test_the_one_tokenizer_study_differs_from_the_checked_study_in_the_tokenizer_and_the_draws_only():
    from rubricflow.config import config_from_dict

    study = config_from_dict({}).study
    checked, one = study.roro_judge_checked, study.roro_judge_checked_tok
    assert one.variants == {r: {**o, "roro.rubricor_judge.tokenizer_reads": "checked"}
                            for r, o in checked.variants.items()}
    assert not set(one.seeds) & (set(checked.seeds) | set(study.roro_judge_reads.seeds))
    assert len(one.seeds) == len(checked.seeds) and one.out_dir != checked.out_dir
    assert one.selection == checked.selection and one.metrics == checked.metrics and one.eval_split == "val"


def test_every_registered_roro_study_names_the_judges_reading_in_every_variant():
    """The committed studies ran under the steps alone; a variant that names no reading gets that one pinned, so a
    profile that moves judge_reads or tokenizer_reads does not change what they measure."""
    from rubricflow import registry
    from rubricflow.config import config_from_dict

    cfg = config_from_dict({})
    names = [n for n, (m, _) in registry.studies().items() if m.name == "roro"]
    assert "roro" in names and "roro_judge_dose" in names
    for name in names:
        for variant, o in getattr(cfg.study, name).variants.items():
            assert {"roro.rubricor_judge.judge_reads", "roro.rubricor_judge.tokenizer_reads"} <= set(o), (name, variant)
    assert {o["roro.rubricor_judge.judge_reads"] for o in cfg.study.roro.variants.values()} == {"steps"}
    assert {o["roro.rubricor_judge.judge_reads"] for o in cfg.study.roro_fresh_checked.variants.values()} == {"checked"}
