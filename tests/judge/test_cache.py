"""SQLite judge cache: a second identical labeling run makes zero backend calls; only ok/repaired verdicts are
stored; keys separate backend, model, prompt version, rubric (id and text) and sample content."""

from dataclasses import dataclass, field

from rubricflow.judge import CachedJudge, JudgeCache, JudgeConfig, JudgeRequest, Judgment, Rubric, Verdict, make_judge
from rubricflow.judge.cache import cache_key

RUBRICS = [Rubric("R01", "first"), Rubric("R02", "second"), Rubric("R03", "third")]


@dataclass
class CountingBackend:
    """Answers from a script; counts calls and the rubric ids it was asked about."""

    name: str = "fake"
    model_id: str = "m1"
    prompt_version: str = "judge-v1"
    fail_ids: set = field(default_factory=set)  # sample ids that fail
    drop: set = field(default_factory=set)  # rubric ids left out of the answer
    calls: int = 0
    requests: int = 0
    asked: list = field(default_factory=list)

    def judge(self, requests):
        self.calls += 1
        self.requests += len(requests)
        out = []
        for r in requests:
            self.asked.append((r.sample_id, tuple(rb.id for rb in r.rubrics)))
            if r.sample_id in self.fail_ids:
                out.append(Judgment("failed", reason="boom"))
                continue
            v = {rb.id: Verdict(True, len(r.response) % 2 == 0, "x") for rb in r.rubrics if rb.id not in self.drop}
            out.append(Judgment("repaired" if self.drop else "ok", v, reason="missing" if self.drop else None))
        return out


def reqs(n=4, rubrics=RUBRICS):
    return [JudgeRequest(f"s{i}", "q", "resp" + "x" * i, list(rubrics), facts={"i": i}) for i in range(n)]


def test_second_identical_run_makes_zero_backend_calls(tmp_path):
    backend = CountingBackend()
    judge = CachedJudge(backend, JudgeCache(tmp_path / "c.sqlite"))
    first = judge.judge(reqs())
    assert backend.calls == 1 and backend.requests == 4
    # a fresh process: new cache object on the same file, new wrapper
    judge2 = CachedJudge(backend, JudgeCache(tmp_path / "c.sqlite"))
    second = judge2.judge(reqs())
    assert backend.calls == 1 and backend.requests == 4  # zero calls
    assert judge2.stats.backend_requests == 0 and judge2.stats.rubric_hits == 12
    for a, b in zip(first, second):
        assert a.verdicts == b.verdicts and b.status == "ok" and b.reason == "cached"


def test_failures_are_not_cached_and_rerun_asks_only_them(tmp_path):
    backend = CountingBackend(fail_ids={"s1", "s3"})
    judge = CachedJudge(backend, JudgeCache(tmp_path / "c.sqlite"))
    out = judge.judge(reqs())
    assert [o.status for o in out] == ["ok", "failed", "ok", "failed"]
    assert out[1].reason == "boom" and out[1].verdicts == {}
    assert len(judge.cache) == 6
    backend.fail_ids = set()
    backend.asked.clear()
    out = judge.judge(reqs())
    assert [o.status for o in out] == ["ok"] * 4
    assert backend.asked == [("s1", ("R01", "R02", "R03")), ("s3", ("R01", "R02", "R03"))]


def test_missing_rubrics_are_reasked_alone(tmp_path):
    backend = CountingBackend(drop={"R02"})
    judge = CachedJudge(backend, JudgeCache(tmp_path / "c.sqlite"))
    out = judge.judge(reqs(2))
    assert all(o.status == "repaired" and set(o.verdicts) == {"R01", "R03"} for o in out)
    backend.drop = set()
    backend.asked.clear()
    out = judge.judge(reqs(2))
    assert backend.asked == [("s0", ("R02",)), ("s1", ("R02",))]
    assert all(set(o.verdicts) == {"R01", "R02", "R03"} for o in out)
    assert all(o.status == "repaired" for o in out)  # R01/R03 were stored from a repaired judgment


def test_partly_cached_then_failed_keeps_cached_verdicts_and_says_so(tmp_path):
    backend = CountingBackend()
    judge = CachedJudge(backend, JudgeCache(tmp_path / "c.sqlite"))
    judge.judge(reqs(1, RUBRICS[:1]))
    backend.fail_ids = {"s0"}
    out = judge.judge(reqs(1))[0]
    assert set(out.verdicts) == {"R01"}
    assert "uncached rubrics failed: boom" in out.reason


def test_key_parts_all_matter():
    base = dict(
        backend="openai", model_id="m", prompt_version="judge-v1", rubric_id="R01", rubric_text="t", sample_hash="h"
    )
    k0 = cache_key(**base)
    for part, other in [
        ("backend", "local"),
        ("model_id", "m2"),
        ("prompt_version", "judge-v3"),
        ("rubric_id", "R02"),
        ("rubric_text", "t2"),
        ("sample_hash", "h2"),
        ("server", "http://127.0.0.1:8000/v1"),
    ]:
        assert cache_key(**{**base, part: other}) != k0, part
    a, b = (cache_key(**base, server=f"http://127.0.0.1:{port}/v1") for port in (8000, 8001))
    assert a != b


def test_sample_hash_covers_response_facts_and_image_bytes(tmp_path):
    img = tmp_path / "a.png"
    img.write_bytes(b"one")
    r = JudgeRequest("s", "q", "resp", RUBRICS, images=[str(img)], facts={"a": 1}, answer="2")
    h = r.content_hash()
    img.write_bytes(b"two")
    assert r.content_hash() != h
    assert (
        JudgeRequest("s", "q", "resp2", RUBRICS, images=[str(img)], facts={"a": 1}, answer="2").content_hash()
        != r.content_hash()
    )
    assert (
        JudgeRequest("s", "q", "resp", RUBRICS, images=[str(img)], facts={"a": 2}, answer="2").content_hash()
        != r.content_hash()
    )
    assert (
        JudgeRequest("other-id", "q", "resp", RUBRICS, images=[str(img)], facts={"a": 1}, answer="2").content_hash()
        == r.content_hash()
    )


def test_make_judge_wraps_cache_per_config(tmp_path):
    path = str(tmp_path / "j.sqlite")
    assert make_judge(JudgeConfig(cache_path=path)).name == "programmatic"
    assert not isinstance(make_judge(JudgeConfig(cache_path=path)), CachedJudge)  # programmatic: not cached by default
    j = make_judge(JudgeConfig(cache_path=path, cache_programmatic=True))
    assert isinstance(j, CachedJudge)
    facts = {
        "task": "counting",
        "perception": [["red", 1]],
        "intermediate": [],
        "target": "red",
        "question_type": "count",
    }
    pool = [Rubric("C17", "boxed", check="boxed_present")]
    r = [JudgeRequest("s", "q", "red = 1. \\boxed{1}", pool, facts=facts, answer="1")]
    assert j.judge(r)[0].verdicts["C17"].satisfied is True
    assert j.judge(r)[0].reason == "cached" and j.stats.backend_requests == 1
    assert not isinstance(make_judge(JudgeConfig(backend="openai", cache_enabled=False), preflight=False), CachedJudge)


def test_cache_stores_what_the_backend_scrubs(tmp_path):
    """A backend that returns a secret unscrubbed but offers ``scrub_judgment`` still keeps it out of the file."""
    from dataclasses import replace

    def rationale(j, fn):
        return replace(j, verdicts={k: replace(v, rationale=fn(v.rationale)) for k, v in j.verdicts.items()})

    class Leaky(CountingBackend):
        def judge(self, requests):
            return [rationale(j, lambda _: "KEY-1234 seen") for j in super().judge(requests)]

        def scrub_judgment(self, j):
            return rationale(j, lambda text: text.replace("KEY-1234", "***"))

    path = tmp_path / "c.sqlite"
    cache = JudgeCache(path)
    out = CachedJudge(Leaky(), cache).judge(reqs(2))
    assert {v.rationale for o in out for v in o.verdicts.values()} == {"*** seen"}
    again = CachedJudge(Leaky(), cache).judge(reqs(2))  # answered from the file
    assert [o.reason for o in again] == ["cached", "cached"]
    assert {v.rationale for o in again for v in o.verdicts.values()} == {"*** seen"}
    cache.close()
    assert all(b"KEY-1234" not in f.read_bytes() for f in tmp_path.glob("c.sqlite*"))
