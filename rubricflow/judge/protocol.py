"""The judge protocol: what every judge backend takes and returns.

A judge sees a question, the image reference(s), a response and a list of rubrics, and returns per rubric
whether it is *applicable* to this response and, only if so, whether it is *satisfied* (RuCL's
applicability-aware judging). Every call ends in one of three statuses:

* ``ok``        the output parsed under the strict schema,
* ``repaired``  it parsed only after tolerant repair (code fences, prose, trailing commas, spelling variants),
* ``failed``    nothing usable (with ``reason``): its rubrics are *missing*, never scored 0 or 0.5.

A rubric absent from the judge's output is absent from ``verdicts`` (never defaulted to unsatisfied) and listed in
``missing`` (the requested rubrics without a verdict, set by the parser and the cache): such a judgment is
``incomplete``, and counts against the failure budget like a failed one (``budget``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

Status = Literal["ok", "repaired", "failed"]
Tier = Literal["foundational", "advanced", "candidate"]
STATUSES: tuple[str, ...] = ("ok", "repaired", "failed")
TIERS: tuple[str, ...] = ("foundational", "advanced", "candidate")
CATEGORIES: tuple[str, ...] = (
    "visual_faithfulness",
    "logical_coherence",
    "constraint_satisfaction",
    "mathematical_accuracy",
)


@dataclass(frozen=True)
class Rubric:
    id: str
    text: str
    tier: Tier = "candidate"
    category: str = ""  # visual_faithfulness | logical_coherence | constraint_satisfaction | mathematical_accuracy
    check: str | None = None  # name of the programmatic checker, when one exists
    provenance: str = ""  # where it came from: "default pool v1", "teacher <model> prompt <version>", ...

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "rubric") -> "Rubric":
        """Build from a JSON object; a bad field raises ValueError naming ``where`` and the field."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object with id/text, got {type(d).__name__}")
        unknown = set(d) - {"id", "text", "tier", "category", "check", "provenance"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        for key in ("id", "text"):
            if not isinstance(d.get(key), str) or not d[key].strip():
                raise ValueError(f"{where}: field `{key}` must be a non-empty string, got {d.get(key)!r}")
        tier = d.get("tier", "candidate")
        if tier not in TIERS:
            raise ValueError(f"{where} {d['id']}: field `tier` must be one of {TIERS}, got {tier!r}")
        cat = d.get("category", "")
        if cat and cat not in CATEGORIES:
            raise ValueError(f"{where} {d['id']}: field `category` must be one of {CATEGORIES}, got {cat!r}")
        check = d.get("check")
        if check is not None and not isinstance(check, str):
            raise ValueError(f"{where} {d['id']}: field `check` must be a string or null, got {check!r}")
        return cls(
            id=d["id"].strip(),
            text=d["text"].strip(),
            tier=tier,
            category=cat,
            check=check,
            provenance=str(d.get("provenance", "")),
        )


@dataclass(frozen=True)
class Verdict:
    applicable: bool
    satisfied: bool | None  # None when not applicable
    rationale: str = ""


@dataclass
class Judgment:
    status: Status
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    reason: str | None = None  # why it failed / what was repaired
    raw: str | None = None  # the raw judge text, for audit
    missing: tuple[str, ...] = ()  # requested rubrics the judge gave no verdict for (a judgment that is not failed)

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def incomplete(self) -> bool:
        """Not failed, but without a verdict on some requested rubric."""
        return not self.failed and bool(self.missing)

    @property
    def counts_as_failed(self) -> bool:
        """What the failure budget counts: a failed judgment, or one that left out a requested rubric."""
        return self.failed or bool(self.missing)

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "reason": self.reason,
            "verdicts": {k: asdict(v) for k, v in self.verdicts.items()},
        }


def failed(reason: str, raw: str | None = None) -> Judgment:
    """A failed judgment: its rubrics are missing (never scored)."""
    return Judgment(status="failed", verdicts={}, reason=reason, raw=raw)


def status_counts(judgments: list[Judgment]) -> dict[str, int]:
    """``{"ok": n, "repaired": n, "failed": n}`` (all three keys, for logging)."""
    out = {s: 0 for s in STATUSES}
    for j in judgments:
        out[j.status] += 1
    return out


@dataclass
class JudgeRequest:
    sample_id: str
    question: str
    response: str
    rubrics: list[Rubric]
    images: list[str] = field(default_factory=list)  # absolute or dataset-relative image paths
    facts: dict[str, Any] = field(default_factory=dict)  # ground truth (programmatic judge only)
    answer: str | None = None  # reference answer (programmatic judge only)

    def content_hash(self) -> str:
        """Hash of everything a judge sees about this sample except the rubric list (for the cache key)."""
        h = hashlib.sha256()
        h.update(json.dumps([self.question, self.response, self.answer], ensure_ascii=False).encode())
        h.update(json.dumps(self.facts, sort_keys=True, default=str).encode())
        for p in self.images:
            try:
                with open(p, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
            except OSError:
                h.update(str(p).encode())
        return h.hexdigest()


class JudgeBackend(Protocol):
    """Every backend: ``name``, ``model_id``, ``prompt_version`` (cache key parts), a preflight and a batch call."""

    name: str
    model_id: str
    prompt_version: str

    def preflight(self) -> None:
        """One cheap check that the judge can answer at all (called at stage start by ``make_judge``). Raises
        ``JudgeConfigError`` (rejected key, unknown model, missing key) or ``JudgeUnavailable`` (no usable
        server), naming backend, URL, model and the server's answer; a no-op where there is nothing to check."""
        ...

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        """One Judgment per request, in order. Never raises for a per-sample failure: returns status=failed."""
        ...
