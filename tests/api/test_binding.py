"""service/outside/binding.py: the sockets ``serve`` listens on claim their port before start-up goes on."""

from __future__ import annotations

import errno
import socket

import pytest

from service.outside.binding import listening_sockets


def _reusing_socket() -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a worker's listener and uvicorn bind
    return sock


def test_a_port_given_to_serve_is_listened_on_at_once_so_another_reusing_socket_cannot_take_it() -> None:
    """Bound but not listening, the port would let a worker of another service bind it too (both
    SO_REUSEADDR) and listen first: the service's own listen() would fail after its whole start-up."""
    with _reusing_socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    [sock] = listening_sockets(["127.0.0.1"], port)
    try:
        with _reusing_socket() as rival, pytest.raises(OSError) as refused:
            rival.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # accepted into the backlog before anyone serves it
    finally:
        sock.close()


def test_a_port_another_process_listens_on_is_refused() -> None:
    with _reusing_socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        with pytest.raises(OSError) as refused:
            listening_sockets(["127.0.0.1"], int(other.getsockname()[1]))
        assert refused.value.errno == errno.EADDRINUSE
