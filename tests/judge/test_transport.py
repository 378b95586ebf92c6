"""The HTTP transport of the openai judge: Retry-After parsing, the HTTP client choice, the API key kept out of
reasons. (Retries, deadlines and concurrency are exercised through the judge in test_openai.py.)"""

import time

import pytest

from rubricflow.judge.config import OpenAIJudgeConfig
from rubricflow.judge.retry import retry_after_seconds
from rubricflow.judge.transport import ChatTransport


class _Resp:
    def __init__(self, headers):
        self.headers = headers


class _Err(Exception):
    def __init__(self, headers):
        self.response = _Resp(headers)


def test_retry_after_parsing():
    assert retry_after_seconds(_Err({"retry-after": "3"})) == 3.0
    assert retry_after_seconds(_Err({"retry-after-ms": "250"})) == 0.25
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 20))
    assert 17 <= retry_after_seconds(_Err({"retry-after": future})) <= 21
    assert retry_after_seconds(_Err({"retry-after": "soon"})) is None
    assert retry_after_seconds(ValueError("no response")) is None


def test_missing_aiohttp_client_raises_the_shared_backend_unavailable(monkeypatch):
    import openai

    from models.errors import BackendUnavailable
    from models.generation import BackendUnavailable as GenerationBackendUnavailable

    assert GenerationBackendUnavailable is BackendUnavailable  # one class: `except` on either name catches both
    monkeypatch.delattr(openai, "DefaultAioHttpClient", raising=False)
    t = ChatTransport(OpenAIJudgeConfig(base_url="http://127.0.0.1:9/v1", http_client="aiohttp"), "not-a-secret")
    with pytest.raises(GenerationBackendUnavailable, match="judge.openai.http_client=aiohttp"):
        t.client()


def test_the_key_is_resolved_once_and_scrubbed_from_text():
    calls = []
    t = ChatTransport(OpenAIJudgeConfig(), lambda: calls.append(1) or "sk-test-SECRET-1234")
    assert not t.key_resolved and calls == []  # resolved at the first call, not when built
    assert t._api_key() == t._api_key() == "sk-test-SECRET-1234" and calls == [1]
    assert t.scrub("key sk-test-SECRET-1234!") == "key ***!"
    assert ChatTransport(OpenAIJudgeConfig(), None)._api_key() == "EMPTY"  # no key: a local server without one


def test_the_response_cap_is_a_documented_operational_setting():
    from rubricflow.judge.config import OpenAIJudgeConfig as C

    assert "max_response_bytes" in C.operational and C().max_response_bytes >= 1024**2
    assert "body" in C.model_fields["max_response_bytes"].description
    with pytest.raises(ValueError):
        C(max_response_bytes=0)
