"""Our answers against Ollama's documented examples (tests/ollama/fixtures, from its docs/api.md):
every documented member is there, with the same JSON type, nested members included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from service.api.ollama import OLLAMA_HANDLERS
from tests.ollama.conftest import hub_server, ollama_models, publish_tiny, svc

__all__ = ["hub_server", "ollama_models", "svc"]

FIXTURES = Path(__file__).parent / "fixtures"
# Documented members we leave out on purpose (docs/ollama-compat.md): generate's deprecated
# ``context`` (token ids of the conversation: llama.cpp's prompt cache does that job here), a
# chat message's ``images: null``, and the pull's "removing any unused layers" (nothing to remove).
OMITTED = {"context", "images"}
FREE_FORM = {"model_info"}  # the header's own keys: every architecture has others
GREEDY = {"temperature": 0.0, "num_predict": 3}


def _kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    return "number" if isinstance(value, int | float) else type(value).__name__


def _missing(doc: Any, ours: Any, where: str = "$") -> list[str]:
    """What the documented example has that ours lacks or types differently (recursively)."""
    if _kind(doc) != _kind(ours):
        return [f"{where}: documented {_kind(doc)}, ours {_kind(ours)} ({ours!r:.80})"]
    if isinstance(doc, dict):
        found = []
        for key, value in doc.items():
            if key in OMITTED:
                continue
            if key not in ours:
                found.append(f"{where}.{key}: missing")
            elif key in FREE_FORM:
                found += [] if isinstance(ours[key], dict) else [f"{where}.{key}: not an object"]
            else:
                found += _missing(value, ours[key], f"{where}.{key}")
        return found
    if isinstance(doc, list) and doc and ours:
        return _missing(doc[0], ours[0], f"{where}[0]")
    return []


def _fixture(name: str) -> Any:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def _lines(svc: ServiceProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", svc.url + path, json=body, timeout=60) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-ndjson"
        return [json.loads(line) for line in answer.iter_lines() if line]


def _post(svc: ServiceProcess, path: str, body: dict[str, Any]) -> Any:
    answer = httpx.post(svc.url + path, json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    return answer.json()


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def _answers(svc: ServiceProcess, repo: str) -> dict[str, Any]:
    chat = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "options": GREEDY}
    generate = {"model": "chat", "prompt": "hi", "options": GREEDY}
    chat_lines, generate_lines = _lines(svc, "/api/chat", chat), _lines(svc, "/api/generate", generate)
    calling = _lines(svc, "/api/chat", {**chat, "model": "tools", "tools": [WEATHER]})  # it always calls (conftest)
    pull = _lines(svc, "/api/pull", {"model": f"hf.co/{repo}:Q8_0"})
    return {
        "version": httpx.get(svc.url + "/api/version", timeout=10).json(),
        "tags": httpx.get(svc.url + "/api/tags", timeout=10).json(),
        "show": _post(svc, "/api/show", {"model": "chat"}),
        "chat_chunk": chat_lines[0],
        "chat_final": chat_lines[-1],
        "chat_tool_call_chunk": next(line for line in calling if "tool_calls" in line["message"]),
        "chat_no_stream": _post(svc, "/api/chat", {**chat, "stream": False}),
        "generate_chunk": generate_lines[0],
        "generate_final": generate_lines[-1],
        "generate_no_stream": _post(svc, "/api/generate", {**generate, "stream": False}),
        "ps": httpx.get(svc.url + "/api/ps", timeout=10).json(),
        "embed": _post(svc, "/api/embed", {"model": "chat", "input": ["a", "b"]}),
        "embeddings": _post(svc, "/api/embeddings", {"model": "chat", "prompt": "a"}),
        "pull_manifest": pull[0],
        "pull_layer": [line for line in pull if "digest" in line][-1],  # the first may lack `completed`, as documented
        "pull_tail": [line for line in pull if "digest" not in line][1:],
        "generate_load": _post(svc, "/api/generate", {"model": "chat"}),
        "chat_load": _post(svc, "/api/chat", {"model": "chat", "messages": []}),
        "generate_unload": _post(svc, "/api/generate", {"model": "chat", "keep_alive": 0}),
        "chat_unload": _post(svc, "/api/chat", {"model": "chat", "messages": [], "keep_alive": 0}),
    }


@pytest.fixture(scope="module")
def answers(svc: ServiceProcess, hub_server: HubServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _answers(svc, publish_tiny(hub_server, tmp_path_factory.mktemp("contract")))


LIVE = [
    "version",
    "tags",
    "show",
    "chat_chunk",
    "chat_final",
    "chat_tool_call_chunk",
    "chat_no_stream",
    "generate_chunk",
    "generate_final",
    "generate_no_stream",
    "ps",
    "embed",
    "embeddings",
    "pull_manifest",
    "pull_layer",
    "generate_load",
    "chat_load",
    "generate_unload",
    "chat_unload",
]


@pytest.mark.parametrize("name", LIVE)
def test_every_documented_member_is_answered_with_its_type(answers: dict[str, Any], name: str) -> None:
    assert _missing(_fixture(name), answers[name]) == []


def test_the_pull_ends_as_documented(answers: dict[str, Any]) -> None:
    documented = [line["status"] for line in _fixture("pull_tail")]
    ours = [line["status"] for line in answers["pull_tail"]]
    assert ours == [s for s in documented if s != "removing any unused layers"]


def test_a_tool_call_chunk_has_the_documented_shape(answers: dict[str, Any]) -> None:
    """A live worker's call (the ``tools`` model's forced reply), not only the translation of one."""
    documented = _fixture("chat_tool_call_chunk")["message"]["tool_calls"]
    ours = answers["chat_tool_call_chunk"]["message"]["tool_calls"]
    assert ours == [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    assert [set(c["function"]) for c in ours] == [set(c["function"]) for c in documented]


def test_copy_and_delete_answer_the_documented_status_only(svc: ServiceProcess) -> None:
    """Ollama documents these by status: 200 (its server writes no body: an empty one), or 404 for
    an unknown source or model."""
    copied = httpx.post(f"{svc.url}/api/copy", json={"source": "chat", "destination": "contract-copy"}, timeout=10)
    assert (copied.status_code, copied.content) == (200, b"")
    deleted = httpx.request("DELETE", f"{svc.url}/api/delete", json={"model": "contract-copy"}, timeout=10)
    assert (deleted.status_code, deleted.content) == (200, b"")
    for method, path, body in (
        ("POST", "/api/copy", {"source": "nope", "destination": "other"}),
        ("DELETE", "/api/delete", {"model": "contract-copy"}),
    ):
        missing = httpx.request(method, svc.url + path, json=body, timeout=10)
        assert missing.status_code == 404 and set(missing.json()) == {"error"}


def test_every_route_has_a_fixture_or_a_reason() -> None:
    """A new route without a documented example to compare with fails here."""
    paths = {path for handler in OLLAMA_HANDLERS for path in handler.paths}
    status_only = {"/delete", "/copy"}  # Ollama documents a status code only: compared above
    refused = {"/create", "/push"}  # no Modelfiles, no registry: test_client's errors test
    compared = {"/version", "/tags", "/show", "/chat", "/generate", "/ps", "/embed", "/embeddings", "/pull"}
    assert paths == compared | status_only | refused
