"""The Judge's process score: the paper's sampled sum(weight * score * 1[satisfied]), and the probability-weighted
option."""

import pytest

from rubricflow.methods.roro.judge.scoring import criterion_expected, expected_scores, mean_score, process_scores
from rubricflow.methods.roro.env.routing import LRM, SLM, StepRecord, Trajectory
from rubricflow.methods.roro.judge.lm import RubricLM
from rubricflow.methods.roro.judge.rubricor import problem_views
from rubricflow.methods.roro.judge.alternation import routing_tokenizer_corpus
from rubricflow.methods.roro.judge.rubric import criterion


def _traj(writers=(SLM, LRM, SLM), us=(0.12, 0.71, 0.0), policy="all-slm"):
    texts = ["7 + 5 = 12", "12 * 2 = 24", "#### 24"]
    steps = [StepRecord(k, w, t, 5, t, 5, u, k != 1, t if w == LRM else None, 5 if w == LRM else 0, True, True, True,
                        [u] * 5, int(w == LRM)) for k, (w, t, u) in enumerate(zip(writers, texts, us))]
    return Trajectory("p1", "train", policy, "Start with 7. Add 5. Multiply by 2.", steps, True, True)


def test_mean_score():
    class J:  # minimal ParsedJudgment stand-ins
        def __init__(self, score):
            self.score = score

    assert mean_score([J(0.5), J(None), J(1.0)]) == pytest.approx(0.75)
    assert mean_score([J(None), J(None)]) is None


RUBRIC2 = [criterion("few LRM steps", 0.75), criterion("steps are right", 0.25)]


def _judgment(s1, v1, s2, v2):
    return ('{"criterion_judgments": [{"criterion": "few LRM steps", "score": %s, "satisfied": %s}, '
            '{"criterion": "steps are right", "score": %s, "satisfied": %s}]}' % (s1, v1, s2, v2))


class ScriptedJudge:
    """Returns fixed judgment texts per call (sampled: the listed samples; greedy: the first)."""

    reads = "steps"

    def __init__(self, texts):
        self.texts, self.calls = texts, []

    def generate(self, contents, n=1, temperature=0.0, seed=None):
        self.calls.append((len(contents), n, temperature))
        return [list(self.texts[:n]) for _ in contents]


def test_sampled_score_is_the_mean_of_the_papers_formula_with_numeric_scores():
    texts = [_judgment("0.25", "true", "1.0", "true"),  # 0.75 * 0.25 + 0.25 * 1.0 = 0.4375
             _judgment("1.0", "false", "0.6", "true"),  # 0 + 0.25 * 0.6 = 0.15
             "no JSON at all",  # failed: left out of the mean, not counted 0
             _judgment("0.5", "true", "0.5", "false")]  # 0.375
    judge = ScriptedJudge(texts)
    (score,) = process_scores(judge, [("q", RUBRIC2, _traj())], "sampled", 4, 1.0, 0)
    assert score == pytest.approx((0.4375 + 0.15 + 0.375) / 3)
    assert judge.calls == [(1, 4, 1.0)]
    (none,) = process_scores(ScriptedJudge(["garbage"] * 2), [("q", RUBRIC2, _traj())], "sampled", 2, 1.0, 0)
    assert none is None  # every judgment failed: missing, never 0
    with pytest.raises(ValueError, match="roro.rubricor_judge.score_mode: unknown mode 'mean'"):
        process_scores(judge, [("q", RUBRIC2, _traj())], "mean", 4, 1.0, 0)


def test_expected_score_takes_the_written_score_and_the_verdict_probability():
    import torch

    assert criterion_expected(0.5, 0.25, p_true=0.3, p_false=0.1) == pytest.approx(0.5 * 0.25 * 0.75)
    # a tiny real tokenizer and a model with flat logits: P(true) = P(false), so each criterion counts
    # weight * score * 0.5 with the score as written ("0.25" is 0.25, not the 0.5 its first digit would give)
    from models.tiny import TinyDims, build_tiny_text
    from rubricflow.methods.roro.judge.prompts import ADDED_TOKENS

    corpus = routing_tokenizer_corpus(problem_views([_traj(writers=(SLM, SLM, SLM))]),
                                      [_traj(writers=(SLM, SLM, SLM))], 0)
    model, tok = build_tiny_text(corpus, TinyDims(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                                                  vocab_size=320, max_positions=512))
    tok.add_tokens(ADDED_TOKENS)

    class Flat(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, **_):
            return type("Out", (), {"logits": torch.zeros(*input_ids.shape, len(tok))})()

    judge = RubricLM(model, tok, "judge")
    judge.model = Flat()
    judge.generate = lambda contents, n=1, temperature=0.0, seed=None: [
        [_judgment("0.25", "true", "1.0", "false")] for _ in contents]
    (score,) = expected_scores(judge, [("q", RUBRIC2, _traj())])
    assert score == pytest.approx(0.5 * (0.75 * 0.25 + 0.25 * 1.0))
    judge.generate = lambda contents, n=1, temperature=0.0, seed=None: [[_judgment("0.25", "true", "x", "true")]
                                                                        for _ in contents]
    assert expected_scores(judge, [("q", RUBRIC2, _traj())]) == [None]  # an incomplete greedy judgment: missing


def test_a_judge_that_reads_the_problem_is_built_loaded_and_prompted_with_it(tmp_path):
    from rubricflow.config import config_from_dict
    from rubricflow.methods.roro.judge.alternation import build_lms
    from rubricflow.methods.roro.judge.lm import load_rubric_lm
    from rubricflow.methods.roro.judge.scoring import judge_scores

    rj = config_from_dict({"roro": {"rubricor_judge": {
        "judge_reads": "problem", "judge": {"hidden_size": 16, "num_layers": 1, "vocab_size": 320},
        "rubricor": {"hidden_size": 16, "num_layers": 1, "vocab_size": 320}}}}).roro.rubricor_judge
    trajs = [_traj(writers=(SLM, SLM, SLM))]
    judge, rubricor = build_lms(rj, problem_views(trajs), trajs)
    assert judge.reads_problem and not rubricor.reads_problem
    seen = []
    judge.generate = lambda contents, n=1, temperature=0.0, seed=None: (seen.extend(contents)
                                                                        or [["x"] for _ in contents])
    judge_scores(judge, [("Start with 7. Add 5. Multiply by 2.", RUBRIC2, trajs[0])])
    assert "\nProblem: Start with 7. Add 5. Multiply by 2.\nRubric:" in seen[0]
    judge.save(tmp_path / "judge")
    spec = rj.judge.model_copy(update={"path": str(tmp_path / "judge")})
    assert load_rubric_lm(spec, "judge", 4, "problem").reads == "problem"
    assert load_rubric_lm(spec, "judge", 4).reads == "steps" and not load_rubric_lm(spec, "judge", 4).reads_problem
    with pytest.raises(ValueError, match=r"judge.path=.*not trained to read check marks .*judge_reads is 'checked'"):
        load_rubric_lm(spec, "judge", 4, "checked")  # built to read the problem, without the calculator's marks
    assert config_from_dict({}).roro.rubricor_judge.judge_reads == "steps"  # the code default: the steps alone


def test_a_judge_with_a_calculator_has_the_check_marks_as_tokens_and_loads_with_them(tmp_path):
    from rubricflow.config import config_from_dict
    from rubricflow.methods.roro.judge.alternation import build_lms
    from rubricflow.methods.roro.judge.lm import load_rubric_lm
    from rubricflow.methods.roro.judge.prompts import CHECK_MARKS

    tiny = {"hidden_size": 16, "num_layers": 1, "vocab_size": 320}
    rj = config_from_dict({"roro": {"rubricor_judge": {"judge_reads": "checked", "judge": tiny,
                                                       "rubricor": tiny}}}).roro.rubricor_judge
    trajs = [_traj(writers=(SLM, SLM, SLM))]
    judge, _ = build_lms(rj, problem_views(trajs), trajs)
    assert judge.reads == "checked"
    for mark in CHECK_MARKS:  # one token each
        assert len(judge.tokenizer(f" {mark}", add_special_tokens=False)["input_ids"]) <= 2
        assert mark in judge.tokenizer.get_vocab()
    judge.save(tmp_path / "judge")
    loaded = load_rubric_lm(rj.judge.model_copy(update={"path": str(tmp_path / "judge")}), "judge", 4, "checked")
    assert loaded.reads == "checked" and loaded.reads_problem


def test_a_tokenizer_of_the_checked_texts_is_the_same_whatever_the_judge_reads():
    """``tokenizer_reads: checked``: the steps-only Judge and the calculator Judge get one tokenizer and one initial
    Rubricor (a reading study then compares the Judge's input alone); ``own`` (the default) follows the reading."""
    import torch

    from rubricflow.config import config_from_dict
    from rubricflow.methods.roro.judge.alternation import build_lms
    from rubricflow.methods.roro.judge.prompts import CHECK_MARKS

    tiny = {"hidden_size": 16, "num_layers": 1, "vocab_size": 320}
    trajs = [_traj(writers=(SLM, SLM, SLM))]

    def built(reads, tokenizer_reads):
        rj = config_from_dict({"roro": {"rubricor_judge": {
            "judge_reads": reads, "tokenizer_reads": tokenizer_reads, "judge": tiny,
            "rubricor": tiny}}}).roro.rubricor_judge
        return build_lms(rj, problem_views(trajs), trajs)

    (js, rs), (jc, rc) = built("steps", "checked"), built("checked", "checked")
    assert js.tokenizer.get_vocab() == jc.tokenizer.get_vocab() == rs.tokenizer.get_vocab()
    assert all(m in js.tokenizer.get_vocab() for m in CHECK_MARKS)
    assert js.reads == "steps" and jc.reads == "checked"
    for a, b in ((rs, rc), (js, jc)):  # same init: the readings differ in the Judge's input only
        assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    own, _ = built("steps", "own")
    assert own.tokenizer.get_vocab() != js.tokenizer.get_vocab()  # the default: the steps texts, no marks
    assert not any(m in own.tokenizer.get_vocab() for m in CHECK_MARKS)
    assert config_from_dict({}).roro.rubricor_judge.tokenizer_reads == "own"


def test_a_reading_of_the_problem_is_refused_on_gsm8k_when_the_config_is_read():
    from rubricflow.config import config_from_dict

    gsm8k = {"source": "gsm8k", "gsm8k_path": "data/gsm8k.jsonl"}
    for rj in ({"judge_reads": "checked"}, {"tokenizer_reads": "checked"}, {"judge_reads": "problem"}):
        with pytest.raises(ValueError, match="task.source=gsm8k: a reading of the problem"):
            config_from_dict({"roro": {"task": gsm8k, "rubricor_judge": rj}})
    assert config_from_dict({"roro": {"task": gsm8k}}).roro.rubricor_judge.judge_reads == "steps"
