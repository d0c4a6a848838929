"""Fixtures: ``modelrouter serve`` started with llama-server command lines, the project's
Hub serving repos laid out as on the real Hub, and tiny real GGUFs."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.handlers import HTTPRouteHandler

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.service_process import ServiceProcess
from devtools.tiny_gguf import write_split_tiny_gguf, write_tiny_gguf
from devtools.tiny_mmproj import tiny_mmproj_bytes
from service.api.auth import PUBLIC_PATHS, PUBLIC_PREFIX
from service.app import create_app
from service.settings import Settings
from tests.conftest_hub import unique_repo
from tests.eventually import eventually

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 3}


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
"""A tool the tests' chats call (the city is an enum, so a grammar can only write one of two)."""


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a tiny GGUF that llama.cpp loads."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf").read_bytes()


@pytest.fixture(scope="session")
def split_parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """The two parts of the tiny model as a real split GGUF (llama.cpp loads it from part 1)."""
    parts = write_split_tiny_gguf(tmp_path_factory.mktemp("split") / "tiny.gguf", parts=2)
    return parts[0].read_bytes(), parts[1].read_bytes()


@pytest.fixture
def models_dir(tmp_path: Path, tiny: bytes) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    for name in ("tiny-a", "tiny-b"):
        (root / f"{name}.gguf").write_bytes(tiny)
    return root


Serve = Callable[..., ServiceProcess]


@pytest.fixture
def serve(tmp_path: Path, hub: HubServer) -> Iterator[Serve]:
    """``serve(*llama_server_args, env={...})``: the real service, pointed at the test Hub."""
    started: list[ServiceProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, home: Path | None = None) -> ServiceProcess:
        proc = ServiceProcess(
            home or tmp_path / f"home{len(started)}", args=args, env={"HF_ENDPOINT": hub.url, **(env or {})}
        )
        started.append(proc)
        return proc.start(timeout=60)

    yield start
    for proc in started:
        proc.stop()


def gguf_repo(hub: HubServer, tiny: bytes, prefix: str, files: dict[str, int | bytes] | None = None) -> str:
    """A repo as on the real Hub: tag-named GGUFs (``<prefix>-Q8_0.gguf`` is a tiny real model)."""
    repo = unique_repo(prefix)
    make_repo(hub.root, repo, files or {f"{prefix}-Q8_0.gguf": tiny, "README.md": b"# model card\n"})
    return repo


def split_repo(hub: HubServer, tiny: bytes, split_parts: tuple[bytes, bytes], prefix: str = "split") -> str:
    """A repo as large models are laid out on the Hub: a split quant, a single-file quant,
    a multimodal projector and a model card."""
    repo = unique_repo(prefix)
    make_repo(
        hub.root,
        repo,
        {
            f"{prefix}-Q4_K_M-00001-of-00002.gguf": split_parts[0],
            f"{prefix}-Q4_K_M-00002-of-00002.gguf": split_parts[1],
            f"{prefix}-Q8_0.gguf": tiny,
            "mmproj-F16.gguf": tiny_mmproj_bytes(),
            "README.md": b"# model card\n",
        },
    )
    return repo


def models(svc: ServiceProcess, **headers: str) -> dict[str, dict[str, Any]]:
    answer = httpx.get(f"{svc.url}/models", headers=headers, timeout=30)
    answer.raise_for_status()
    return {m["id"]: m for m in answer.json()["data"]}


def chat(svc: ServiceProcess, model: str, timeout: float = 120, **headers: str) -> httpx.Response:
    return httpx.post(f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, headers=headers, timeout=timeout)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    eventually(predicate, what, timeout=timeout, interval=0.05)


def route_table(settings: Settings) -> list[tuple[str, str]]:
    """Every (method, path) the app serves (path parameters filled in), read from the app itself so
    that routes other features add are covered too; ``settings`` decides the mode (``model_file``:
    single-model mode's handlers)."""
    table = []
    for route in create_app(settings).routes:
        path = re.sub(r"\{[^}:]+:int\}", "0", re.sub(r"\{[^}:]+:(str|path)\}", "x", route.path))
        for handler in getattr(route, "route_handlers", []):
            if isinstance(handler, HTTPRouteHandler):
                table += [(m, path) for m in sorted(handler.http_methods) if m not in {"OPTIONS", "HEAD"}]
    return sorted(set(table))


def assert_every_route_needs_the_key(svc: ServiceProcess, table: list[tuple[str, str]], origin: str) -> None:
    """Each route of ``table`` but /health and the dashboard's files answers llama-server's 401 to a
    request without the key, with the CORS header for ``origin`` (llama-server's 401 carries it)."""
    for method, path in table:
        answer = httpx.request(method, f"{svc.url}{path}", headers={"Origin": origin}, timeout=30)
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX):
            assert answer.status_code != 401, path
            continue
        assert answer.status_code == 401, (method, path, answer.status_code)
        if path.startswith("/api/"):  # Ollama's API speaks Ollama's error shape (docs/ollama-compat.md)
            assert answer.json() == {"error": "Invalid API Key"}, path
        else:
            error = answer.json()["error"]
            assert error == {"message": "Invalid API Key", "type": "authentication_error", "code": 401}, path
        assert answer.headers["access-control-allow-origin"] == origin, path


def close_vectors(got: list[float], want: list[float]) -> bool:
    """Equal to float32 rounding (pooled embeddings compared with per-token rows)."""
    return len(got) == len(want) and all(
        math.isclose(g, w, rel_tol=1e-3, abs_tol=1e-4) for g, w in zip(got, want, strict=True)
    )


def unit_vector(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec]


def assert_preflight(url: str, path: str, origin: str) -> None:
    """An ``OPTIONS`` preflight to ``path`` from ``origin``: llama-server's empty 200 and its headers."""
    preflight = httpx.options(
        f"{url}{path}",
        timeout=30,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 200 and preflight.content == b""
    assert preflight.headers["access-control-allow-origin"] == origin
    assert preflight.headers["access-control-allow-credentials"] == "true"
    assert preflight.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert preflight.headers["access-control-allow-headers"] == "*"


def streamed_tool_call(chunks: Iterator[Any]) -> tuple[list[str], list[str], str, str | None, int]:
    """A streamed chat's one tool call (``openai`` chunks): its ids, names, the arguments' text, the
    finish reason and how many deltas carried it."""
    ids: list[str] = []
    names: list[str] = []
    args, finish, pieces = "", None, 0
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta, finish = chunk.choices[0].delta, chunk.choices[0].finish_reason or finish
        for call in delta.tool_calls or []:
            assert call.index == 0
            ids += [call.id] if call.id else []
            names += [call.function.name] if call.function and call.function.name else []
            args += call.function.arguments or "" if call.function else ""
            pieces += 1
    return ids, names, args, finish, pieces
