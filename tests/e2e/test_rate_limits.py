"""Rate limits per named key (issue 34), through the real service, a tiny real model and the real
``openai``, ``anthropic`` and ``ollama`` clients.

A key over its ``rpm`` or ``tpm`` gets 429 with ``Retry-After`` in the shape of the API spoken, and
is admitted again once that wait is over; the limits survive a kill -9 and restart (rebuilt from
the log's ``request_completed``); a key's ``max_keep_alive`` caps Ollama's ``keep_alive``. The
window is shortened (``MODELROUTER_RATE_WINDOW_S``) so that no test waits a minute.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.core.key_commands import ScopeRequest
from tests.e2e.named_keys import add_key
from tests.eventually import eventually

FULL = "full-key"
WINDOW = 10  # seconds: long enough for a few tiny requests, short enough to wait out
MODEL = "tiny-a"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[ServiceProcess]:
    models = tmp_path / "models"
    write_tiny_gguf(models / f"{MODEL}.gguf", seed=1)
    env = {"MODELROUTER_MODELS_DIR": str(models), "MODELROUTER_RATE_WINDOW_S": str(WINDOW)}
    proc = ServiceProcess(tmp_path / "home", env=env, args=["--api-key", FULL])
    with proc:
        # Loaded first, with the full key: no limited request waits for a load longer than the window.
        load = httpx.post(f"{proc.url}/models/load", json={"model": MODEL}, headers=_auth(FULL), timeout=60)
        assert load.status_code < 300, load.text
        eventually(lambda: _ready(proc), "the model ready", timeout=60)
        yield proc


def _auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def _ready(svc: ServiceProcess) -> bool:
    listed = httpx.get(f"{svc.url}/models", headers=_auth(FULL), timeout=10).json()["data"]
    return any(m["id"] == MODEL and m["status"]["value"] == "loaded" for m in listed)


def _key(svc: ServiceProcess, name: str, **scope: Any) -> str:
    secret = add_key(svc.home / "modelrouter.db", name, ScopeRequest(**scope))
    # The service's tail folds the new key: a request with it is no longer a 401.
    eventually(lambda: _status(svc, secret) != 401, f"key {name} known", timeout=10)
    return secret


def _status(svc: ServiceProcess, secret: str) -> int:
    return httpx.get(f"{svc.url}/v1/models", headers=_auth(secret), timeout=10).status_code


def _retry_after(headers: httpx.Headers) -> int:
    value = int(headers["retry-after"])
    assert 1 <= value <= WINDOW
    return value


def _completed(svc: ServiceProcess, key: str) -> list[dict[str, Any]]:
    params = {"type": "request_completed", "limit": 1000}
    events = httpx.get(f"{svc.url}/events", params=params, headers=_auth(FULL), timeout=10).json()["events"]
    return [e["data"] for e in events if e["data"].get("key") == key]


def test_rpm_gives_429_in_each_dialect_and_recovers(svc: ServiceProcess) -> None:
    """rpm 2: the third request in the window is refused with Retry-After, in OpenAI's, Anthropic's
    and Ollama's shapes; after Retry-After seconds the key is admitted again."""
    # OpenAI: openai.RateLimitError, the error object's type rate_limit_error
    oa = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=_key(svc, "rpm-openai", rpm=2), max_retries=0)
    for _ in range(2):
        oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    with pytest.raises(openai.RateLimitError) as refused:
        oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    body = refused.value.response.json()
    assert body["error"]["type"] == "rate_limit_error" and body["rule"] == "rpm: 2"
    wait = _retry_after(refused.value.response.headers)
    time.sleep(wait)  # what Retry-After promises is the behaviour under test
    assert oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2).choices

    # Anthropic: anthropic.RateLimitError, {"type": "error", "error": {"type": "rate_limit_error"}}
    an = anthropic.Anthropic(base_url=svc.url, api_key=_key(svc, "rpm-anthropic", rpm=2), max_retries=0)
    for _ in range(2):
        an.messages.create(model=MODEL, messages=HELLO, max_tokens=2)
    with pytest.raises(anthropic.RateLimitError) as limited:
        an.messages.create(model=MODEL, messages=HELLO, max_tokens=2)
    assert limited.value.response.json()["error"]["type"] == "rate_limit_error"
    time.sleep(_retry_after(limited.value.response.headers))
    assert an.messages.create(model=MODEL, messages=HELLO, max_tokens=2).content is not None

    # Ollama: ollama.ResponseError 429 with {"error": "..."} naming the limit
    secret = _key(svc, "rpm-ollama", rpm=2)
    ol = ollama.Client(host=svc.url, headers=_auth(secret))
    for _ in range(2):
        ol.chat(model=MODEL, messages=HELLO, options={"num_predict": 2})
    with pytest.raises(ollama.ResponseError) as over:
        ol.chat(model=MODEL, messages=HELLO, options={"num_predict": 2})
    assert over.value.status_code == 429 and "rpm: 2" in over.value.error
    raw = httpx.post(f"{svc.url}/api/generate", json={"model": MODEL, "prompt": "hi"}, headers=_auth(secret))
    assert raw.status_code == 429 and "rpm: 2" in raw.json()["error"]
    time.sleep(_retry_after(raw.headers))
    assert ol.chat(model=MODEL, messages=HELLO, options={"num_predict": 2}).message is not None


def test_tpm_counts_the_tokens_a_request_used(svc: ServiceProcess) -> None:
    """tpm 5: once the tokens a completed request used (as the client saw them) reach it, the key is
    refused in every dialect until Retry-After; requests that use no tokens do not count."""
    secret = _key(svc, "tpm-key", tpm=5)
    oa = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=secret, max_retries=0)
    answer = oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3)
    assert answer.usage is not None and answer.usage.total_tokens >= 5

    def refused() -> httpx.Response | None:  # /tokenize is inference too but records no tokens
        got = httpx.post(f"{svc.url}/tokenize", json={"model": MODEL, "content": "hi"}, headers=_auth(secret))
        return got if got.status_code == 429 else None

    first = eventually(refused, "the tokens counted", timeout=10)
    assert first.json()["rule"] == "tpm: 5" and first.json()["error"]["type"] == "rate_limit_error"
    used = [d["prompt_tokens"] + d["completion_tokens"] for d in _completed(svc, "tpm-key") if d["prompt_tokens"]]
    assert used == [answer.usage.total_tokens]  # what the client saw; /tokenize recorded none
    with pytest.raises(openai.RateLimitError):
        oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3)
    an = anthropic.Anthropic(base_url=svc.url, api_key=secret, max_retries=0)
    with pytest.raises(anthropic.RateLimitError):
        an.messages.create(model=MODEL, messages=HELLO, max_tokens=2)
    with pytest.raises(ollama.ResponseError) as over:
        ollama.Client(host=svc.url, headers=_auth(secret)).generate(model=MODEL, prompt="hi")
    assert over.value.status_code == 429 and "tpm: 5" in over.value.error
    time.sleep(_retry_after(first.headers))
    assert oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2).choices


def test_limits_survive_a_kill_and_restart(svc: ServiceProcess) -> None:
    """rpm 2 used up, kill -9, start again: the third request is still refused (the window is rebuilt
    from the log's request_completed), then admitted once the window has passed."""
    secret = _key(svc, "rpm-restart", rpm=2)
    oa = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=secret, max_retries=0)
    for _ in range(2):
        oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2)
    eventually(lambda: len(_completed(svc, "rpm-restart")) == 2, "both requests recorded", timeout=10)
    svc.kill9()
    svc.start()
    refused = httpx.post(
        f"{svc.url}/v1/chat/completions",
        json={"model": MODEL, "messages": HELLO, "max_tokens": 2},
        headers=_auth(secret),
        timeout=60,
    )
    assert refused.status_code == 429, refused.text
    assert refused.json()["rule"] == "rpm: 2"
    time.sleep(_retry_after(refused.headers))
    assert oa.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=2).choices


def test_max_keep_alive_caps_ollama_keep_alive(svc: ServiceProcess) -> None:
    """max_keep_alive 2 s: keep_alive -1 (forever) is recorded as 2 s, and the model unloads then."""
    secret = _key(svc, "short-stay", max_keep_alive=2)
    ol = ollama.Client(host=svc.url, headers=_auth(secret))
    ol.generate(model=MODEL, prompt="hi", keep_alive=-1, options={"num_predict": 1})
    assert [d["keep_alive"] for d in _completed(svc, "short-stay")] == [2]
    eventually(lambda: not _ready(svc), "the model unloaded after the cap", timeout=30)
    stops = httpx.get(f"{svc.url}/events", params={"type": "instance_stop*"}, headers=_auth(FULL)).json()["events"]
    assert {e["data"].get("reason") for e in stops} == {"keep_alive"}, stops
    ol.generate(model=MODEL, prompt="hi", options={"num_predict": 1})  # unset: the cap too
    assert [d["keep_alive"] for d in _completed(svc, "short-stay")] == [2, 2]
