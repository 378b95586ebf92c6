"""Candidate pools: the shipped default, file validation, teacher generation in O(1) calls, the pool stage."""

import json
from pathlib import Path

import pytest

from rubricflow.judge import CATEGORIES, CHECKS, Rubric
from rubricflow.methods.rucl.rubrics import (
    RubricsConfig,
    dedupe,
    generate_pool,
    load_default_pool,
    load_pool,
    parse_teacher_rubrics,
    write_pool,
)


def test_default_pool_shape():
    pool = load_default_pool()
    assert len(pool.rubrics) == 20 and len(set(pool.ids)) == 20
    cats = [r.category for r in pool.rubrics]
    assert {c: cats.count(c) for c in CATEGORIES} == {
        "visual_faithfulness": 7,
        "logical_coherence": 5,
        "constraint_satisfaction": 4,
        "mathematical_accuracy": 4,
    }
    assert all(r.check in CHECKS and r.provenance == "default pool v1" for r in pool.rubrics)
    assert pool.provenance["source"] == "default pool v1"
    # the deliberately narrow candidates (RuCL Cand 03 / 09 analogues)
    narrow = {
        r.id: r.check
        for r in pool.rubrics
        if r.check in ("tallest_bar_named", "fractional_area_exact", "diff_from_extremes")
    }
    assert narrow == {"C03": "tallest_bar_named", "C09": "fractional_area_exact", "C16": "diff_from_extremes"}


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"rubrics": [{"id": "A", "text": "t", "category": "vibes"}]}, "rubrics[0] A: field `category` must be one of"),
        ({"rubrics": [{"id": "", "text": "t"}]}, "rubrics[0]: field `id` must be a non-empty string"),
        ({"rubrics": [{"id": "A", "text": "t", "colour": "red"}]}, "rubrics[0]: unknown field(s) ['colour']"),
        ({"rubrics": [{"id": "A", "text": "t"}, {"id": "A", "text": "u"}]}, "duplicate rubric id(s) ['A']"),
        ({"rubrics": [{"id": "A", "text": "Same text."}, {"id": "B", "text": "same  TEXT"}]}, "duplicate rubric text"),
        ({"rubric": []}, "expected an object with a `rubrics` list"),
        ({"rubrics": []}, "no rubrics"),
    ],
)
def test_bad_pool_files_name_file_and_field(tmp_path, doc, message):
    p = tmp_path / "pool.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as e:
        load_pool(p)
    assert str(p) in str(e.value) and message in str(e.value)


def test_missing_pool_file_says_which_stage_makes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="run the `rubrics-pool` stage first"):
        load_pool(tmp_path / "nope.json")


def test_dedupe_normalises_text():
    kept, dropped = dedupe(
        [Rubric("A", "The answer is boxed."), Rubric("B", "the answer is BOXED"), Rubric("C", "other")]
    )
    assert [r.id for r in kept] == ["A", "C"] and dropped == ["B: duplicate text"]


def teacher_json(items):
    return json.dumps({"rubrics": [{"id": f"X{i}", "category": c, "text": t} for i, (c, t) in enumerate(items)]})


def rubric_texts(n, offset=0):
    cats = ["visual_faithfulness", "Logical coherence", "constraint-satisfaction", "mathematical_accuracy"]
    return [(cats[i % 4], f"Distinct criterion number {i + offset} about the reasoning.") for i in range(n)]


class FakeTeacher:
    name, model_id = "fake", "teacher-1"

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.calls = []

    def generate(self, system, user, schema=None, max_tokens=None):
        self.calls.append(user)
        return self.outputs.pop(0)


def test_parse_teacher_output_tolerantly():
    raw = "Here you go:\n```json\n" + teacher_json(rubric_texts(3)).replace("]}", ",]}") + "\n```"
    items, notes = parse_teacher_rubrics(raw)
    assert [c for c, _ in items] == ["visual_faithfulness", "logical_coherence", "constraint_satisfaction"]
    bad = json.dumps(
        [
            {"category": "astrology", "text": "Stars align with the answer."},
            {"category": "logical_coherence", "text": "ok"},
            "x",
        ]
    )
    items, notes = parse_teacher_rubrics(bad)
    assert items == [] and len(notes) == 3 and "unknown category 'astrology'" in notes[0]
    assert parse_teacher_rubrics("no json here") == ([], ["unparseable teacher output (no JSON object found)"])
    assert parse_teacher_rubrics("") == ([], ["unparseable teacher output (empty output)"])
    # the shared tolerant loader reads the fenced object even when more JSON follows the fence
    # (json-repair on the whole text returned both as a list, and no item was a rubric)
    items, notes = parse_teacher_rubrics("```json\n" + teacher_json(rubric_texts(2)) + "\n```\nand [1]")
    assert [c for c, _ in items] == ["visual_faithfulness", "logical_coherence"] and notes == []


def test_teacher_pool_in_one_call():
    t = FakeTeacher([teacher_json(rubric_texts(20))])
    pool = generate_pool(t, 20, ["How many red shapes are there?"], max_calls=3)
    assert len(t.calls) == 1 and "Write 20 generalized rubrics" in t.calls[0]
    assert pool.ids == [f"T{i:02d}" for i in range(1, 21)]
    assert pool.provenance["teacher_model"] == "teacher-1" and pool.provenance["prompt_version"] == "teacher-v1"
    assert all(r.check is None and r.provenance == "teacher fake:teacher-1 prompt teacher-v1" for r in pool.rubrics)


def test_teacher_top_up_call_and_dedupe():
    first = rubric_texts(12) + rubric_texts(3)  # 3 duplicates
    t = FakeTeacher([teacher_json(first), teacher_json(rubric_texts(8, offset=100))])
    pool = generate_pool(t, 20, [], max_calls=3)
    assert len(t.calls) == 2
    assert "Write 8 generalized rubrics" in t.calls[1] and "do not repeat" in t.calls[1]
    assert len(pool.rubrics) == 20 and len({r.text for r in pool.rubrics}) == 20
    assert sum("duplicate dropped" in n for n in pool.provenance["notes"]) == 3


def test_teacher_that_cannot_deliver_is_an_error():
    t = FakeTeacher(["no json here", teacher_json(rubric_texts(5))])
    with pytest.raises(RuntimeError, match=r"gave 5 valid distinct rubrics in 2 call\(s\), 20 needed"):
        generate_pool(t, 20, [], max_calls=2)


def test_write_pool_default_and_teacher(tmp_path):
    cfg = RubricsConfig(pool_path=str(tmp_path / "candidates.json"))
    res = write_pool(cfg)
    doc = json.loads((tmp_path / "candidates.json").read_text())
    assert res["metrics"]["n_candidates"] == 20 and res["source"] == "default pool v1"
    assert len(doc["rubrics"]) == 20 and {"id", "text", "category", "check", "provenance"} <= set(doc["rubrics"][0])
    res = write_pool(
        cfg.model_copy(update={"n_candidates": 8, "keep_k": 4}), teacher=FakeTeacher([teacher_json(rubric_texts(8))])
    )
    pool = load_pool(tmp_path / "candidates.json")
    assert res["source"] == "teacher" and len(pool.rubrics) == 8 and pool.provenance["teacher_backend"] == "fake"


def test_write_pool_with_an_openai_teacher_makes_one_call(tmp_path, monkeypatch):
    """rubrics.teacher=openai: the judge section's endpoint, teacher_model overriding the model, one request."""
    from rubricflow.judge import JudgeConfig
    from rubricflow.judge.config import OpenAIJudgeConfig
    from rubricflow.testing.judge_server import LoopbackJudgeServer

    payload = teacher_json(rubric_texts(20))
    monkeypatch.setenv("RUBRICFLOW_TEST_TEACHER_KEY", "sk-teacher-abcdef")
    with LoopbackJudgeServer(content_fn=lambda body: f"```json\n{payload}\n```") as srv:
        jcfg = JudgeConfig(
            openai=OpenAIJudgeConfig(
                base_url=srv.base_url, model="judge-model", api_key_env="RUBRICFLOW_TEST_TEACHER_KEY"
            )
        )
        rcfg = RubricsConfig(
            pool_path=str(tmp_path / "candidates.json"), teacher="openai", teacher_model="teacher-model"
        )
        res = write_pool(rcfg, jcfg)
        assert srv.requests == 2  # the preflight (1 token, same model and key) and the one teacher call
        assert srv.bodies[0]["max_tokens"] == 1 and srv.bodies[0]["model"] == "teacher-model"
        body = srv.bodies[1]
        assert body["model"] == "teacher-model"
        assert body["response_format"]["json_schema"]["schema"]["properties"]["rubrics"]["type"] == "array"
        assert srv.headers[0]["Authorization"] == "Bearer sk-teacher-abcdef"
    pool = load_pool(tmp_path / "candidates.json")
    assert res["source"] == "teacher" and len(pool.rubrics) == 20
    assert pool.provenance["teacher_model"] == "teacher-model" and pool.provenance["teacher_backend"] == "openai"
    assert "sk-teacher" not in (tmp_path / "candidates.json").read_text()


def _teacher_params(tmp_path, base_url: str) -> Path:
    import yaml

    from rubricflow.data.synthetic import build_synthetic_dataset

    data_dir = tmp_path / "data"
    build_synthetic_dataset(data_dir, ["counting"], {"train": 0, "val": 0, "test": 0, "calib": 2}, 0, 56)
    raw = yaml.safe_load(Path("params.yaml").read_text())
    raw["reports_dir"] = str(tmp_path / "reports")
    raw.setdefault("data", {})["out_dir"] = str(data_dir)
    raw.setdefault("rubrics", {}).update({"pool_path": str(tmp_path / "candidates.json"), "teacher": "openai"})
    raw.setdefault("judge", {})["openai"] = {"base_url": base_url, "model": "judge-model", "api_key_env": None,
                                             "secret_block": "judge-key"}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("entry", ["stage", "cli"])
def test_secret_block_reaches_the_judge_through_the_stage_entry_points(tmp_path, monkeypatch, entry):
    """judge.openai.secret_block set, no key in the environment: the `rubrics` stage (teacher = openai) gets the
    key from the entry point's secret resolver (a Prefect Secret block in production; a fake here), both when the
    stage is called as the Prefect task calls it and through the `rubricflow rubrics` command that dvc.yaml runs."""
    from rubricflow.config import load_config
    from rubricflow.registry import stage
    from rubricflow.testing.judge_server import LoopbackJudgeServer

    asked = []

    def fake_resolver(name: str) -> str:
        asked.append(name)
        return "sk-from-block-123"

    payload = teacher_json(rubric_texts(20))
    with LoopbackJudgeServer(content_fn=lambda body: payload) as srv:
        params = _teacher_params(tmp_path, srv.base_url)
        if entry == "stage":
            stage("rubrics")(load_config(params), track=False, secret_resolver=fake_resolver)
        else:
            from typer.testing import CliRunner

            import tasks.secrets
            from flows.cli import app

            monkeypatch.setattr(tasks.secrets, "load_secret", fake_resolver)
            res = CliRunner().invoke(app, ["--params", str(params), "--no-track", "rubrics"])
            assert res.exit_code == 0, res.output
        assert asked == ["judge-key"]
        assert srv.requests == 2  # preflight + the teacher call, the block resolved once for both
        assert [h["Authorization"] for h in srv.headers] == ["Bearer sk-from-block-123"] * 2
    assert len(load_pool(tmp_path / "candidates.json").rubrics) == 20


def test_secret_block_without_a_resolver_fails_naming_the_key(tmp_path):
    from rubricflow.config import load_config
    from rubricflow.judge import JudgeConfigError
    from rubricflow.registry import stage

    params = _teacher_params(tmp_path, "http://127.0.0.1:9")
    with pytest.raises(JudgeConfigError, match="judge.openai.secret_block='judge-key' is set but no secret resolver"):
        stage("rubrics")(load_config(params), track=False)
