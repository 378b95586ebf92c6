"""The problem sets of ``roro.task``: synthetic problems per split, or GSM8K-style rows as the test set.

``problems(rc)`` gives ``sft`` (step-model training), ``train`` (trajectories, training pairs, router GRPO), ``val``
(held-out pairs: the Judge's selection) and ``test`` (the routing evaluation). ``read_gsm8k`` turns GSM8K-style
rows into problems whose outcome is checkable and whose steps are not (``task.Problem``).
"""

from __future__ import annotations

import re
from pathlib import Path

from rubricflow.methods.roro.config import RoRoConfig
from rubricflow.methods.roro.env.task import FINAL_NUMBER, FINAL_PREFIX, Problem, make_problems
from rubricflow.pipeline.splits import check_split
from rubricflow.util.io import iter_jsonl


def problems(rc: RoRoConfig) -> dict[str, list[Problem]]:
    """Problems per split: ``sft`` (step-model training; no question shared with the others), ``train``,
    ``val`` (held-out pairs) and ``test`` (held-out routing evaluation; GSM8K rows when task.source=gsm8k)."""
    t = rc.task
    kw = dict(min_ops=t.min_ops, max_ops=t.max_ops, max_value=t.max_value, mul_max=t.mul_max, arg_max=t.arg_max,
              answer=t.answer)
    out = {s: make_problems(n, s, t.seed, **kw) for s, n in (("train", t.n_train), ("val", t.n_val),
                                                              ("test", t.n_test))}
    if t.source == "gsm8k":
        out["test"] = read_gsm8k(t.gsm8k_path, split="test", limit=t.n_test)
    held = {p.question for s in ("train", "val", "test") for p in out[s]}
    out["sft"] = [p for p in make_problems(t.n_sft, "sft", t.seed, **kw) if p.question not in held]
    return HeldOutGuard(out)


class HeldOutGuard(dict):
    """The problem sets; taking ``["test"]`` goes through the test-split guard (rubricflow.pipeline.splits). The SFT set
    is still filtered against the test questions above, so no test question leaks into step-model training."""

    def __getitem__(self, split: str) -> list[Problem]:
        check_split(split, "RoRo problems")
        return super().__getitem__(split)


# ----------------------------------------------------------------------------------------------------------------
# GSM8K-style rows


class DataFormatError(ValueError):
    """A data row does not have the expected shape; the message names file, line and field."""


_GSM_FINAL = re.compile(FINAL_NUMBER)
_CALC = re.compile(r"<<[^>]*>>")


def read_gsm8k(path: str | Path, split: str = "test", limit: int | None = None) -> list[Problem]:
    """Read a GSM8K-style jsonl (``question``, ``answer`` ending ``#### N``) into problems.

    Reference steps are the answer's lines (calculator annotations ``<<...>>`` removed) plus ``#### N``. Raises
    DataFormatError naming the file and line for a row that is not JSON, lacks a field or has no ``#### N``.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: GSM8K-style jsonl not found")
    out: list[Problem] = []
    for lineno, row in iter_jsonl(p, error=DataFormatError):
        for key in ("question", "answer"):
            if not isinstance(row.get(key), str):
                raise DataFormatError(f"{p}:{lineno}: field `{key}` missing or not a string")
        m = _GSM_FINAL.search(row["answer"].strip())
        if not m:
            raise DataFormatError(
                f"{p}:{lineno}: field `answer` does not end with '#### N' (a final number); got "
                f"{row['answer'][-40:]!r}"
            )
        final = m.group(1).replace(",", "")
        body = row["answer"].strip()[: m.start()].strip()
        steps = [_CALC.sub("", s).strip() for s in body.splitlines() if s.strip()]
        out.append(
            Problem(
                id=str(row.get("id", f"{p.stem}-{lineno:05d}")), question=row["question"].strip(), answer=final,
                split=split, source="gsm8k", reference_steps=steps + [f"{FINAL_PREFIX} {final}"],
            )
        )
        if limit is not None and len(out) >= limit:
            break
    return out
