"""Teacher-written candidate pools: K generalized rubrics in O(1) calls (RuCL section 3.2, appendix D).

A teacher is any backend with ``generate(system, user, schema=None) -> str`` (the openai and local judges).
One prompt asks for all K candidates across the four categories; if fewer than K distinct valid ones come back,
a follow-up call asks for the missing number (listing the ones already written), at most ``max_calls`` calls in
total, never one per sample. Output is parsed tolerantly (``rubricflow.judge.tolerant_json``: code fences,
prose around the JSON, json-repair); categories are matched loosely
("Visual faithfulness" -> visual_faithfulness); invalid items are dropped with a note, duplicates removed, ids
reassigned ``T01..TK``. Teacher rubrics have no programmatic ``check``: judge them with an LLM judge.
"""

from __future__ import annotations

import logging
from typing import Protocol

from rubricflow.judge.protocol import CATEGORIES, Rubric
from rubricflow.judge.tolerant_json import load_json
from rubricflow.methods.rucl.rubrics.pool import RubricPool, dedupe, normalise_text

log = logging.getLogger("rubricflow.methods.rucl.rubrics.teacher")

TEACHER_PROMPT_VERSION = "teacher-v1"

TEACHER_SYSTEM = (
    "You design grading rubrics for the reasoning of multimodal models. A rubric is one short, checkable "
    "criterion about a response's reasoning, general enough to apply to many questions of a task family "
    "(never about one specific question). Reply with JSON only."
)

TEACHER_SCHEMA = {
    "type": "object",
    "properties": {
        "rubrics": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "category": {"type": "string", "enum": list(CATEGORIES)},
                    "text": {"type": "string"},
                },
                "required": ["id", "category", "text"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["rubrics"],
    "additionalProperties": False,
}


class Teacher(Protocol):
    name: str
    model_id: str

    def generate(self, system: str, user: str, schema: dict | None = None, max_tokens: int | None = None) -> str: ...


def teacher_prompt(k: int, examples: list[str], existing: list[str] | None = None) -> str:
    ex = "\n".join(f"- {q}" for q in examples) or "- (no examples given)"
    have = ""
    if existing:
        have = "\nAlready written (do not repeat or rephrase these):\n" + "\n".join(f"- {t}" for t in existing) + "\n"
    return (
        f"Write {k} generalized rubrics for grading step-by-step answers to visual reasoning questions like:\n"
        f"{ex}\n{have}\n"
        "Cover all four categories, roughly evenly: visual_faithfulness (what is read from the image is right), "
        "logical_coherence (steps follow from each other and lead to the answer), constraint_satisfaction "
        "(the answer has the requested form), mathematical_accuracy (computations are right). Each rubric must be "
        "one sentence that a grader can answer yes/no, and may not apply to every question.\n"
        'Return {"rubrics": [{"id": "T01", "category": "<category>", "text": "<rubric>"}, ...]}.'
    )


def _category(value) -> str | None:
    if not isinstance(value, str):
        return None
    key = normalise_text(value).replace(" ", "_")
    return key if key in CATEGORIES else None


def parse_teacher_rubrics(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Raw teacher text -> ([(category, text)], notes about dropped items)."""
    obj, status, why = load_json(text)
    if status == "failed":
        return [], [f"unparseable teacher output ({'; '.join(why)})"]
    notes: list[str] = []
    items = obj.get("rubrics", obj.get("candidates")) if isinstance(obj, dict) else obj
    if not isinstance(items, list):
        return [], ["no rubric list in teacher output"]
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            notes.append(f"item {i}: not an object")
            continue
        cat = _category(it.get("category"))
        txt = it.get("text") or it.get("rubric") or it.get("description")
        if cat is None:
            notes.append(f"item {i}: unknown category {it.get('category')!r}")
        elif not isinstance(txt, str) or len(txt.split()) < 3:
            notes.append(f"item {i}: missing or too short text")
        else:
            out.append((cat, " ".join(txt.split())))
    return out, notes


def generate_pool(teacher: Teacher, k: int, examples: list[str], max_calls: int = 3) -> RubricPool:
    """K distinct valid candidates in at most ``max_calls`` teacher calls; raises RuntimeError if fewer."""
    got: list[tuple[str, str]] = []
    notes: list[str] = []
    calls = 0
    while len(got) < k and calls < max_calls:
        need = k - len(got)
        raw = teacher.generate(TEACHER_SYSTEM, teacher_prompt(need, examples, [t for _, t in got]), TEACHER_SCHEMA)
        calls += 1
        items, n = parse_teacher_rubrics(raw)
        notes += [f"call {calls}: {x}" for x in n]
        seen = {normalise_text(t) for _, t in got}
        for cat, txt in items:
            if normalise_text(txt) in seen:
                notes.append(f"call {calls}: duplicate dropped: {txt[:40]!r}")
                continue
            seen.add(normalise_text(txt))
            got.append((cat, txt))
    if len(got) < k:
        raise RuntimeError(
            f"teacher {teacher.name}:{teacher.model_id} gave {len(got)} valid distinct rubrics in {calls} call(s), "
            f"{k} needed (rubrics.teacher_max_calls={max_calls}); notes: {notes[:10]}"
        )
    label = f"teacher {teacher.name}:{teacher.model_id} prompt {TEACHER_PROMPT_VERSION}"
    rubrics = [Rubric(f"T{i:02d}", txt, category=cat, provenance=label) for i, (cat, txt) in enumerate(got[:k], 1)]
    rubrics, _ = dedupe(rubrics)
    for n in notes:
        log.info("teacher: %s", n)
    return RubricPool(
        rubrics,
        provenance={
            "source": "teacher",
            "teacher_backend": teacher.name,
            "teacher_model": teacher.model_id,
            "prompt_version": TEACHER_PROMPT_VERSION,
            "calls": calls,
            "notes": notes,
        },
        version=f"teacher-{TEACHER_PROMPT_VERSION}",
    )
