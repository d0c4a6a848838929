"""The port an inference worker is told to bind (:mod:`service.supervision.ports`), with real sockets."""

from __future__ import annotations

import socket

from service.supervision.ports import free_port


def test_the_port_is_free_on_loopback_and_released_for_the_worker() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as worker:  # the socket that found it is closed: the worker can bind it
        worker.bind(("127.0.0.1", port))
        worker.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass


def test_a_port_in_use_is_not_handed_out() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        used = taken.getsockname()[1]
        assert all(free_port() != used for _ in range(20))
