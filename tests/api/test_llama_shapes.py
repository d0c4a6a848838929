"""llama-server router's API shapes (issue 8 §6), through the real service with tiny real models.

Shapes from llama.cpp's ``tools/server/README.md`` and ``server-models.cpp``:
management answers carry ``"success": true``; errors carry
``{"error": {"code", "message", "type"}}`` with llama.cpp's types (beside our
problem+json); with autoload off an unloaded model is a 400; every routed
endpoint reaches the model's worker, with and without ``/v1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_tiny_gguf
from service.api.controllers import GET_ROUTES, POST_ROUTES
from tests.conftest_hub import unique_repo
from tests.e2e.conftest import models_dir
from tests.eventually import eventually
from tests.service_probes import events, wait_for_event

__all__ = ["models_dir"]  # the session fixture, used by svc below

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}
LLAMA_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory, models_dir: Path, hub_server: HubServer) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("llama-shapes")
    env = {"MODELROUTER_MODELS_DIR": str(models_dir), "HF_ENDPOINT": hub_server.url, "MODELROUTER_MODELS_MAX": "2"}
    with ServiceProcess(home, env=env) as proc:
        yield proc


def _llama_error(answer: httpx.Response, status: int) -> dict[str, Any]:
    """llama.cpp's error object, beside RFC 9457's members."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = answer.json()
    assert body["status"] == status and body["type"].startswith("/problems/")
    error = body["error"]
    assert set(error) == {"code", "message", "type"} and error["code"] == status and error["message"]
    assert error["type"] == LLAMA_TYPES.get(status, error["type"])
    return error


def _head(svc: ServiceProcess) -> int:
    return int(httpx.get(f"{svc.url}/health", timeout=10).json()["position"])


def _routed(svc: ServiceProcess, route: str, after: int, timeout: float = 30) -> dict[str, Any]:
    """The request_completed event proving the request reached a worker: the first for ``route``
    after position ``after`` (an earlier request to the route, e.g. a POST, may also be there)."""

    def found() -> list[dict[str, Any]]:
        return [
            e for e in events(svc, type="request_completed") if e["data"]["route"] == route and e["position"] > after
        ]

    return eventually(found, f"a request_completed for {route}", timeout=timeout, interval=0.05)[0]


@pytest.mark.timeout(60)
def test_router_props(svc: ServiceProcess) -> None:
    props = httpx.get(f"{svc.url}/props", timeout=10).json()
    assert props["role"] == "router" and props["max_instances"] == 2 and props["models_autoload"] is True
    assert props["ui_settings"] == {} and props["cors_proxy_enabled"] is False  # llama.cpp router's too
    assert props["model_alias"] == "llama-server" and props["model_path"] == "none"
    assert props["build_info"].startswith("b")
    assert props["default_generation_settings"] == {"params": {}, "n_ctx": 0}


@pytest.mark.timeout(120)
def test_load_and_unload_answer_success_true(svc: ServiceProcess) -> None:
    loaded = httpx.post(f"{svc.url}/models/load", json={"model": "tiny-b"}, timeout=30)
    assert loaded.status_code == 200 and loaded.json()["success"] is True
    wait_for_event(svc, "instance_ready", model="tiny-b", timeout=60)
    unloaded = httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-b"}, timeout=30)
    assert unloaded.status_code == 200 and unloaded.json()["success"] is True


@pytest.mark.timeout(120)
def test_download_and_delete_answer_success_true(svc: ServiceProcess, hub_server: HubServer, tmp_path: Path) -> None:
    repo = unique_repo("shapes")
    make_repo(hub_server.root, repo, {"m-Q4_K_M.gguf": write_tiny_gguf(tmp_path / "t.gguf").read_bytes()})
    pulled = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=30)
    assert pulled.status_code == 200 and pulled.json()["success"] is True
    wait_for_event(svc, "download_finished", model=f"{repo}:Q4_K_M", timeout=60)
    removed = httpx.delete(f"{svc.url}/models", params={"model": f"{repo}:Q4_K_M"}, timeout=30)
    assert removed.status_code == 200 and removed.json()["success"] is True


@pytest.mark.timeout(60)
def test_error_bodies_carry_llama_error_objects(svc: ServiceProcess) -> None:
    _llama_error(httpx.post(f"{svc.url}/models/load", json={"model": "nobody/none"}, timeout=10), 404)
    _llama_error(httpx.post(f"{svc.url}/models/load", json={}, timeout=10), 400)
    _llama_error(httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "nobody/none", **CHAT}, timeout=10), 404)
    _llama_error(httpx.post(f"{svc.url}/models/unload", json={"model": "tiny-a", "x": 1}, timeout=10), 409)
    _llama_error(httpx.post(f"{svc.url}/models", json={"model": "not a repo"}, timeout=10), 400)
    _llama_error(httpx.get(f"{svc.url}/nowhere", timeout=10), 404)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions", "/completion", "/tokenize"])
def test_autoload_off_is_400_not_loaded(svc: ServiceProcess, path: str) -> None:
    body = {"model": "broken-text", **CHAT, "prompt": "x", "content": "x"}
    answer = httpx.post(f"{svc.url}{path}", params={"autoload": "false"}, json=body, timeout=10)
    error = _llama_error(answer, 400)
    assert "not loaded" in error["message"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "messages",
    [[{"role": "user"}], [{"role": {}}], [{"role": "wizard", "content": "x"}], [], "hi", [{"role": "tool"}]],
    ids=str,
)
def test_malformed_chat_is_400_before_any_worker(svc: ServiceProcess, messages: object) -> None:
    """Before the fix: 500 "inference failed: 'content'", or a dropped connection reported as 503."""
    before = len(events(svc, type="instance_requested", model="broken-random"))
    answer = httpx.post(
        f"{svc.url}/v1/chat/completions", json={"model": "broken-random", "messages": messages}, timeout=30
    )
    error = _llama_error(answer, 400)
    assert "messages" in error["message"]
    assert len(events(svc, type="instance_requested", model="broken-random")) == before, "no worker started"


@pytest.mark.timeout(120)
def test_chat_completions_without_v1_prefix(svc: ServiceProcess) -> None:
    for path in ("/chat/completions", "/v1/chat/completions"):
        answer = httpx.post(f"{svc.url}{path}", json={"model": "tiny-a", **CHAT}, timeout=60)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["object"] == "chat.completion" and body["model"] == "tiny-a"
        assert body["choices"][0]["message"]["role"] == "assistant" and body["usage"]["completion_tokens"] >= 1
    # As in llama-server's server.cpp: /completions is the native /completion; only /v1/completions is OpenAI's.
    completion = httpx.post(f"{svc.url}/completions", json={"model": "tiny-a", "prompt": "once"}, timeout=60).json()
    assert isinstance(completion["content"], str) and "object" not in completion
    openai = httpx.post(f"{svc.url}/v1/completions", json={"model": "tiny-a", "prompt": "once"}, timeout=60).json()
    assert openai["object"] == "text_completion" and isinstance(openai["choices"][0]["text"], str)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", sorted(POST_ROUTES))
def test_every_post_route_reaches_the_worker(svc: ServiceProcess, path: str) -> None:
    """The worker answers what it serves and 404/501 for the rest; either way the
    request was routed (a request_completed event), and an error is a problem."""
    body = {"model": "tiny-a", **CHAT, "prompt": "x", "input": "x", "content": "x", "tokens": [1], "query": "q"}
    head = _head(svc)
    answer = httpx.post(f"{svc.url}{path}", json=body, timeout=60)
    assert answer.status_code in (200, 400, 404, 501), answer.text
    if answer.status_code != 200:
        _llama_error(answer, answer.status_code)
    assert _routed(svc, path, head)["data"]["status_code"] == answer.status_code


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", [*GET_ROUTES, "/props", "/metrics"])
def test_every_get_route_with_model_reaches_the_worker(svc: ServiceProcess, path: str) -> None:
    head = _head(svc)
    answer = httpx.get(f"{svc.url}{path}", params={"model": "tiny-a"}, timeout=60)
    assert answer.status_code in (200, 404, 501), answer.text
    assert _routed(svc, path, head)["data"]["status_code"] == answer.status_code


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", [*GET_ROUTES])
def test_get_routes_need_a_model(svc: ServiceProcess, path: str) -> None:
    _llama_error(httpx.get(f"{svc.url}{path}", timeout=10), 400)
