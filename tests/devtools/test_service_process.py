"""devtools/service_process.py: the harness every service test starts ``modelrouter serve`` with."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from devtools.service_process import PortTaken, ServiceProcess


def _listen_on(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.mark.timeout(120)
def test_a_drawn_port_taken_before_the_service_binds_it_is_drawn_again(tmp_path: Path) -> None:
    """Another process (a worker of another service) may take the free port drawn for the service
    before the service binds it: the harness draws another rather than failing the test."""
    svc = ServiceProcess(tmp_path / "home")
    taken = svc.port
    with _listen_on(taken):
        try:
            svc.start(timeout=60)
            assert svc.port != taken
            assert "couldn't bind" in (tmp_path / "home" / f"service-{taken}.log").read_text()
        finally:
            svc.stop()


class _Healthy(BaseHTTPRequestHandler):
    """Another service's /health: 200, and not ours."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status": "ok", "stranger": true}')

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def _answering_on(port: int) -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", port), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(120)
def test_a_stranger_answering_on_the_drawn_port_is_not_taken_for_the_service(tmp_path: Path) -> None:
    """The process that took the port may answer /health itself (another service, a worker): its 200
    is not ours. The harness waits for the service's own bind failure, and the port is drawn again,
    with ``--advertise-url`` following it."""
    svc = ServiceProcess(tmp_path / "home", advertised=True)
    taken = svc.port
    with _answering_on(taken):
        try:
            health = svc.start(timeout=60).wait_healthy()
            assert svc.port != taken and "stranger" not in health, health
            assert "couldn't bind" in (tmp_path / "home" / f"service-{taken}.log").read_text()
            cmdline = psutil.Process(svc.pid).cmdline()
            assert cmdline[cmdline.index("--advertise-url") + 1] == f"http://127.0.0.1:{svc.port}"
        finally:
            svc.stop()


@pytest.mark.timeout(120)
def test_a_port_the_caller_chose_is_never_changed(tmp_path: Path) -> None:
    with _listen_on(0) as other:
        port = int(other.getsockname()[1])
        svc = ServiceProcess(tmp_path / "home", port=port)
        with pytest.raises(PortTaken, match="couldn't bind"):
            svc.start(timeout=60)
        assert svc.port == port and svc.proc is not None and svc.proc.poll() is not None
