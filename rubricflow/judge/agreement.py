"""How far a judge agrees with reference labels: per-rubric agreement and Cohen's kappa, as an evaluation.

A *labelled set* is a JSONL file, one judged response per line::

    {"sample_id": "arith-3#bare", "question": "...", "response": "\\\\boxed{20}", "answer": "20",
     "facts": {...}, "images": [], "labels": {"W04": "fail", "W11": "pass", "W06": "n/a"}}

``labels`` holds the reference verdict of each rubric (``pass``, ``fail`` or ``n/a``): human labels, or those of a
reference judge (:func:`write_labelled` writes the programmatic judge's; :func:`probe_requests` makes responses
with known flaws from a data set's facts). ``answer``, ``facts`` and ``images`` are optional (the programmatic judge
needs ``facts``). :func:`evaluate_agreement` judges every line with a judge backend and compares, per rubric, over
the lines both judged (a failed judgment or a rubric the judge left out is not compared, and counted):

* ``agree``: the fraction of equal verdicts (same applicability and, when applicable, same satisfaction);
* ``majority``: the share of the reference's most frequent verdict (a judge always answering it reaches it);
* ``kappa``: Cohen's kappa over the three verdicts (scikit-learn's ``cohen_kappa_score``): 1 for perfect
  agreement, 0 for chance agreement given both judges' verdict frequencies (e.g. a judge that always says
  ``pass``), None when both give one and the same verdict throughout (undefined);
* ``confusion``: counts of ``reference->judge`` verdicts.

``overall`` pools every (line, rubric) pair. :func:`agreement_metrics` flattens a report into MLflow metrics and
:func:`log_agreement` logs it to a tracking run (``rubricflow judge-agreement`` does both).
"""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rubricflow.data.traces import render_trace
from rubricflow.judge.budget import check_failure_budget, failure_summary
from rubricflow.judge.errors import JudgeFailureBudgetExceeded
from rubricflow.judge.protocol import JudgeRequest, Judgment, Rubric, Verdict, status_counts

LABELS = ("pass", "fail", "n/a")
KINDS = ("gold", "wrong_step", "bare", "wrong_answer")


# ----------------------------------------------------------------------------------------------------------------
# verdicts as labels


def verdict_label(v: Verdict | None) -> str | None:
    """``pass`` / ``fail`` / ``n/a`` of a verdict; None for no verdict (or an applicable one without satisfaction)."""
    if v is None:
        return None
    if not v.applicable:
        return "n/a"
    if v.satisfied is None:
        return None
    return "pass" if v.satisfied else "fail"


def label_verdict(label: str) -> Verdict:
    return Verdict(False, None) if label == "n/a" else Verdict(True, label == "pass")


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of (reference, judge) label pairs; None when undefined (no pairs, or chance agreement 1)."""
    if not pairs:
        return None
    from sklearn.metrics import cohen_kappa_score

    ref, got = [a for a, _ in pairs], [b for _, b in pairs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the undefined case is reported as None below
        k = float(cohen_kappa_score(ref, got, labels=list(LABELS), replace_undefined_by=math.nan))
    return None if math.isnan(k) else k


def _pairs(reference: Sequence[Judgment], judged: Sequence[Judgment], rid: str) -> list[tuple[str, str]]:
    out = []
    for r, j in zip(reference, judged):
        if r.failed or j.failed:
            continue
        a, b = verdict_label(r.verdicts.get(rid)), verdict_label(j.verdicts.get(rid))
        if a is not None and b is not None:
            out.append((a, b))
    return out


def _row(pairs: list[tuple[str, str]]) -> dict:
    n = len(pairs)
    major = Counter(a for a, _ in pairs).most_common(1)
    return {
        "n": n,
        "agree": sum(a == b for a, b in pairs) / n if n else None,
        "majority": major[0][1] / n if n else None,
        "kappa": cohen_kappa(pairs),
        "confusion": dict(Counter(f"{a}->{b}" for a, b in pairs)),
    }


def agreement(reference: Sequence[Judgment], judged: Sequence[Judgment], rubric_ids: Sequence[str]) -> dict[str, dict]:
    """Per rubric: ``n``, ``agree``, ``majority``, ``kappa`` and ``confusion`` (see the module docstring)."""
    if len(reference) != len(judged):
        raise ValueError(f"agreement: {len(reference)} reference judgments but {len(judged)} judged")
    return {rid: _row(_pairs(reference, judged, rid)) for rid in rubric_ids}


def overall_agreement(reference: Sequence[Judgment], judged: Sequence[Judgment],
                      rubric_ids: Sequence[str]) -> dict:
    """The same numbers over every (response, rubric) pair pooled."""
    return _row([p for rid in rubric_ids for p in _pairs(reference, judged, rid)])


# ----------------------------------------------------------------------------------------------------------------
# labelled sets


def probe_response(kind: str, facts: dict, answer: str) -> str | None:
    """A response with a known flaw, written from a problem's facts: ``gold`` (the reference trace), ``wrong_step``
    (the first computed value off by one, right answer), ``bare`` (only ``\\boxed{answer}``), ``wrong_answer`` (the
    reference trace with a boxed answer one too high). None when the problem cannot carry that flaw (no computed
    value, or an answer that is not an integer)."""
    gold = render_trace(facts, answer)
    if kind == "gold":
        return gold
    if kind == "bare":
        return f"\\boxed{{{answer}}}"
    if kind == "wrong_answer":
        try:
            wrong = int(answer) + 1
        except (TypeError, ValueError):
            return None
        return re.sub(r"\\boxed\{[^{}]*\}", lambda m: f"\\boxed{{{wrong}}}", gold)
    if kind == "wrong_step":
        steps = facts.get("intermediate") or []
        if not steps:
            return None
        key, value = steps[0]
        return gold.replace(f"{key} = {value}", f"{key} = {value + 1}", 1)
    raise ValueError(f"unknown response kind {kind!r}; expected one of {KINDS}")


def probe_requests(samples: Sequence[Any], kinds: Sequence[str], rubrics: Sequence[Rubric]) -> list[JudgeRequest]:
    """One request per sample and kind (``<sample id>#<kind>``), responses from :func:`probe_response`; a kind a
    problem cannot carry is left out for that problem."""
    out = []
    for s in samples:
        for kind in kinds:
            response = probe_response(kind, s.facts, s.answer)
            if response is not None:
                out.append(JudgeRequest(f"{s.id}#{kind}", s.question, response, list(rubrics), facts=s.facts,
                                        answer=s.answer))
    return out


def write_labelled(path: str | Path, requests: Sequence[JudgeRequest], reference: Sequence[Judgment]) -> int:
    """Write the labelled set of ``requests`` with the verdicts of ``reference`` as labels; a failed reference
    judgment (or a rubric without a verdict) is left out. Returns the lines written."""
    from rubricflow.util.io import write_jsonl

    rows = []
    for req, j in zip(requests, reference, strict=True):
        if j.failed:
            continue
        labels = {r.id: verdict_label(j.verdicts.get(r.id)) for r in req.rubrics}
        labels = {k: v for k, v in labels.items() if v is not None}
        if labels:
            rows.append({"sample_id": req.sample_id, "question": req.question, "response": req.response,
                         "answer": req.answer, "facts": req.facts, "images": list(req.images), "labels": labels})
    write_jsonl(Path(path), rows, ensure_ascii=False)
    return len(rows)


def _labelled_images(value: Any, root: Path, where: str) -> list[str]:
    """The images of a labelled line as absolute paths: a list of paths, each relative, resolving (symlinks
    followed) inside ``root`` and decoding as an image. A judge sends every image it is given to its server, so a
    path naming a file outside the set's folder (``/home/.../.ssh/id_rsa``, ``../../.env``) or a file that is no
    image is refused here, naming the line and the field, before anything is sent."""
    from rubricflow.data.adapters.images import checked_image

    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: field `images` must be a list of image paths, got {type(value).__name__} "
                         f"{value!r:.80}")
    return [str(checked_image(root, rel, f"{where}: field `images[{k}]`")) for k, rel in enumerate(value)]


def read_labelled(path: str | Path, rubrics: Mapping[str, Rubric],
                  image_root: str | Path | None = None) -> tuple[list[JudgeRequest], list[Judgment]]:
    """The requests and reference judgments of a labelled set; a bad line raises ValueError naming the file, the
    line and the field. Image paths are relative to ``image_root`` (default: the set's folder) and must stay inside
    it and decode as images; the requests carry them as absolute paths."""
    p = Path(path)
    root = Path(image_root) if image_root is not None else p.parent
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no labelled set (a JSONL file, one judged response per line)")
    requests, reference = [], []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object, got {type(row).__name__}")
        for key in ("sample_id", "question", "response"):
            if not isinstance(row.get(key), str):
                raise ValueError(f"{where}: field `{key}` must be a string, got {row.get(key)!r}")
        labels = row.get("labels")
        if not isinstance(labels, dict) or not labels:
            raise ValueError(f"{where}: field `labels` must be a non-empty object of rubric id -> pass/fail/n/a")
        for rid, lab in labels.items():
            if rid not in rubrics:
                raise ValueError(f"{where}: field `labels.{rid}`: no such rubric in the pool (ids: {sorted(rubrics)})")
            if lab not in LABELS:
                raise ValueError(f"{where}: field `labels.{rid}`: expected one of {LABELS}, got {lab!r}")
        facts = row.get("facts") or {}
        if not isinstance(facts, dict):
            raise ValueError(f"{where}: field `facts` must be an object, got {type(facts).__name__}")
        answer = row.get("answer")
        images = _labelled_images(row.get("images"), root, where)
        requests.append(JudgeRequest(row["sample_id"], row["question"], row["response"],
                                     [rubrics[rid] for rid in labels], images, facts,
                                     None if answer is None else str(answer)))
        reference.append(Judgment("ok", {rid: label_verdict(lab) for rid, lab in labels.items()}))
    if not requests:
        raise ValueError(f"{p}: the labelled set is empty")
    return requests, reference


# ----------------------------------------------------------------------------------------------------------------
# the evaluation


def evaluate_agreement(judge, requests: Sequence[JudgeRequest], reference: Sequence[Judgment],
                       max_failed_frac: float | None = None) -> dict[str, Any]:
    """Judge ``requests`` with ``judge`` (one batch call) and compare with ``reference``: statuses, wall time, the
    per-rubric table, the pooled numbers and the judgments.

    ``max_failed_frac`` (``judge.max_failed_frac``; None: not checked) is checked on the whole set, however small
    (the judge's own budget starts at 8 judgments); and a set where no verdict could be compared (every judgment
    failed or left its rubrics out) raises ``JudgeFailureBudgetExceeded`` whatever the budget: its report would
    hold no number."""
    t0 = time.monotonic()
    judged = judge.judge(list(requests))
    wall = time.monotonic() - t0
    if len(judged) != len(requests):
        raise RuntimeError(f"judge returned {len(judged)} judgments for {len(requests)} requests")
    where = f"judge-agreement ({getattr(judge, 'name', type(judge).__name__)}:{getattr(judge, 'model_id', '')})"
    if max_failed_frac is not None:
        check_failure_budget(list(judged), max_failed_frac, where)
    ids = list(dict.fromkeys(r.id for req in requests for r in req.rubrics))
    if requests and not _row([p for rid in ids for p in _pairs(reference, judged, rid)])["n"]:
        raise JudgeFailureBudgetExceeded(f"{where}: no verdict to compare: {failure_summary(list(judged))}")
    reasons = Counter((j.reason or "")[:120] for j in judged if j.failed).most_common(3)
    return {
        "judge": f"{getattr(judge, 'name', type(judge).__name__)}:{getattr(judge, 'model_id', '')}",
        "n_requests": len(requests),
        "statuses": status_counts(judged),
        "incomplete": sum(j.incomplete for j in judged),  # not failed, but a requested rubric left out
        "wall_s": round(wall, 1),
        "agreement": agreement(reference, judged, ids),
        "overall": overall_agreement(reference, judged, ids),
        "top_failure_reasons": [f"{c}x {r}" for r, c in reasons],
        "judgments": [{"sample_id": r.sample_id, **j.to_dict(), "raw": j.raw} for r, j in zip(requests, judged)],
    }


def agreement_metrics(report: Mapping[str, Any]) -> dict[str, float]:
    """MLflow metrics of a report: ``agree``, ``kappa``, ``majority``, ``n`` (pooled), ``failed`` (judgments), and
    ``<rubric id>/agree``, ``/kappa``, ``/majority``, ``/n`` per rubric; an undefined value is left out."""
    out: dict[str, float] = {"failed": float(report["statuses"]["failed"])}
    rows = [("", report["overall"])] + [(f"{rid}/", row) for rid, row in report["agreement"].items()]
    for prefix, row in rows:
        for key in ("agree", "kappa", "majority", "n"):
            if row.get(key) is not None:
                out[f"{prefix}{key}"] = float(row[key])
    return out


def log_agreement(run, report: Mapping[str, Any], labels_path: str | Path | None = None) -> None:
    """Log a report to a tracking run (``rubricflow.tracking.StageRun``): the labelled set as an evaluation input,
    :func:`agreement_metrics`, and the report without the judgments as ``judge_agreement.json``."""
    if labels_path is not None:
        run.log_input(labels_path, context="evaluation")
    run.log_metrics(agreement_metrics(report))
    run.log_dict({k: v for k, v in report.items() if k != "judgments"}, "judge_agreement.json")

