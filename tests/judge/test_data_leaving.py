"""Data leaving the machine or the project (issue 37, item 7): a labelled set cannot send a local non-image file to
the judge, and an API key echoed transformed (any case, reversed, base64, spaced, split over lines) is scrubbed
wherever judge output is stored or printed (the transport's ``scrub``, which the judgments, the cache, the agreement
report, the teacher's candidates and the preflight error line go through)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from PIL import Image

from rubricflow.judge import agreement as ag
from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.errors import JudgeConfigError
from rubricflow.judge.openai_backend import OpenAIJudge
from rubricflow.judge.protocol import Judgment, Rubric, Verdict
from rubricflow.judge.transport import ChatTransport
from rubricflow.testing.judge_server import LoopbackJudgeServer

KEY = "sk-proj-Q7vX2mN9pL4kR8tY1wZ5"

TRANSFORMS = {
    "verbatim": lambda k: k,
    "reversed": lambda k: k[::-1],
    "upper": str.upper,
    "lower": str.lower,
    "spaced": lambda k: " ".join(k),
    "split-lines": lambda k: "\n".join(k[i:i + 6] for i in range(0, len(k), 6)),
    "base64": lambda k: base64.b64encode(k.encode()).decode(),
    "base64-urlsafe": lambda k: base64.urlsafe_b64encode(k.encode()).decode(),
    "base64-of-a-sentence": lambda k: base64.b64encode(f"the key is {k}, keep it".encode()).decode(),
    "base64-spaced": lambda k: " ".join(base64.b64encode(k.encode()).decode()),
    "hex": lambda k: k.encode().hex(),
    "reversed-upper-spaced": lambda k: " ".join(k[::-1].upper()),
}


def _shift(c: str) -> str:
    for alphabet in ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
        if c in alphabet:
            return alphabet[(alphabet.index(c) + 1) % len(alphabet)]
    return c


OTHER = "sk-proj-" + "".join(_shift(c) for c in KEY[8:])  # same length and shape, every key character changed


def _alnum(text: str) -> str:
    return "".join(c for c in text if c.isalnum()).lower()


def _leaks(text: str) -> list[str]:
    """The transforms of KEY of which 12 key-determined letters and digits in a row still appear in ``text``
    (key-determined: not found in the same transform of another key of the same length)."""
    flat = _alnum(text)
    out = []
    for name, fn in TRANSFORMS.items():
        form, other = _alnum(fn(KEY)), _alnum(fn(OTHER))
        windows = [w for w in (form[i:i + 12] for i in range(len(form) - 11)) if w not in other]
        if any(w in flat for w in windows):
            out.append(name)
    return out


def _transport() -> ChatTransport:
    t = ChatTransport(OpenAIJudgeConfig(), KEY)
    t._api_key()  # resolved, as after the first call
    return t


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_every_transform_of_the_key_is_scrubbed(name):
    echoed = TRANSFORMS[name](KEY)
    assert _leaks(f"judge says: {echoed} -- ok") == [name] or name in _leaks(f"{echoed}")  # the check sees it
    out = _transport().scrub(f"judge says: {echoed} -- ok")
    assert _leaks(out) == [], out
    assert out.startswith("judge says: ") and out.endswith(" -- ok") and "***" in out


def test_ordinary_text_is_left_as_it_is():
    t = _transport()
    text = ("The answer is 42. Step 3 multiplies 6 by 7; the rubric W04 passes. "
            + base64.b64encode(b"an unrelated image payload " * 10).decode())
    assert t.scrub(text) == text


def test_a_short_key_is_still_scrubbed_verbatim_without_fuzzy_matching():
    t = ChatTransport(OpenAIJudgeConfig(), "ab12")
    t._api_key()
    assert t.scrub("x ab12 y a b 1 2") == "x *** y a b 1 2"


def test_judgments_stored_in_the_cache_and_the_report_carry_no_transformed_key(tmp_path):
    """``scrub_judgment`` is what the cache, the agreement report and the MLflow artifacts store."""
    judge = OpenAIJudge(OpenAIJudgeConfig(), api_key=KEY)
    judge.transport._api_key()
    echoes = " | ".join(fn(KEY) for fn in TRANSFORMS.values())
    j = Judgment("ok", {"R1": Verdict(True, True, rationale=f"saw {echoes}")}, reason=f"r {echoes}",
                 raw=f"raw {echoes}")
    clean = judge.scrub_judgment(j)
    text = json.dumps({**clean.to_dict(), "raw": clean.raw})
    assert _leaks(text) == [], text


def test_the_teachers_candidates_carry_no_transformed_key(tmp_path):
    from rubricflow.methods.rucl.rubrics.pool import save_pool
    from rubricflow.methods.rucl.rubrics.teacher import generate_pool

    forms = list(TRANSFORMS.values())

    def echo(body):
        items = [{"category": "logical_coherence", "text": f"Check {forms[i % len(forms)](KEY)} in step {i}."}
                 for i in range(len(forms))]
        return json.dumps({"rubrics": items})

    with LoopbackJudgeServer(content_fn=echo, api_key=KEY) as srv:
        teacher = OpenAIJudge(OpenAIJudgeConfig(base_url=srv.base_url, model="loopback-judge", timeout_s=5.0,
                                                max_retries=0), api_key=KEY)
        assert _leaks(teacher.generate("system", "user")) == []
        pool = generate_pool(teacher, len(forms), ["q"], max_calls=1)
    path = tmp_path / "candidates.json"
    save_pool(pool, path)
    assert _leaks(path.read_text()) == [], path.read_text()


class _EchoingAuthServer(BaseHTTPRequestHandler):
    """Answers every request 401 with the bearer token echoed back, base64-encoded and reversed."""

    def do_POST(self):  # noqa: N802
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        msg = f"bad key {base64.b64encode(token.encode()).decode()} (reversed: {token[::-1]})"
        body = json.dumps({"error": {"message": msg, "type": "invalid_request_error"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_the_preflight_error_line_carries_no_transformed_key():
    srv = HTTPServer(("127.0.0.1", 0), _EchoingAuthServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        judge = OpenAIJudge(OpenAIJudgeConfig(base_url=f"http://127.0.0.1:{srv.server_port}/v1", timeout_s=5.0,
                                              max_retries=0), api_key=KEY)
        with pytest.raises(JudgeConfigError) as e:
            judge.preflight()
    finally:
        srv.shutdown()
        srv.server_close()
    assert "401" in str(e.value) and "***" in str(e.value)
    assert _leaks(str(e.value)) == [], str(e.value)


# -- images of a labelled set ------------------------------------------------------------------------------------
RUBRICS = {"R1": Rubric("R1", "is it right?")}


def _labelled(tmp_path, images) -> "Path":  # noqa: F821
    p = tmp_path / "set" / "labels.jsonl"
    p.parent.mkdir(exist_ok=True)
    p.write_text(json.dumps({"sample_id": "s1", "question": "q", "response": "r", "images": images,
                             "labels": {"R1": "pass"}}) + "\n")
    return p


def test_a_labelled_image_inside_the_set_is_sent_as_an_absolute_path(tmp_path):
    p = _labelled(tmp_path, ["img/a.png"])
    (p.parent / "img").mkdir()
    Image.new("RGB", (4, 4)).save(p.parent / "img" / "a.png")
    requests, _ = ag.read_labelled(p, RUBRICS)
    assert requests[0].images == [str((p.parent / "img" / "a.png").resolve())]


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink-out", "not-an-image", "missing"])
def test_a_labelled_image_outside_the_set_or_not_an_image_is_refused_naming_the_line(tmp_path, kind):
    secret = tmp_path / "secret.txt"
    secret.write_text("API_KEY=sk-live-do-not-send\n")
    setdir = tmp_path / "set"
    setdir.mkdir()
    images = {"absolute": [str(secret)], "dotdot": ["../secret.txt"], "symlink-out": ["link.png"],
              "not-an-image": ["notes.png"], "missing": ["nope.png"]}[kind]
    (setdir / "link.png").symlink_to(secret)
    (setdir / "notes.png").write_text("not an image at all")
    p = _labelled(tmp_path, images)
    with pytest.raises(ValueError) as e:
        ag.read_labelled(p, RUBRICS)
    assert str(e.value).startswith(f"{p}:1: field `images[0]`"), str(e.value)


@pytest.mark.parametrize("images", ["img/a.png", {"path": "a.png"}, 3])
def test_a_labelled_images_field_must_be_a_list(tmp_path, images):
    """A string was split into one path per character."""
    p = _labelled(tmp_path, images)
    with pytest.raises(ValueError, match=r"labels\.jsonl:1: field `images` must be a list of image paths"):
        ag.read_labelled(p, RUBRICS)


# ---------------------------------------------------------------------------------------------------------------
# the MLflow scorer's rows and the judge backend itself


def _png(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), "red").save(path)
    return path


@pytest.mark.parametrize("images", [["/etc/hostname"], ["../secret.txt"], ["notes.txt"], "img.png", ["missing.png"]])
def test_a_scorer_row_cannot_send_a_local_non_image_file(tmp_path, images):
    from rubricflow.methods.rucl.integrations.mlflow import build_request

    root = tmp_path / "root"
    _png(root / "img.png")
    (root / "notes.txt").write_text(f"api key {KEY}")
    (tmp_path / "secret.txt").write_text("secret")
    rubric = Rubric(id="R1", text="t")
    with pytest.raises(ValueError, match=r"inputs\.images"):
        build_request({"question": "q", "images": images}, "resp", {}, [rubric], image_root=root)
    ok = build_request({"question": "q", "images": ["img.png"]}, "resp", {}, [rubric], image_root=root)
    assert ok.images == [str((root / "img.png").resolve())]
    with pytest.raises(ValueError, match="no image_root"):
        build_request({"question": "q", "images": ["img.png"]}, "resp", {}, [rubric])


def test_the_judge_backend_never_sends_a_file_that_is_not_an_image(tmp_path):
    """Whatever builds the request, the OpenAI backend sends only files that decode as images: another file named in
    ``images`` fails that judgment, and the server never sees its bytes."""
    from rubricflow.judge.protocol import JudgeRequest

    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- not for the judge")
    image = _png(tmp_path / "ok.png")
    with LoopbackJudgeServer() as srv:
        judge = OpenAIJudge(OpenAIJudgeConfig(base_url=srv.base_url, max_retries=0), api_key="k")
        rubric = Rubric(id="R1", text="t")
        bad = JudgeRequest(sample_id="s1", question="q", response="r", rubrics=[rubric], images=[str(secret)])
        good = JudgeRequest(sample_id="s2", question="q", response="r", rubrics=[rubric], images=[str(image)])
        j_bad, j_good = judge.judge([bad, good])
        seen = json.dumps(srv.bodies)
    assert j_bad.failed and "not an image file" in j_bad.reason
    assert "OPENSSH" not in seen and base64.b64encode(secret.read_bytes()).decode()[:24] not in seen
    assert not j_good.failed
