"""local backend: an in-process transformers model with the same prompt and parser as the openai backend."""

import json

import pytest

from models.generation import Completion
from rubricflow.judge import JudgeConfig, JudgeRequest, Rubric, make_judge
from rubricflow.judge.config import LocalJudgeConfig
from rubricflow.judge.local_backend import LocalJudge
from rubricflow.judge.prompt import SYSTEM_PROMPT, user_prompt

RUBRICS = [Rubric("R01", "The counts stated match the image."), Rubric("R02", "The boxed answer is present.")]
REQ = JudgeRequest("s1", "How many red shapes are there?", "red = 2. \\boxed{2}", RUBRICS)


@pytest.fixture(scope="module")
def tiny_text_judge(tmp_path_factory):
    from models.tiny import TinyDims, build_tiny_text, save

    corpus = ['{"verdicts": {"R01": {"applicable": true, "satisfied": false}}}', "red = 2. \\boxed{2}"] * 10
    model, tok = build_tiny_text(
        corpus, TinyDims(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, vocab_size=300)
    )
    return save(model, tok, tmp_path_factory.mktemp("judge") / "tiny-judge")


class ScriptedGenerator:
    processor = None  # a text-only judge

    def __init__(self, texts, finished=True, error=None):
        self.texts, self.finished, self.error = list(texts), finished, error
        self.prompts = []

    def generate(self, requests, n=1, max_new_tokens=48, temperature=1.0, top_p=1.0, seed=None):
        if self.error:
            raise self.error
        self.prompts += [r.prompt for r in requests]
        return [[Completion([], self.texts.pop(0), self.finished)] for _ in requests]


def test_tiny_random_model_garbage_is_failed_never_scored(tiny_text_judge):
    judge = make_judge(
        JudgeConfig(
            backend="local",
            cache_enabled=False,
            local=LocalJudgeConfig(model_path=str(tiny_text_judge), max_new_tokens=24, batch_size=2),
        )
    )
    assert isinstance(judge.inner, LocalJudge) and judge.model_id == "tiny-judge"  # inside the failure budget
    out = judge.judge([REQ, REQ, REQ])
    for j in out:
        assert j.status == "failed" and j.verdicts == {}
        assert j.reason.startswith(
            ("empty judge output", "no JSON object found", "no verdict for any requested rubric")
        )
    prompt = judge.gen_request(REQ).prompt
    assert SYSTEM_PROMPT in prompt and user_prompt(REQ) in prompt  # same template as the openai backend
    assert prompt.rstrip().endswith("<|im_start|>assistant")


def test_output_goes_through_the_same_parser():
    judge = LocalJudge(LocalJudgeConfig(model_path="unused", batch_size=2), model=object(), processor=None)
    ok = json.dumps(
        {
            "verdicts": {
                "R01": {"rationale": "", "applicable": True, "satisfied": False},
                "R02": {"rationale": "", "applicable": False, "satisfied": None},
            }
        }
    )
    judge._generator = ScriptedGenerator([ok, '```json\n{"R01": 1, "R02": 0}\n```', '{"R01": true'], finished=False)
    judge._chat = lambda system, user, n: system + "\n" + user
    out = judge.judge([REQ, REQ, REQ])
    assert [j.status for j in out] == ["ok", "repaired", "repaired"]
    assert {k: (v.applicable, v.satisfied) for k, v in out[0].verdicts.items()} == {
        "R01": (True, False),
        "R02": (False, None),
    }
    assert {k: v.satisfied for k, v in out[1].verdicts.items()} == {"R01": True, "R02": False}
    assert set(out[2].verdicts) == {"R01"} and "output hit max_new_tokens" in out[2].reason


def test_generation_error_raises_instead_of_becoming_failed_judgments():
    judge = LocalJudge(LocalJudgeConfig(model_path="unused", batch_size=2), model=object())
    judge._generator = ScriptedGenerator([], error=RuntimeError("CUDA out of memory"))
    judge._chat = lambda system, user, n: user
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        judge.judge([REQ, REQ, REQ])


def test_unreadable_image_fails_only_that_judgment(tmp_path):
    class VLProcessor:
        image_processor = object()

    ok = json.dumps({"verdicts": {"R01": {"rationale": "", "applicable": True, "satisfied": True}}})
    judge = LocalJudge(LocalJudgeConfig(model_path="unused", batch_size=4), model=object(), image_root=tmp_path)
    judge._generator = ScriptedGenerator([ok, ok])
    judge._generator.processor = VLProcessor()
    judge._chat = lambda system, user, n: user
    bad = JudgeRequest("s2", REQ.question, REQ.response, RUBRICS, images=["missing.png"])
    out = judge.judge([REQ, bad, REQ])
    assert [j.status for j in out] == ["repaired", "failed", "repaired"]  # R02 absent from the output: missing
    assert "could not read image" in out[1].reason and "missing.png" in out[1].reason
    assert len(judge._generator.prompts) == 2  # the unreadable one was not sent
