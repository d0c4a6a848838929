"""The download worker's byte path in-process: the hashing thread, writeback kicks, batching and HTTP client.

The end-to-end behaviour (resume, stalls, cancel by signal, disk full) is in
test_download_worker.py against the fake Hub; these tests pin the mechanisms
that could break it silently: every byte hashed exactly once across resume and
restart, the hasher thread never outliving a cancel, kicks covering the file,
redirects dropping the token across origins, Range ignored, chunked bodies,
and proxies from the environment.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import workers.download._partial_file as partial_mod
from tests.tls import self_signed
from workers.download import (
    CANCEL,
    Interrupted,
    Interrupts,
    PartialFile,
    ProgressMeter,
    TransferConfig,
    TransferError,
    fetch_blob,
)
from workers.download._http_client import _keeps_credentials, _proxy_for, _tls_context

DATA = os.urandom(3 * 1024 * 1024 + 12345)
SHA = hashlib.sha256(DATA).hexdigest()


def _hasher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sha256" and t.is_alive()]


def _write_in_pieces(part: PartialFile, data: bytes, piece: int) -> None:
    view = memoryview(data)
    for i in range(0, len(data), piece):
        part.write(view[i : i + piece])


# --- PartialFile ------------------------------------------------------------------------


def test_every_byte_is_hashed_once_by_the_thread(tmp_path: Path) -> None:
    part = PartialFile(str(tmp_path / "p"), len(DATA))
    try:
        _write_in_pieces(part, DATA, 100_003)
        assert part.digest(Interrupts()) == SHA
    finally:
        part.close()
    assert (tmp_path / "p").read_bytes() == DATA
    assert not _hasher_threads()


def test_resume_hashes_the_existing_prefix_and_oversized_partials_reset(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_bytes(DATA[:1_000_000])
    part = PartialFile(str(path), len(DATA))
    try:
        assert part.have == 1_000_000
        _write_in_pieces(part, DATA[1_000_000:], 65536)
        assert part.digest(Interrupts()) == SHA
    finally:
        part.close()

    path.write_bytes(DATA + b"extra")  # longer than the blob can be
    part = PartialFile(str(path), len(DATA))
    try:
        assert part.have == 0 and path.stat().st_size == 0
    finally:
        part.close()


def test_restart_drops_the_bytes_and_the_hash(tmp_path: Path) -> None:
    part = PartialFile(str(tmp_path / "p"), len(DATA))
    try:
        _write_in_pieces(part, b"x" * 500_000, 70_000)
        part.restart()
        assert part.have == 0 and os.fstat(part.fd).st_size == 0
        _write_in_pieces(part, DATA, 1 << 20)
        assert part.digest(Interrupts()) == SHA
    finally:
        part.close()
    assert len(_hasher_threads()) == 0


def test_writeback_kicks_cover_the_file_in_whole_mib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kicks: list[tuple[int, int]] = []
    monkeypatch.setattr(partial_mod, "KICK_BYTES", 1 << 20)
    monkeypatch.setattr(partial_mod, "_sync_file_range", lambda: lambda fd, off, n: kicks.append((off, n)))
    part = PartialFile(str(tmp_path / "p"), len(DATA))
    try:
        _write_in_pieces(part, DATA, 300_000)
        assert part.digest(Interrupts()) == SHA
        part.sync()
    finally:
        part.close()
    assert kicks[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(kicks))  # contiguous
    assert all(n % (1 << 20) == 0 for _, n in kicks) and sum(n for _, n in kicks) == len(DATA) & ~0xFFFFF

    kicks.clear()
    part = PartialFile(str(tmp_path / "q"), len(DATA), fsync=False)  # --no-fsync: no writeback work either
    try:
        _write_in_pieces(part, DATA, 300_000)
        part.digest(Interrupts())
    finally:
        part.close()
    assert kicks == []


def test_sync_file_range_works_here(tmp_path: Path) -> None:
    kick = partial_mod._sync_file_range()
    if kick is None:
        pytest.skip("no sync_file_range in this libc")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, DATA)
        assert kick(fd, 0, len(DATA)) == 0
    finally:
        os.close(fd)


@pytest.mark.timeout(60)
def test_a_cancel_while_waiting_for_the_hasher_is_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashing, release, returned = threading.Event(), threading.Event(), threading.Event()

    class StuckSha:
        """The hasher thread hangs in its first update until the test lets go: only a cancel can end digest()."""

        def update(self, data: Any) -> None:
            hashing.set()
            release.wait()

        def hexdigest(self) -> str:
            return ""

    def cancel_once_hashing() -> None:
        if hashing.wait(30):
            interrupts.request(CANCEL)
        if not returned.wait(30):
            release.set()  # digest ignored the cancel: let it finish, so the test fails instead of hanging

    monkeypatch.setattr(hashlib, "sha256", StuckSha)  # what the hasher thread creates
    part = PartialFile(str(tmp_path / "p"), len(DATA))
    interrupts = Interrupts()
    canceller = threading.Thread(target=cancel_once_hashing)
    try:
        part.write(memoryview(DATA))
        canceller.start()
        with pytest.raises(Interrupted):
            part.digest(interrupts)
    finally:
        returned.set()
        release.set()
        if canceller.is_alive():
            canceller.join()
        part.close()
    assert not _hasher_threads() and part.fd == -1


# --- fetch_blob against a local server ------------------------------------------------


class _Server:
    """A one-file HTTP server whose behaviour a test sets: ranges, chunking, redirects, pacing."""

    def __init__(self, data: bytes = DATA, tls: ssl.SSLContext | None = None) -> None:
        self.data = data
        self.requests: list[dict[str, Any]] = []
        self.honour_range = True
        self.chunked = False
        self.redirect_to: str | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
                if outer.redirect_to and self.path == "/file":
                    self.send_response(302)
                    self.send_header("Location", outer.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start, rng = 0, self.headers.get("Range")
                if rng and outer.honour_range:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(outer.data) - 1}/{len(outer.data)}")
                else:
                    self.send_response(200)
                body = outer.data[start:]
                if outer.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(0, len(body), 65536):
                    piece = body[i : i + 65536]
                    if outer.chunked:
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    else:
                        self.wfile.write(piece)
                if outer.chunked:
                    self.wfile.write(b"0\r\n\r\n")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[Callable[..., _Server]]:
    made: list[_Server] = []

    def make(tls: ssl.SSLContext | None = None) -> _Server:
        made.append(_Server(tls=tls))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _fetch(
    url: str,
    path: Path,
    *,
    headers: dict[str, str] | None = None,
    interrupts: Interrupts | None = None,
    counted: int = 0,
    emit: Callable[[dict[str, Any]], None] = lambda _: None,
) -> ProgressMeter:
    meter = ProgressMeter(len(DATA), counted, emit)
    cfg = TransferConfig(stall_timeout=5, connect_timeout=5, max_retries=1, retry_base=0.01, retry_cap=0.05)
    fetch_blob(url, headers or {}, str(path), len(DATA), SHA, cfg, meter, interrupts or Interrupts(), counted)
    return meter


def test_redirects_keep_range_and_drop_the_token_across_origins(
    servers: Callable[..., _Server], tmp_path: Path
) -> None:
    hub, cdn = servers(), servers()
    hub.redirect_to = f"{cdn.url}/blob"  # another port: another origin
    (tmp_path / "p").write_bytes(DATA[:1000])
    _fetch(f"{hub.url}/file", tmp_path / "p", headers={"Authorization": "Bearer hf_secret"}, counted=1000)
    assert (tmp_path / "p").read_bytes() == DATA
    assert hub.requests[0]["authorization"] == "Bearer hf_secret" and hub.requests[0]["range"] == "bytes=1000-"
    assert "authorization" not in cdn.requests[0] and cdn.requests[0]["range"] == "bytes=1000-"

    assert _keeps_credentials("http://h/a", "http://h:80/b") and _keeps_credentials("http://h/a", "https://h/b")
    assert not _keeps_credentials("https://h/a", "http://h/b") and not _keeps_credentials("http://h/a", "http://g/a")


def test_a_server_ignoring_range_restarts_from_zero(servers: Callable[..., _Server], tmp_path: Path) -> None:
    server = servers()
    server.honour_range = False
    (tmp_path / "p").write_bytes(b"\0" * 2_000_000)  # wrong bytes: must not survive into the hash
    meter = _fetch(f"{server.url}/file", tmp_path / "p", counted=2_000_000)
    assert (tmp_path / "p").read_bytes() == DATA
    assert meter.done == meter.transferred == len(DATA)


def test_chunked_bodies_are_received(servers: Callable[..., _Server], tmp_path: Path) -> None:
    server = servers()
    server.chunked = True
    _fetch(f"{server.url}/file", tmp_path / "p")
    assert (tmp_path / "p").read_bytes() == DATA


def test_cancel_mid_transfer_keeps_a_resumable_partial(servers: Callable[..., _Server], tmp_path: Path) -> None:
    server = servers()
    interrupts = Interrupts()
    # Cancel on the first progress event: some bytes are on disk, most are still to come.
    with pytest.raises(Interrupted):
        _fetch(f"{server.url}/file", tmp_path / "p", interrupts=interrupts, emit=lambda _: interrupts.request(CANCEL))
    kept = (tmp_path / "p").stat().st_size
    assert 0 < kept < len(DATA) and (tmp_path / "p").read_bytes() == DATA[:kept]
    assert not _hasher_threads()

    meter = _fetch(f"{server.url}/file", tmp_path / "p", counted=kept)
    assert meter.transferred == len(DATA) - kept and (tmp_path / "p").read_bytes() == DATA
    assert server.requests[-1]["range"] == f"bytes={kept}-"


def test_wrong_bytes_are_refused_and_deleted(servers: Callable[..., _Server], tmp_path: Path) -> None:
    server = servers()
    server.data = DATA[:-1] + bytes([DATA[-1] ^ 1])
    with pytest.raises(TransferError) as failure:
        _fetch(f"{server.url}/file", tmp_path / "p")
    assert failure.value.reason == "checksum_mismatch" and not (tmp_path / "p").exists()


def test_an_http_proxy_from_the_environment(
    servers: Callable[..., _Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = servers()  # answers absolute-form requests itself, like a forward proxy would
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", f"http://user:p%40ss@{proxy.url.removeprefix('http://')}")
    monkeypatch.setenv("NO_PROXY", "bypassed.example")
    _fetch("http://files.example/file", tmp_path / "p")
    assert (tmp_path / "p").read_bytes() == DATA
    first = proxy.requests[0]
    assert first["path"] == "http://files.example/file" and first["host"] == "files.example"
    assert first["proxy-authorization"] == "Basic dXNlcjpwQHNz"  # user:p@ss
    assert _proxy_for("http", "bypassed.example") is None
    assert _proxy_for("https", "files.example") is None  # no HTTPS_PROXY set


def _clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


class _ConnectProxy:
    """A forward proxy that only tunnels (CONNECT host:port), recording what it was asked."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            more = client.recv(4096)
            if not more:
                return
            head += more
        line = head.split(b"\r\n", 1)[0].decode()
        self.requests.append(line)
        host, _, port = line.split()[1].rpartition(":")
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pair = {client: upstream, upstream: client}
        while True:
            readable, _, _ = select.select(list(pair), [], [], 5)
            if not readable:
                break
            data = readable[0].recv(1 << 16)
            if not data:
                break
            pair[readable[0]].sendall(data)
        client.close()
        upstream.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


def test_https_directly_and_through_a_connect_proxy(
    servers: Callable[..., _Server], tmp_path: Path, tls_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server = servers(tls=server_ctx)
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust our certificate, as a user with a private CA would
    _tls_context.cache_clear()
    proxy = _ConnectProxy()
    try:
        _fetch(f"{server.url}/file", tmp_path / "direct")
        assert (tmp_path / "direct").read_bytes() == DATA

        port = server.url.rpartition(":")[2]
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        _fetch(f"https://localhost:{port}/file", tmp_path / "tunnelled")
        assert (tmp_path / "tunnelled").read_bytes() == DATA
        assert [r.rsplit(" ", 1)[0] for r in proxy.requests] == [f"CONNECT localhost:{port}"]
    finally:
        proxy.close()
        _tls_context.cache_clear()
