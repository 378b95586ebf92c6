"""rubricflow's rubric judge as an MLflow GenAI scorer (``mlflow.genai.evaluate``).

::

    import mlflow
    from rubricflow.methods.rucl.integrations.mlflow import rubric_scorer
    from rubricflow.judge.config import JudgeConfig

    scorer = rubric_scorer(JudgeConfig(), "artifacts/rubrics/tiers.json")    # or a pool file, or a list of Rubric
    mlflow.genai.evaluate(data=rows, scorers=[scorer])

Each row is ``{"inputs": {"question": ..., "images": [...], "sample_id": ...}, "outputs": <response text>,
"expectations": {"answer": ..., "facts": {...}}}`` (``inputs`` may be the question string; ``outputs`` may be
``{"response": ...}``; ``facts`` may be a JSON string and is needed by the programmatic judge; ``images`` is a
list of paths relative to the scorer's ``image_root``, each refused unless it stays inside it and decodes as an
image, so no other local file reaches the judge). With a ``predict_fn``, its output is the response.

The scorer judges the row's response on every rubric with rubricflow's judge, built by ``make_judge`` from the
``judge`` section as in training (preflight, SQLite cache, failure budget), and returns MLflow ``Feedback``
assessments:

* ``<name>/<rubric id>``: ``"pass"``, ``"fail"`` or ``"not_applicable"`` (applicability-aware judging), with the
  judge's rationale and the rubric's tier and category as metadata;
* ``<name>/score``: the fraction of the applicable rubrics the response satisfies (``None`` when no rubric
  applies), and with tiered rubrics ``<name>/foundational`` and ``<name>/advanced`` the same per tier.

A failed judgment is an *error* assessment (``AssessmentError`` code ``JUDGE_FAILED`` with the judge's reason) on
every rubric and on the scores, never a ``"fail"`` or a 0; a rubric missing from a repaired judgment is an error
(``VERDICT_MISSING``) on that rubric, and on every score it would enter when the judge left it out
(``Judgment.missing``: a judgment answering one rubric "n/a" and leaving out the rest has no score, not "no rubric
applies"). MLflow leaves errors out of the aggregate metrics. When the failure
budget is exceeded (``judge.max_failed_frac``), the stage deadline passes or the judge is unavailable, the judge
raises and MLflow records the scorer error for that row; from then on the scorer judges no further row: every
later row raises the same error at once, without asking the judge (a judge that failed the budget would fail each
row again, each at its full request deadline).
Rows are judged one at a time (MLflow calls scorers from a thread pool; the judge's own concurrency serves one
call).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import AssessmentError, AssessmentSource, Feedback
from mlflow.genai.scorers import scorer

from rubricflow.data.adapters.images import checked_image
from rubricflow.judge.config import JudgeConfig
from rubricflow.judge.errors import JudgeDeadlineExceeded, JudgeError, JudgeFailureBudgetExceeded, JudgeUnavailable
from rubricflow.judge.factory import make_judge
from rubricflow.judge.programmatic import require_checks
from rubricflow.judge.protocol import JudgeRequest, Judgment, Rubric
from rubricflow.methods.rucl.rubrics.pool import load_pool
from rubricflow.methods.rucl.scoring import as_facts

PASS, FAIL, NOT_APPLICABLE = "pass", "fail", "not_applicable"
JUDGE_FAILED, VERDICT_MISSING = "JUDGE_FAILED", "VERDICT_MISSING"
STOPPING = (JudgeFailureBudgetExceeded, JudgeDeadlineExceeded, JudgeUnavailable)  # errors that stop the scorer


def load_rubrics(rubrics: Sequence[Rubric] | str | Path) -> list[Rubric]:
    """Rubrics as given, or read from a pool or tiers file (``rubricflow.methods.rucl.rubrics.pool.load_pool``:
    errors name the file and the field)."""
    if isinstance(rubrics, (str, Path)):
        out = list(load_pool(rubrics).rubrics)
    else:
        out = list(rubrics)
    if not out:
        raise ValueError(f"rubric scorer: no rubrics given ({rubrics!r})")
    ids = [r.id for r in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"rubric scorer: duplicate rubric ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return out


def _response(outputs: Any) -> str:
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, dict) and isinstance(outputs.get("response"), str):
        return outputs["response"]
    raise ValueError(f"outputs: expected the response text or {{'response': text}}, got {type(outputs).__name__}")


def build_request(inputs: Any, outputs: Any, expectations: Any, rubrics: Sequence[Rubric],
                  image_root: str | Path | None = None) -> JudgeRequest:
    """The judge request of one evaluation row (see the module docstring for the row's fields)."""
    inputs = {"question": inputs} if isinstance(inputs, str) else dict(inputs or {})
    if not isinstance(inputs.get("question"), str):
        raise ValueError("inputs: expected the question text or {'question': text, ...}")
    expectations = dict(expectations or {})
    raw = inputs.get("images") or []
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"inputs.images: expected a list of image paths, got {type(raw).__name__}")
    if raw and image_root is None:
        raise ValueError("inputs.images: the scorer has no image_root; image paths are read only inside it "
                         "(rubric_scorer(..., image_root=FOLDER))")
    # inside the root and decoding as an image, or refused: no other local file is ever sent to the judge
    images = [str(checked_image(Path(image_root), p, f"inputs.images[{i}]")) for i, p in enumerate(raw)]
    answer = expectations.get("answer")
    return JudgeRequest(
        sample_id=str(inputs.get("sample_id", "")), question=inputs["question"], response=_response(outputs),
        rubrics=list(rubrics), images=images, facts=as_facts(expectations.get("facts"), "expectations.facts"),
        answer=None if answer is None else str(answer),
    )


def verdict_value(judgment: Judgment, rubric_id: str) -> str | None:
    """``pass`` / ``fail`` / ``not_applicable`` of one rubric, or None when the judgment has no verdict on it."""
    v = judgment.verdicts.get(rubric_id)
    if v is None or judgment.failed:
        return None
    if not v.applicable:
        return NOT_APPLICABLE
    if v.satisfied is None:
        return None
    return PASS if v.satisfied else FAIL


def _groups(rubrics: Sequence[Rubric]) -> dict[str, list[str]]:
    """The rubric ids behind each score: ``score`` (all), and ``foundational`` / ``advanced`` when tiered."""
    groups: dict[str, list[str]] = {"score": [r.id for r in rubrics]}
    for tier in ("foundational", "advanced"):
        ids = [r.id for r in rubrics if r.tier == tier]
        if ids:
            groups[tier] = ids
    return groups


def rubric_scores(judgment: Judgment, rubrics: Sequence[Rubric]) -> dict[str, float]:
    """``{"score": S}`` (and ``foundational`` / ``advanced`` for tiered rubrics): satisfied / applicable over the
    rubrics with a verdict; NaN where none applies."""
    out = {}
    for key, ids in _groups(rubrics).items():
        vals = [verdict_value(judgment, i) for i in ids]
        applicable = [v for v in vals if v in (PASS, FAIL)]
        out[key] = sum(v == PASS for v in applicable) / len(applicable) if applicable else math.nan
    return out


def feedbacks(judgment: Judgment, rubrics: Sequence[Rubric], name: str, source: Any) -> list:
    """The MLflow ``Feedback`` assessments of one judgment (see the module docstring)."""
    def error(fb_name: str, code: str, message: str, metadata: dict | None = None):
        return Feedback(name=fb_name, error=AssessmentError(error_code=code, error_message=message), source=source,
                        metadata=metadata)

    out = []
    reason = judgment.reason or "the judge returned nothing usable"
    for r in rubrics:
        meta = {"tier": r.tier, "category": r.category, "status": judgment.status}
        fb_name = f"{name}/{r.id}"
        if judgment.failed:
            out.append(error(fb_name, JUDGE_FAILED, reason, meta))
            continue
        value = verdict_value(judgment, r.id)
        if value is None:
            out.append(error(fb_name, VERDICT_MISSING, f"the judgment has no verdict on rubric {r.id}", meta))
            continue
        out.append(Feedback(name=fb_name, value=value, rationale=judgment.verdicts[r.id].rationale or None,
                            source=source, metadata=meta))
    groups = _groups(rubrics)
    for key, s in rubric_scores(judgment, rubrics).items():
        fb_name = f"{name}/{key}"
        left_out = [i for i in groups[key] if i in judgment.missing]
        if judgment.failed:
            out.append(error(fb_name, JUDGE_FAILED, reason))
        elif left_out:
            out.append(error(fb_name, VERDICT_MISSING,
                             f"the judge left out rubric(s) {', '.join(left_out)}: no {key} without their verdicts"))
        elif math.isnan(s):
            out.append(Feedback(name=fb_name, value=None, rationale="no rubric applies", source=source))
        else:
            out.append(Feedback(name=fb_name, value=float(s), source=source))
    return out


def rubric_scorer(
    judge_cfg: JudgeConfig,
    rubrics: Sequence[Rubric] | str | Path,
    *,
    name: str = "rubricflow",
    judge: Any = None,
    secret_resolver: Callable[[str], str] | None = None,
    image_root: str | Path | None = None,
):
    """An ``mlflow.genai`` scorer judging each row on ``rubrics`` (a list, or a pool / tiers file) with the judge
    of ``judge_cfg`` (``make_judge``: preflight now, cache, failure budget); ``judge`` replaces it (tests, or a
    judge already built). See the module docstring for the rows and the assessments."""
    rubric_list = load_rubrics(rubrics)
    if judge is None:
        if judge_cfg.backend == "programmatic":
            require_checks(rubric_list)
        judge = make_judge(judge_cfg, secret_resolver, image_root=image_root)
    source = AssessmentSource(source_type="CODE" if judge.name == "programmatic" else "LLM_JUDGE",
                              source_id=f"rubricflow:{judge.name}:{judge.model_id}")
    lock = threading.Lock()
    tripped: list[JudgeError] = []  # the error that stopped the judge; later rows raise it without a call

    def rubricflow_rubrics(inputs, outputs, expectations) -> list:
        request = build_request(inputs, outputs, expectations, rubric_list, image_root)
        with lock:
            if tripped:
                e = tripped[0]
                raise type(e)(f"{e}; raised at an earlier row: no further rows are judged") from None
            try:
                (judgment,) = judge.judge([request])
            except STOPPING as e:
                tripped.append(e)
                raise
        return feedbacks(judgment, rubric_list, name, source)

    return scorer(rubricflow_rubrics, name=name,
                  description=f"rubricflow rubric judge ({judge.name}) on {len(rubric_list)} rubrics")
