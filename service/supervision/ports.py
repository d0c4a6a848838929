"""Port selection for inference workers."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port that was free a moment ago (bind 0, close). The worker
    binds it before loading; if another process took it meanwhile, the worker
    binds any free port and reports that endpoint in ``instance_loading``."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
