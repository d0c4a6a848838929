"""devtools/service_process.py: the harness every service test starts ``modelrouter serve`` with."""

from __future__ import annotations

import socket
from pathlib import Path

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


@pytest.mark.timeout(120)
def test_a_port_the_caller_chose_is_never_changed(tmp_path: Path) -> None:
    with _listen_on(0) as other:
        port = int(other.getsockname()[1])
        svc = ServiceProcess(tmp_path / "home", port=port)
        with pytest.raises(PortTaken, match="couldn't bind"):
            svc.start(timeout=60)
        assert svc.port == port and svc.proc is not None and svc.proc.poll() is not None
