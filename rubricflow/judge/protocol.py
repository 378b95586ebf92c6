"""The rubric contract (what a rubric, a verdict, a judgment and a parse are) and the judge protocol (what every judge
backend takes and returns). The three methods speak it: RuCL's generalized rubrics (tiered, applicability-aware,
judged by a backend), RoRo's query-specific rubrics (weighted criteria with score guidance, judged with a graded
score per criterion) and DeltaRubric's planned checklists (parsed into the same ``Parsed`` statuses); each method
keeps its own prompts and trained judges.

A ``Rubric`` is one criterion; a rubric set (a pool, a query-specific rubric) is a ``list[Rubric]``. Its weight
counts in a weighted score (``weighted_score``); RuCL weighs by tier instead and leaves it 1.

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
from typing import Any, Generic, Literal, Protocol, TypeVar

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
    weight: float = 1.0  # its share of a weighted score (RoRo's query-specific rubrics)
    guidance: str = ""  # how to score it (RoRo's query-specific score guidance)

    def to_dict(self) -> dict:
        """The fields as JSON; ``weight`` and ``guidance`` only where set, so a rubric without them is written as
        before they existed."""
        d = asdict(self)
        if d["weight"] == 1.0:
            del d["weight"]
        if not d["guidance"]:
            del d["guidance"]
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "rubric") -> "Rubric":
        """Build from a JSON object; a bad field raises ValueError naming ``where`` and the field."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object with id/text, got {type(d).__name__}")
        unknown = set(d) - {"id", "text", "tier", "category", "check", "provenance", "weight", "guidance"}
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
        weight = d.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
            raise ValueError(f"{where} {d['id']}: field `weight` must be a number >= 0, got {weight!r}")
        return cls(
            id=d["id"].strip(),
            text=d["text"].strip(),
            tier=tier,
            category=cat,
            check=check,
            provenance=str(d.get("provenance", "")),
            weight=float(weight),
            guidance=str(d.get("guidance", "")),
        )


@dataclass(frozen=True)
class Verdict:
    applicable: bool
    satisfied: bool | None  # None when not applicable
    rationale: str = ""
    score: float | None = None  # graded credit in [0, 1] where the judge gives one (RoRo); None: full credit

    @property
    def credit(self) -> float:
        """What it adds to a weighted score per unit weight: ``score`` (1 when ungraded) if satisfied, else 0."""
        if not (self.applicable and self.satisfied):
            return 0.0
        return 1.0 if self.score is None else float(self.score)

    def to_dict(self) -> dict:
        """The fields as JSON; ``score`` only where graded."""
        d = asdict(self)
        if d["score"] is None:
            del d["score"]
        return d


@dataclass
class Judgment:
    status: Status
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    reason: str | None = None  # why it failed / what was repaired
    raw: str | None = None  # the raw judge text, for audit
    missing: tuple[str, ...] = ()  # requested rubrics the judge gave no verdict for (a judgment that is not failed)
    score: float | None = None  # the method's aggregate of the verdicts (RoRo's process score); None: not computed

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
            "verdicts": {k: v.to_dict() for k, v in self.verdicts.items()},
        }


def weighted_score(rubrics: list[Rubric], verdicts: dict[str, Verdict]) -> tuple[float, list[str]]:
    """``sum weight * credit`` over ``rubrics`` and the rubrics without a verdict (which count 0)."""
    total, missing = 0.0, []
    for r in rubrics:
        v = verdicts.get(r.id)
        if v is None:
            missing.append(r.id)
            continue
        total += r.weight * v.credit
    return total, missing


T = TypeVar("T")


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A parse of model text under a method's output contract, with the judge layer's statuses: ``ok``,
    ``repaired`` (usable after tolerant repair, or with unusable parts dropped: ``reason`` says which) or
    ``failed`` (``value`` None, ``reason`` why)."""

    status: Status
    value: T | None = None
    reason: str | None = None
    raw: str | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def ok(self) -> bool:
        """Usable (``ok`` or ``repaired``)."""
        return self.status != "failed"


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
