"""The sockets ``modelrouter serve`` listens on: every address of ``--host``, as llama-server binds them.

llama-server takes ``--host`` as a comma-separated list (``common/arg.cpp``) and
binds each address with its own listener (``server-http.cpp``): TCP addresses,
and paths ending in ``.sock`` as UNIX sockets. With more than one TCP address an
IPv6 one binds IPv6 only (so ``::`` does not also claim ``0.0.0.0``), and
``--port 0`` is refused (each listener would get another port). The sockets are
bound and listening here, before anything else starts, so an address in use stops
the start at once; uvicorn serves them all (``Server.run(sockets=...)``). Listening at
once matters: with ``SO_REUSEADDR`` a bound socket that does not listen yet lets another
process's ``SO_REUSEADDR`` socket bind the same port (say a worker of another service,
given that port by ``bind(0)`` a moment earlier) and listen first; our ``listen()`` would
then fail after the whole start-up. Connections made before uvicorn serves wait in the
backlog.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Sequence
from pathlib import Path


class BindError(ValueError):
    """An address that cannot be listened on as given (a usage error, as in llama-server)."""


def is_unix(host: str) -> bool:
    """A UNIX socket path: llama-server's rule, the address ends in ``.sock``."""
    return host.endswith(".sock")


def listening_sockets(hosts: Sequence[str], port: int) -> list[socket.socket]:
    """One bound, listening socket per address, in order. Raises ``BindError`` for a
    refused combination, ``OSError`` for an address that cannot be bound (in use, not local)."""
    tcp = [h for h in hosts if not is_unix(h)]
    if port == 0 and len(tcp) > 1:
        msg = "--port 0 is not supported with multiple TCP addresses"
        raise BindError(msg)
    bound: list[socket.socket] = []
    try:
        for host in hosts:
            bound.append(_unix(host) if is_unix(host) else _tcp(host, port, v6only=len(tcp) > 1))
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def _tcp(host: str, port: int, *, v6only: bool) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as llama-server: a restart rebinds at once
        if family == socket.AF_INET6 and v6only:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)  # claims the port now (see the module docstring)
    except BaseException:
        sock.close()
        raise
    return sock


def _unix(path: str) -> socket.socket:
    _remove_stale(Path(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(socket.SOMAXCONN)
    except BaseException:
        sock.close()
        raise
    return sock


def _remove_stale(path: Path) -> None:
    """A socket file nobody listens on (left by a killed service) is removed; a live one is in use."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return  # not a socket: binding fails with "address in use", naming the path
    except FileNotFoundError:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
    raise OSError(98, f"{path} is in use by another server")
