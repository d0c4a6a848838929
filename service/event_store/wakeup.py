"""Commit wake-ups: a writer tells the service's tail that it committed, so the tail need not poll.

Why: polling ``PRAGMA data_version`` every 10 ms cost an idle service 9 % of a core. Instead every
writer outside the service (the workers, the CLI's sync store) sends one datagram after each commit
to a Unix socket the service listens on, and the tail reads the log when one arrives; a slow poll
stays as the safety net (a lost datagram costs latency, never an event).

The address is derived from the database file alone (an abstract socket named after its real path),
so any process that knows the log knows where to wake its reader: no environment variable, no
socket file to clean up after kill -9. Abstract sockets are Linux's; elsewhere :data:`SUPPORTED` is
False and the tail polls as before. Stdlib only: the workers import it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import sys
from pathlib import Path

SUPPORTED = sys.platform.startswith("linux")
"""Whether this platform has abstract Unix sockets (Linux)."""


def wake_address(db_path: Path | str) -> str:
    """The abstract socket address of the tail reading ``db_path``."""
    digest = hashlib.sha256(os.path.realpath(db_path).encode()).hexdigest()[:24]
    return f"\0modelrouter-wake-{digest}"


class Waker:
    """The writer's side: one unbound datagram socket, a send after each commit, errors ignored
    (nobody listening, or a full buffer: then a wake-up is already pending)."""

    def __init__(self, db_path: Path | str) -> None:
        self.address = wake_address(db_path)
        self._sock: socket.socket | None = None
        if SUPPORTED:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    def wake(self) -> None:
        """Tell the tail a commit happened (never blocks, never raises)."""
        if self._sock is None:
            return
        with contextlib.suppress(OSError):
            self._sock.sendto(b"!", self.address)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def listen(db_path: Path | str) -> socket.socket | None:
    """The service's side: a bound, non-blocking socket to read wake-ups from; None when the platform
    has no abstract sockets or another process already listens for this log."""
    if not SUPPORTED:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(wake_address(db_path))
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket) -> int:
    """Read every pending wake-up; returns how many (they carry nothing but their arrival)."""
    n = 0
    while True:
        try:
            sock.recv(64)
        except (BlockingIOError, InterruptedError):
            return n
        n += 1
