"""Named keys with scopes (issue 34), against a real service with tiny real models and the real
clients: a model outside a key's scope is a 403 in each dialect's shape, admin routes are refused to
an inference key, listings show what the key may use, an expired key is a 401, a revoked one stops.

One full key (``--api-key``) and two named keys: ``chat`` (inference, ``tiny-a``) and ``ops``
(inference and admin, ``tiny-*``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest

from devtools.service_process import ServiceProcess
from tests.api.named_keys import FULL, add_key, bearer, call, full_headers
from tests.e2e.conftest import models_dir
from tests.eventually import eventually

__all__ = ["models_dir"]  # the session fixture of tiny GGUFs

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[ServiceProcess]:
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "MODELROUTER_MODELS_MAX": "2"}
    with ServiceProcess(tmp_path_factory.mktemp("keys"), args=["--api-key", FULL], env=env) as proc:
        yield proc


@pytest.fixture(scope="module")
def keys(svc: ServiceProcess) -> dict[str, str]:
    return {
        "chat": add_key(svc, "chat", ["tiny-a"]),
        "ops": add_key(svc, "ops", ["tiny-*"], ["inference", "admin"]),
    }


def _names_only_the_rule(text: str, keys: dict[str, str]) -> None:
    assert "models: tiny-a" in text, text
    assert "ops" not in text and "tiny-*" not in text, "another key's name or scope leaked"
    assert all(secret not in text for secret in keys.values())


@pytest.mark.timeout(180)
def test_a_model_outside_the_scope_is_403_in_each_dialect(svc: ServiceProcess, keys: dict[str, str]) -> None:
    secret = keys["chat"]
    oai = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        oai.chat.completions.create(model="tiny-b", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert denied.value.status_code == 403
    _names_only_the_rule(json.dumps(denied.value.body), keys)
    assert oai.chat.completions.create(model="tiny-a", messages=[{"role": "user", "content": "hi"}], max_tokens=2)

    claude = anthropic.Anthropic(base_url=svc.url, api_key=secret, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        claude.messages.create(model="tiny-b", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    body = refused.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "permission_error"
    _names_only_the_rule(json.dumps(body), keys)

    llama = ollama.Client(host=svc.url, headers=bearer(secret), timeout=60)
    with pytest.raises(ollama.ResponseError) as error:
        llama.chat(model="tiny-b", messages=[{"role": "user", "content": "hi"}])
    assert error.value.status_code == 403
    _names_only_the_rule(error.value.error, keys)
    with pytest.raises(ollama.ResponseError) as error:
        llama.show("tiny-b")
    assert error.value.status_code == 403

    tokenized = call(svc, "POST", "/tokenize", secret, json={"model": "tiny-b", "content": "hi"})
    assert tokenized.status_code == 403 and tokenized.headers["content-type"] == "application/problem+json"
    problem = tokenized.json()
    assert problem["type"] == "/problems/model_not_allowed" and problem["rule"] == "models: tiny-a"
    _names_only_the_rule(tokenized.text, keys)


@pytest.mark.timeout(180)
def test_admin_routes_need_an_admin_scope_or_the_full_key(svc: ServiceProcess, keys: dict[str, str]) -> None:
    for method, path, body in [
        ("POST", "/models/load", {"model": "tiny-a"}),
        ("POST", "/models/unload", {"model": "tiny-a"}),
        ("GET", "/events", None),
        ("GET", "/metrics", None),
        ("POST", "/api/pull", {"model": "tiny-a"}),
        ("POST", "/slots/0?action=erase", {"model": "tiny-a"}),
        ("GET", "/keys", None),
    ]:
        answer = call(svc, method, path, keys["chat"], json=body)
        assert answer.status_code == 403, (path, answer.text)
        error = answer.json()["error"]
        assert "endpoints: inference" in (error if isinstance(error, str) else error["message"]), path
    assert call(svc, "POST", "/models/load", keys["ops"], json={"model": "tiny-a"}).status_code == 200
    assert call(svc, "GET", "/events", keys["ops"]).status_code == 200
    for method, path, body in [
        ("POST", "/models/load", {"model": "broken-text"}),
        ("DELETE", "/models?model=broken-text", None),
        ("GET", "/models/broken-text/history", None),
        ("POST", "/api/copy", {"source": "tiny-a", "destination": "mine"}),
    ]:
        refused = call(svc, method, path, keys["ops"], json=body)
        assert refused.status_code == 403, (path, refused.text)
        assert "tiny-*" in refused.text, path
    assert call(svc, "GET", "/models/tiny-a/history", keys["ops"]).status_code == 200
    loaded = httpx.post(f"{svc.url}/models/load", json={"model": "tiny-b"}, headers=full_headers(), timeout=30)
    assert loaded.status_code == 200
    # Keys are the full key's alone: an admin key may not make or widen keys.
    assert call(svc, "POST", "/keys", keys["ops"], json={"name": "more"}).status_code == 403
    assert call(svc, "PATCH", "/keys/ops", keys["ops"], json={"models": ["*"]}).status_code == 403


@pytest.mark.timeout(180)
def test_listings_show_only_the_models_the_key_may_use(svc: ServiceProcess, keys: dict[str, str]) -> None:
    for model in ("tiny-a", "tiny-b"):
        httpx.post(f"{svc.url}/models/load", json={"model": model}, headers=full_headers(), timeout=30)

    def running(secret: str) -> set[str]:
        return {m["name"] for m in call(svc, "GET", "/api/ps", secret).json()["models"]}

    eventually(lambda: running(FULL) >= {"tiny-a", "tiny-b"}, "both models running", timeout=120)
    for path, field, key in [("/v1/models", "data", "id"), ("/models", "data", "id"), ("/api/tags", "models", "name")]:
        everything = {m[key] for m in call(svc, "GET", path, FULL).json()[field]}
        assert {"tiny-a", "tiny-b"} <= everything, path
        assert {m[key] for m in call(svc, "GET", path, keys["chat"]).json()[field]} == {"tiny-a"}, path
        ops = {m[key] for m in call(svc, "GET", path, keys["ops"]).json()[field]}
        assert ops == {n for n in everything if n.startswith("tiny-")}, path
    assert running(keys["chat"]) == {"tiny-a"}
    assert openai.OpenAI(base_url=f"{svc.url}/v1", api_key=keys["chat"]).models.list().data[0].id == "tiny-a"


@pytest.mark.timeout(120)
def test_an_expired_key_is_401_and_a_revoked_key_stops(svc: ServiceProcess, keys: dict[str, str]) -> None:
    old = add_key(svc, "old", expires_at="2000-01-01T00:00:00Z")
    answer = call(svc, "POST", "/v1/chat/completions", old, json={"model": "tiny-a", **CHAT})
    assert answer.status_code == 401 and answer.json()["type"] == "/problems/key_expired"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{svc.url}/v1", api_key=old, max_retries=0).models.list()

    gone = add_key(svc, "gone", ["tiny-a"])
    assert call(svc, "GET", "/v1/models", gone).status_code == 200
    revoked = httpx.delete(f"{svc.url}/keys/gone", headers=full_headers(), timeout=30)
    assert revoked.status_code == 200 and revoked.json() == {"name": "gone", "revoked": True}
    assert call(svc, "GET", "/v1/models", gone).status_code == 401
    assert call(svc, "GET", "/v1/models", keys["chat"]).status_code == 200, "the others keep working"


@pytest.mark.timeout(120)
def test_key_management_shows_scopes_never_secrets(svc: ServiceProcess, keys: dict[str, str]) -> None:
    listed = httpx.get(f"{svc.url}/keys", headers=full_headers(), timeout=30)
    by_name = {k["name"]: k for k in listed.json()["keys"]}
    assert by_name["chat"]["models"] == ["tiny-a"] and by_name["ops"]["endpoints"] == ["inference", "admin"]
    assert all(secret not in listed.text for secret in keys.values()) and "digest" not in listed.text
    changed = httpx.patch(f"{svc.url}/keys/chat", json={"rpm": 100}, headers=full_headers(), timeout=30)
    assert changed.status_code == 200 and changed.json()["rpm"] == 100 and changed.json()["models"] == ["tiny-a"]
    assert call(svc, "GET", "/v1/models", keys["chat"]).status_code == 200, "a scope change keeps the secret"
    for body, status in [
        ({"name": "chat"}, 409),  # a live name
        ({"name": "api-key"}, 400),  # reserved
        ({"name": "x", "endpoints": ["everything"]}, 400),
        ({"name": "x", "expires_at": "next tuesday"}, 400),
    ]:
        answer = httpx.post(f"{svc.url}/keys", json=body, headers=full_headers(), timeout=30)
        assert answer.status_code == status, (body, answer.text)
    assert httpx.delete(f"{svc.url}/keys/nobody", headers=full_headers(), timeout=30).status_code == 404


@pytest.mark.timeout(60)
def test_a_full_hop_names_the_caller_a_named_key_cannot(svc: ServiceProcess, keys: dict[str, str]) -> None:
    """``X-Modelrouter-Caller`` (a forwarding node's word) is recorded when the hop used a full key."""
    hop = {**full_headers(), "X-Modelrouter-Caller": "alice"}
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, headers=hop, timeout=120)
    posing = {**bearer(keys["chat"]), "X-Modelrouter-Caller": "alice"}
    assert httpx.post(f"{svc.url}/tokenize", json={"model": "tiny-a", "content": "x"}, headers=posing, timeout=60)

    def recorded() -> list[tuple[str, str]]:
        page = call(svc, "GET", "/events", FULL, params={"type": "request_completed", "limit": 1000}).json()
        return [(e["data"]["route"], e["data"].get("key")) for e in page["events"]]

    eventually(lambda: ("/v1/chat/completions", "alice") in recorded(), "the named caller recorded", timeout=30)
    eventually(lambda: ("/tokenize", "chat") in recorded(), "the key's own name recorded", timeout=30)
    assert ("/tokenize", "alice") not in recorded()


@pytest.mark.timeout(60)
def test_without_a_full_key_named_keys_cannot_be_made(tmp_path: Path, models_dir: Path) -> None:
    env = {"MODELROUTER_MODELS_DIR": str(models_dir)}
    with ServiceProcess(tmp_path / "open", env=env) as svc:
        answer = httpx.post(f"{svc.url}/keys", json={"name": "x"}, timeout=30)
        assert answer.status_code == 409 and "--api-key" in answer.json()["detail"]
        assert httpx.get(f"{svc.url}/v1/models", timeout=30).status_code == 200, "still open"


@pytest.mark.timeout(120)
def test_a_keys_max_keep_alive_caps_ollamas_keep_alive(svc: ServiceProcess) -> None:
    """Ollama #10263: an operator's cap on a client's ``keep_alive`` ("forever" included)."""
    secret = add_key(svc, "capped", ["tiny-a"], max_keep_alive=60)
    llama = ollama.Client(host=svc.url, headers=bearer(secret), timeout=60)
    llama.generate(model="tiny-a", prompt="hi", keep_alive=-1, options={"num_predict": 2})
    llama.generate(model="tiny-a", prompt="hi", keep_alive="10s", options={"num_predict": 2})

    def kept() -> list[float]:
        page = call(svc, "GET", "/events", FULL, params={"type": "request_completed", "limit": 1000}).json()
        return [e["data"]["keep_alive"] for e in page["events"] if e["data"].get("key") == "capped"]

    assert eventually(lambda: kept() if len(kept()) == 2 else None, "both generations recorded", timeout=30) == [
        60,
        10,
    ]
