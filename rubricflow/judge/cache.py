"""Content-addressed SQLite cache of judge verdicts.

One row per (backend, server, model id, prompt version, rubric id, sample hash) where the sample hash is
``JudgeRequest.content_hash()`` (question, response, reference answer, facts, image bytes). The rubric *text*
is part of the key too (a rubric id whose wording changed is a different rubric). The server is the backend's
``server_id`` (the openai backend's base URL): a model name says nothing about what answers under it, so verdicts
of one server never answer for another. Only verdicts of ``ok`` and
``repaired`` judgments are stored: a failed judgment, or a rubric the judge left out, is asked again on the next
run ("a rerun retries only the failures"). ``CachedJudge`` wraps any backend: it answers what it can from the
cache and sends each request to the backend with only its uncached rubrics (a fully cached request makes no
backend call at all). Rationales are stored as the backend returned them after its ``scrub_judgment`` (the
openai backend replaces its API key by ``***``), so a judge server echoing the key cannot put it in the file.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rubricflow.judge.protocol import JudgeBackend, JudgeRequest, Judgment, Verdict

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    model_id TEXT NOT NULL,
    prompt_version TEXT NOT NULL,
    rubric_id TEXT NOT NULL,
    sample_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    applicable INTEGER NOT NULL,
    satisfied INTEGER,
    rationale TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def cache_key(
    backend: str, model_id: str, prompt_version: str, rubric_id: str, rubric_text: str, sample_hash: str,
    server: str = "",
) -> str:
    """The row key; ``server`` (a backend's ``server_id``) is part of it when the backend has one."""
    parts = [
        backend,
        model_id,
        prompt_version,
        rubric_id,
        hashlib.sha256(rubric_text.encode()).hexdigest(),
        sample_hash,
    ]
    if server:
        parts.append(f"server={server}")
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


class JudgeCache:
    """SQLite store of verdicts (thread-safe; one connection guarded by a lock)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)

    def get_many(self, keys: list[str]) -> dict[str, tuple[str, Verdict]]:
        out: dict[str, tuple[str, Verdict]] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                q = f"SELECT key, status, applicable, satisfied, rationale FROM verdicts WHERE key IN ({marks})"
                for key, status, a, s, r in self._db.execute(q, chunk):
                    out[key] = (status, Verdict(bool(a), None if s is None else bool(s), r))
        return out

    def put_many(self, rows: list[tuple[str, str, str, str, str, str, str, Verdict]]) -> None:
        """rows: (key, backend, model_id, prompt_version, rubric_id, sample_hash, status, verdict)."""
        now = time.time()
        vals = [
            (
                k,
                b,
                m,
                p,
                rid,
                h,
                st,
                int(v.applicable),
                None if v.satisfied is None else int(v.satisfied),
                v.rationale,
                now,
            )
            for k, b, m, p, rid, h, st, v in rows
        ]
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO verdicts VALUES (?,?,?,?,?,?,?,?,?,?,?)", vals)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass
class CacheStats:
    requests: int = 0  # requests seen
    rubric_hits: int = 0  # verdicts answered from the cache
    rubric_misses: int = 0  # verdicts asked of the backend
    backend_requests: int = 0  # requests forwarded to the backend (0 on a fully cached rerun)
    stored: int = 0  # verdicts written


class CachedJudge:
    """Any JudgeBackend + a JudgeCache: same interface, cache-first."""

    def __init__(self, backend: JudgeBackend, cache: JudgeCache):
        self.backend = backend
        self.cache = cache
        self.name = backend.name
        self.model_id = backend.model_id
        self.prompt_version = backend.prompt_version
        self.server_id = getattr(backend, "server_id", "") or ""
        self.stats = CacheStats()

    def _plan(self, requests: list[JudgeRequest]):
        hashes = [r.content_hash() for r in requests]
        keys = [
            [cache_key(self.name, self.model_id, self.prompt_version, rb.id, rb.text, h, server=self.server_id)
             for rb in r.rubrics]
            for r, h in zip(requests, hashes)
        ]
        found = self.cache.get_many([k for ks in keys for k in ks])
        todo: list[tuple[int, JudgeRequest]] = []
        for i, (r, ks) in enumerate(zip(requests, keys)):
            missing = [rb for rb, k in zip(r.rubrics, ks) if k not in found]
            self.stats.rubric_hits += len(ks) - len(missing)
            self.stats.rubric_misses += len(missing)
            if missing:
                todo.append((i, replace(r, rubrics=missing)))
        self.stats.requests += len(requests)
        self.stats.backend_requests += len(todo)
        return hashes, keys, found, todo

    def _merge(self, requests, hashes, keys, found, todo, fresh: list[Judgment]) -> list[Judgment]:
        # a backend holding a secret (the openai one) scrubs it from what it returns; scrubbing again here keeps
        # a rationale echoing the API key out of the cache file even if a wrapper skipped the backend's pass
        scrub = getattr(self.backend, "scrub_judgment", None)
        if callable(scrub):
            fresh = [scrub(j) for j in fresh]
        by_index = {i: j for (i, _), j in zip(todo, fresh)}
        rows = []
        out: list[Judgment] = []
        for i, (r, h, ks) in enumerate(zip(requests, hashes, keys)):
            new = by_index.get(i)
            if new is not None and new.status != "failed":
                for rb, k in zip(r.rubrics, ks):
                    if rb.id in new.verdicts:
                        rows.append(
                            (
                                k,
                                self.name,
                                self.model_id,
                                self.prompt_version,
                                rb.id,
                                h,
                                new.status,
                                new.verdicts[rb.id],
                            )
                        )
            cached = {rb.id: found[k] for rb, k in zip(r.rubrics, ks) if k in found}
            verdicts: dict[str, Verdict] = {}
            statuses = {st for st, _ in cached.values()}
            for rb in r.rubrics:
                if rb.id in cached:
                    verdicts[rb.id] = cached[rb.id][1]
                elif new is not None and rb.id in new.verdicts:
                    verdicts[rb.id] = new.verdicts[rb.id]
            if new is None:
                status, reason, raw = ("repaired" if "repaired" in statuses else "ok"), "cached", None
            elif new.status == "failed" and not cached:
                status, reason, raw = "failed", new.reason, new.raw
            else:
                if new.status != "failed":
                    statuses.add(new.status)
                status = "repaired" if "repaired" in statuses else "ok"
                reason, raw = new.reason, new.raw
                if new.status == "failed":  # some rubrics cached, the rest failed: those stay missing
                    status, reason = "repaired", f"partly cached; uncached rubrics failed: {new.reason}"
            missing = () if status == "failed" else tuple(rb.id for rb in r.rubrics if rb.id not in verdicts)
            out.append(Judgment(status, verdicts, reason=reason, raw=raw, missing=missing))
        if rows:
            self.cache.put_many(rows)
            self.stats.stored += len(rows)
        return out

    def judge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        plan = self._plan(requests)
        todo = plan[3]
        fresh = self.backend.judge([r for _, r in todo]) if todo else []
        return self._merge(requests, *plan, fresh)

    async def ajudge(self, requests: list[JudgeRequest]) -> list[Judgment]:
        plan = self._plan(requests)
        todo = plan[3]
        if not todo:
            fresh = []
        elif hasattr(self.backend, "ajudge"):
            fresh = await self.backend.ajudge([r for _, r in todo])
        else:
            fresh = self.backend.judge([r for _, r in todo])
        return self._merge(requests, *plan, fresh)

    def __getattr__(self, name):  # generate(), stats of the wrapped backend, ...
        if name == "backend":
            raise AttributeError(name)
        return getattr(self.backend, name)
