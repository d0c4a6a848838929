"""The service's hop client: plain HTTP to the workers, and ``https://`` still verified (made on first use)."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.outside.hop_client import hop_client
from tests.tls import self_signed


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(tls: ssl.SSLContext | None) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


@pytest.fixture
def plain() -> Iterator[str]:
    yield from _serve(None)


@pytest.fixture
def tls(cert: tuple[Path, Path]) -> Iterator[str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*cert)
    yield from _serve(context)


def _client() -> httpx.AsyncClient:
    return hop_client(httpx.Timeout(10.0), httpx.Limits(max_connections=4))


async def test_plain_http_is_served(plain: str) -> None:
    async with _client() as client:
        assert (await client.get(f"{plain}/")).text == "hello"


async def test_https_is_verified_an_untrusted_certificate_is_refused(tls: str) -> None:
    # A transport without verification (the one plain http:// uses) would have answered "hello".
    async with _client() as client:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.get(f"{tls}/")
