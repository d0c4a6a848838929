"""llama-server's server-level behaviour: ``--api-key`` on every route, CORS (``--cors-origins``),
``--host a,b``, ``--offline`` with an explicit pull, and a client that hangs up while its model loads."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from devtools.hub_server import HubServer
from service.api.cors import CorsPolicy
from service.settings import Settings
from tests.dropin.conftest import (
    CHAT,
    Serve,
    assert_every_route_needs_the_key,
    assert_preflight,
    gguf_repo,
    models,
    route_table,
    wait_until,
)
from tests.service_probes import wait_for_event

KEY = "sk-modelrouter-server-0123456789"
ORIGIN = "http://app.example"


@pytest.mark.timeout(240)
def test_api_key_and_cors_on_every_route(serve: Serve, models_dir: Path) -> None:
    """``--api-key K --cors-origins ORIGIN``: every route of the table but /health and the dashboard's
    files answers llama-server's 401 without the key (with the CORS header, as llama-server's 401
    carries it); ``X-Api-Key`` (Anthropic clients) is accepted as ``Authorization: Bearer`` is; a
    preflight needs no key and gets llama-server's ``Access-Control-Allow-*`` (server-http.cpp)."""
    svc = serve("--models-dir", str(models_dir), "--api-key", KEY, "--cors-origins", ORIGIN)
    table = route_table(Settings(home=svc.home, api_keys=(KEY,)))
    assert ("GET", "/metrics") in table and ("GET", "/cors-proxy") in table and len(table) > 40
    assert_every_route_needs_the_key(svc, table, ORIGIN)

    assert "tiny-a" in models(svc, **{"X-Api-Key": KEY}) and "tiny-a" in models(svc, Authorization=f"Bearer {KEY}")
    proxy = httpx.get(f"{svc.url}/cors-proxy", params={"url": "http://x"}, headers={"X-Api-Key": KEY}, timeout=30)
    assert proxy.status_code == 403, "llama-server without --ui-mcp-proxy"
    assert proxy.json()["error"] == {"message": "this feature is disabled", "type": "feature_disabled"}

    assert_preflight(svc.url, "/v1/chat/completions", ORIGIN)
    other = httpx.get(f"{svc.url}/health", headers={"Origin": "http://elsewhere.example"}, timeout=30)
    assert other.headers["access-control-allow-origin"] == ORIGIN, "one origin: sent as it is, as llama-server"


def test_cors_origins_as_llama_server_answers_them(tmp_path: Path) -> None:
    """``*`` with credentials echoes the Origin; ``localhost`` echoes only a local one; a list is
    matched (llama-server would send it as it is, which no browser accepts: docs/llama-cpp-compat.md)."""
    star = CorsPolicy(Settings(home=tmp_path))
    assert star.allow_origin(ORIGIN) == (ORIGIN, True)
    assert CorsPolicy(Settings(home=tmp_path, cors_credentials=False)).allow_origin(ORIGIN) == ("*", False)
    local = CorsPolicy(Settings(home=tmp_path, cors_origins="localhost"))
    assert local.allow_origin("http://localhost:5173") == ("http://localhost:5173", True)
    assert local.allow_origin("http://[::1]:80")[0] == "http://[::1]:80" and local.allow_origin(ORIGIN)[0] is None
    listed = CorsPolicy(Settings(home=tmp_path, cors_origins=f"{ORIGIN}, http://b.example"))
    assert (
        listed.allow_origin("http://b.example")[0] == "http://b.example" and listed.allow_origin("http://c")[0] is None
    )


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.timeout(120)
@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_every_host_given_is_bound(serve: Serve, models_dir: Path) -> None:
    """``--host 127.0.0.1,::1``: llama-server binds each address (server-http.cpp); so does the service."""
    svc = serve("--models-dir", str(models_dir), "--host", "127.0.0.1,::1")
    assert httpx.get(f"http://127.0.0.1:{svc.port}/health", timeout=10).status_code == 200
    assert httpx.get(f"http://[::1]:{svc.port}/health", timeout=10).status_code == 200


@pytest.mark.timeout(240)
def test_offline_still_downloads_an_explicit_pull(serve: Serve, hub: HubServer, tiny: bytes, models_dir: Path) -> None:
    """``--offline`` keeps start-up off the network, but ``POST /models`` downloads, as llama.cpp's
    router does (its ``--offline`` only keeps ``-hf`` resolution on the cache); HF_HUB_OFFLINE as well."""
    repo = gguf_repo(hub, tiny, "pulled")
    hub.reset_stats()
    svc = serve("--offline", "--models-dir", str(models_dir), env={"HF_HUB_OFFLINE": "1"})
    assert hub.stats()["requests"] == [], "start-up asks nothing of the Hub"
    pulled = httpx.post(f"{svc.url}/models", json={"model": repo}, timeout=60)
    assert pulled.status_code in (200, 201, 202), pulled.text
    wait_for_event(svc, "download_finished", timeout=120)
    wait_until(lambda: any(name.startswith(repo) for name in models(svc)), "the pulled model listed")


@pytest.mark.timeout(240)
def test_a_client_that_hangs_up_during_a_load_is_no_error(serve: Serve, models_dir: Path) -> None:
    """A client that gives up while its model loads: the request ends quietly (logged as
    ``client_disconnected``), no ``CancelledError`` in the service log, and the service serves on."""
    svc = serve("--models-dir", str(models_dir))
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, timeout=0.05)
    wait_until(lambda: "client_disconnected" in svc.log_text(), "the hang-up logged", timeout=60)
    assert httpx.post(f"{svc.url}/v1/chat/completions", json={"model": "tiny-a", **CHAT}, timeout=120).is_success
    log = svc.log_text()
    assert "CancelledError" not in log and "Exception in ASGI application" not in log
