"""Header names on the wire in llama-server's case (``Access-Control-Allow-Origin``,
``Process-Start-Time-Unix``), compared as bytes: scripts and llama.cpp's own server tests
(``dict(response.headers)``) compare them as plain strings.

llama-server's spellings: ``tools/server/server-http.cpp`` (its pre-routing handler, CORS) and
``tools/server/server-context.cpp`` (``GET /metrics``). Each mode is checked on the service's own
answers (a preflight, ``/v1/models``, ``/metrics``) and on one a worker answers through the proxy.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from devtools.service_process import ServiceProcess
from tests.dropin.conftest import CHAT, Serve

ORIGIN = "http://web.example"
CORS = (b"Access-Control-Allow-Origin", b"Vary")
PREFLIGHT = (
    *CORS,
    b"Access-Control-Allow-Credentials",
    b"Access-Control-Allow-Methods",
    b"Access-Control-Allow-Headers",
)


def _names(answer: httpx.Response) -> list[bytes]:
    """The header names exactly as the server wrote them (httpx keeps their case in ``.raw``)."""
    return [name for name, _ in answer.headers.raw]


def _assert_named(answer: httpx.Response, expected: tuple[bytes, ...]) -> None:
    names = _names(answer)
    for name in expected:
        assert name in names, (name, names)
        assert names.count(name) == 1, names
    assert not [n for n in names if n.lower() in {e.lower() for e in expected} and n not in expected], names


def _check_service(svc: ServiceProcess, model: str) -> None:
    """The preflight, a simple request, the router's /metrics and a proxied completion."""
    preflight = httpx.options(
        f"{svc.url}/v1/chat/completions",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
        timeout=30,
    )
    assert preflight.status_code == 200
    _assert_named(preflight, PREFLIGHT)
    assert dict(preflight.headers.raw)[b"Access-Control-Allow-Origin"] == ORIGIN.encode()

    simple = httpx.get(f"{svc.url}/v1/models", headers={"Origin": ORIGIN}, timeout=30)
    assert simple.status_code == 200
    _assert_named(simple, CORS)

    metrics = httpx.get(f"{svc.url}/metrics", timeout=30)
    assert metrics.status_code == 200, metrics.text
    _assert_named(metrics, (b"Process-Start-Time-Unix",))
    started = int(dict(metrics.headers.raw)[b"Process-Start-Time-Unix"])
    assert time.time() - 3600 < started <= time.time()  # this process's start, in Unix seconds

    proxied = httpx.post(
        f"{svc.url}/v1/chat/completions", json={"model": model, **CHAT}, headers={"Origin": ORIGIN}, timeout=120
    )
    assert proxied.status_code == 200, proxied.text
    _assert_named(proxied, CORS)
    assert dict(proxied.headers.raw)[b"Access-Control-Allow-Origin"] == ORIGIN.encode()


@pytest.mark.timeout(240)
def test_router_mode_sends_llama_server_header_names(serve: Serve, models_dir: Path) -> None:
    """Router mode, and a model's own ``/metrics?model=`` relayed from its worker."""
    svc = serve("--models-dir", str(models_dir), "--metrics")
    _check_service(svc, "tiny-a")
    routed = httpx.get(f"{svc.url}/metrics", params={"model": "tiny-a"}, headers={"Origin": ORIGIN}, timeout=60)
    assert routed.status_code == 200, routed.text
    assert "llamacpp:" in routed.text
    _assert_named(routed, (b"Process-Start-Time-Unix", *CORS))
    worker_started = int(dict(routed.headers.raw)[b"Process-Start-Time-Unix"])
    assert time.time() - 3600 < worker_started <= time.time()


@pytest.mark.timeout(240)
def test_single_model_mode_sends_llama_server_header_names(serve: Serve, models_dir: Path) -> None:
    svc = serve("-m", str(models_dir / "tiny-a.gguf"), "--metrics")
    _check_service(svc, "tiny-a")


@pytest.mark.timeout(120)
def test_tools_limit_cors_to_localhost_unless_origins_are_given(serve: Serve, models_dir: Path) -> None:
    """llama-server (``common/arg.cpp``): with ``--tools`` (or ``--agent``, MCP servers) and no
    ``--cors-origins``, only a local Origin is reflected (``test_cors_origins_defaults_to_localhost_with_tools_enabled``)."""

    def allowed(svc: ServiceProcess, origin: str) -> bytes | None:
        answer = httpx.options(
            f"{svc.url}/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}, timeout=30
        )
        assert answer.status_code == 200
        return dict(answer.headers.raw).get(b"Access-Control-Allow-Origin")

    tools = serve("--models-dir", str(models_dir), "--tools", "all")
    assert allowed(tools, "http://localhost:8080") == b"http://localhost:8080"
    assert allowed(tools, "http://evil.com") is None
    given = serve("--models-dir", str(models_dir), "--tools", "all", "--cors-origins", "*")
    assert allowed(given, "http://evil.com") == b"http://evil.com"
