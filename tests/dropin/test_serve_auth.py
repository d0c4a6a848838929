"""``--api-key``: every endpoint but /health needs the key; and binding beyond loopback without one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.api.auth import KeyChecker, presented_key
from tests.dropin.conftest import Serve, chat, models

KEY = "sk-modelrouter-test-0123456789"
LLAMA_401 = {"message": "Invalid API Key", "type": "authentication_error", "code": 401}


def test_keys_are_checked_against_every_configured_key() -> None:
    checker = KeyChecker(["first-key", "second-key"])
    assert checker.accepts(b"second-key") and checker.accepts(b"first-key")
    assert not checker.accepts(b"second-ke") and not checker.accepts(b"") and not checker.accepts(None)
    assert presented_key({b"authorization": b"Bearer abc"}) == b"abc"
    assert presented_key({b"x-api-key": b"abc"}) == b"abc"
    assert presented_key({b"authorization": b"abc"}) == b"abc", "llama.cpp strips 'Bearer ' only if present"


@pytest.mark.timeout(120)
def test_api_key_guards_every_endpoint_but_health(serve: Serve, models_dir: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# one per line\nfile-key-abcdef\n")
    svc = serve("--models-dir", str(models_dir), "--api-key", KEY, "--api-key-file", str(keys))
    assert httpx.get(f"{svc.url}/health", timeout=10).status_code == 200
    for method, path in [
        ("GET", "/models"),
        ("GET", "/v1/models"),
        ("GET", "/events"),
        ("GET", "/downloads"),
        ("GET", "/events/stream"),
        ("GET", "/models/sse"),
        ("GET", "/schema/openapi.json"),
        ("POST", "/models/load"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/models/reload"),
        ("DELETE", "/models?model=tiny-a"),
    ]:
        answer = httpx.request(method, f"{svc.url}{path}", timeout=10)
        assert answer.status_code == 401, path
        assert answer.json()["error"] == LLAMA_401 and answer.headers["content-type"] == "application/problem+json"
    wrong = httpx.get(f"{svc.url}/models", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401

    assert "tiny-a" in models(svc, Authorization=f"Bearer {KEY}")
    assert "tiny-a" in models(svc, **{"X-Api-Key": "file-key-abcdef"})
    assert chat(svc, "tiny-a", Authorization=f"Bearer {KEY}").status_code == 200
    with httpx.stream(
        "GET", f"{svc.url}/events/stream", params={"after": 0}, timeout=10, headers={"X-Api-Key": KEY}
    ) as stream:
        assert stream.status_code == 200
    assert KEY not in svc.log_text() and "file-key-abcdef" not in svc.log_text(), "keys are never logged"
    assert httpx.get(f"{svc.url}/health", timeout=10).json()["warnings"] == []


@pytest.mark.timeout(120)
def test_binding_beyond_loopback_without_a_key_is_warned_about(serve: Serve, models_dir: Path) -> None:
    svc = serve("--models-dir", str(models_dir), "--host", "0.0.0.0")
    (warning,) = httpx.get(f"{svc.url}/health", timeout=10).json()["warnings"]
    assert "without an API key" in warning and "0.0.0.0" in warning
    assert '"event": "insecure_binding"' in svc.log_text()
