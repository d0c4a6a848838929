"""The hop of a forwarded request to another node's service: HTTP/1.1 on pooled keep-alive
connections, over asyncio streams.

Why not httpx (which the proxy keeps for its local workers): a forwarded request is a second pass
through the whole HTTP stack, and on node ``a`` of ``bench/forward.py`` httpx's client (its
request and response models, httpcore's pool, h11's state machine, anyio's cancel scopes) was about
60% of the CPU the forward cost: ~3.9 ms of ~6.3 ms of thread time per request on this 2-core VM
(``time.thread_time`` around each step), on a path where that CPU is the added latency. Here one
request costs one ``write`` (head and body together, so the other node's server wakes once), a
``readuntil`` for the head and a ``readexactly`` for a ``Content-Length`` body.

What is kept from httpx's behaviour, because forwarding depends on it:

* a connection is reused only once its answer was read to the end; an idle one the other node
  closed meanwhile (its keep-alive timeout) is dropped, not written to;
* a response closed before its end (a client that hung up) closes its connection, so the other
  node sees the disconnect and stops the generation;
* failures raise httpx's exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadError``,
  ``WriteError``, ``RemoteProtocolError``), which the proxy turns into problems (``node_lost``);
* connect timeout 10 s, none on reads (a generation may take long between tokens).

No read timeout means a node that vanishes without closing its sockets (switched off, cut off,
frozen) would hold its forwarded requests forever: TCP says nothing while the peer's kernel (or
nobody) stays silent. The fold knows better, once another node records it ``node_lost``; then
:meth:`NodeClient.abandon` (called by :class:`~service.cluster.lost_nodes.AbandonLost`) aborts every
connection to it, and each request waiting on one raises :class:`NodeAbandoned`.

Not supported, and sent through httpx instead: ``https`` URLs (nodes that serve TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from urllib.parse import urlsplit

import httpx

from service.core.proxy_decisions import plain_http

CONNECT_TIMEOUT = 10.0
MAX_IDLE_PER_NODE = 64  # as the proxy's httpx pool (max_keepalive_connections)
_NO_BODY_STATUSES = frozenset({204, 304})

_Key = tuple[str, int]
_GiveBack = Callable[["_Connection", bool], None]
_ABANDONED = "the node was given up for gone (recorded lost) while this request waited on it"


class NodeAbandoned(httpx.ReadError):
    """The request's node was given up for gone (:meth:`NodeClient.abandon`) while the request waited
    on it: a read error like any other, so the proxy answers as for a node that stopped answering."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.abandoned = False

    def usable(self) -> bool:
        """Still open: the other node has not closed it (its keep-alive timeout) while it was idle."""
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()

    def abandon(self) -> None:
        """Abort at once (not ``close``, which would wait for unsent bytes a frozen peer never takes):
        the reads under way see the end of the stream, and raise :class:`NodeAbandoned`."""
        self.abandoned = True
        self.writer.transport.abort()

    def failure(self, exc: httpx.HTTPError) -> httpx.HTTPError:
        """``exc``, or :class:`NodeAbandoned` when the connection failed because it was abandoned."""
        if self.abandoned:
            return NodeAbandoned(_ABANDONED)
        return exc


class NodeResponse:
    """An answer whose body is read as it comes (:meth:`aiter_raw`) or whole (:meth:`aread`);
    :meth:`aclose` it in every case."""

    def __init__(self, status: int, headers: dict[str, str], conn: _Connection, body: _Body, done: _GiveBack) -> None:
        self.status_code = status
        self.headers = headers
        """Names in lower case; a repeated name keeps its last value."""
        self._conn = conn
        self._body = body
        self._done = done
        self._complete = False
        self._closed = False

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked encoding removed)."""
        try:
            async for chunk in self._body.chunks(self._conn.reader):
                yield chunk
        except asyncio.IncompleteReadError:
            msg = "the node closed the connection before the end of its answer"
            raise self._conn.failure(httpx.RemoteProtocolError(msg)) from None
        except (asyncio.LimitOverrunError, ValueError) as exc:
            raise self._conn.failure(httpx.RemoteProtocolError(f"malformed answer from the node: {exc}")) from None
        except OSError as exc:
            raise self._conn.failure(httpx.ReadError(str(exc) or type(exc).__name__)) from None
        if self._conn.abandoned:  # a body delimited by the connection's end looks whole when cut
            raise self._conn.failure(httpx.RemoteProtocolError("the answer was cut"))
        self._complete = True

    async def aread(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        """Give the connection back when the answer was read to its end, else close it."""
        if self._closed:
            return
        self._closed = True
        self._done(self._conn, self._complete and self._body.reusable)


class _Body:
    """How the body of one answer is delimited."""

    def __init__(self, length: int | None, chunked: bool, keep_alive: bool) -> None:
        self.length = length
        self.chunked = chunked
        self.reusable = keep_alive and (chunked or length is not None)

    async def chunks(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        if self.chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass  # trailers
                    return
                data = await reader.readexactly(size)
                if await reader.readexactly(2) != b"\r\n":
                    raise ValueError("a chunk does not end with CRLF")
                yield data
        elif self.length is not None:
            if self.length:
                yield await reader.readexactly(self.length)
        else:  # delimited by the end of the connection
            while data := await reader.read(65536):
                yield data


def _head(method: str, target: str, host: str, headers: Mapping[str, str], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bool]:
    """Status, headers (lower-case names) and whether HTTP/1.1 keep-alive holds."""
    status_line, *lines = head.decode("latin-1").split("\r\n")
    version, status, *_ = status_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"a header line without a colon: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
    keep_alive = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    return int(status), headers, keep_alive


def _body_of(method: str, status: int, fields: Mapping[str, str], keep_alive: bool) -> _Body:
    if method == "HEAD" or status in _NO_BODY_STATUSES:
        return _Body(0, False, keep_alive)
    chunked = "chunked" in fields.get("transfer-encoding", "").lower()
    length = fields.get("content-length")
    if chunked or length is None:
        return _Body(None, chunked, keep_alive)
    if not length.isdigit():
        raise httpx.RemoteProtocolError(f"malformed answer from the node: content-length {length[:40]!r}")
    return _Body(int(length), False, keep_alive)


def _key(url: str) -> tuple[_Key, str, str]:
    """A URL's pool key ``(host, port)``, its ``Host`` header and its request target."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return (parts.hostname or "127.0.0.1", parts.port or 80), parts.netloc, target


class NodeClient:
    """Forwarded requests to other nodes' services, on keep-alive connections pooled per node."""

    def __init__(self, connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self._connect_timeout = connect_timeout
        self._idle: defaultdict[_Key, deque[_Connection]] = defaultdict(deque)
        self._busy: defaultdict[_Key, set[_Connection]] = defaultdict(set)
        """Connections a request is using (sent, its answer not closed yet): what :meth:`abandon` cuts."""
        self._abandons: defaultdict[_Key, int] = defaultdict(int)
        """How many times each node was abandoned: a connection opened across one is abandoned too."""

    @staticmethod
    def handles(url: str) -> bool:
        """Whether ``url`` goes through this client (plain ``http``; TLS goes through httpx)."""
        return plain_http(url)

    async def send(self, method: str, url: str, headers: Mapping[str, str], body: bytes) -> NodeResponse:
        """Send one request and read the head of its answer; the caller reads the body, then
        :meth:`NodeResponse.aclose`."""
        key, host, target = _key(url)
        abandons = self._abandons[key]
        conn = await self._connection(key)
        self._busy[key].add(conn)
        try:
            if self._abandons[key] != abandons:  # abandoned while this connection was being opened
                conn.abandon()
                raise NodeAbandoned(_ABANDONED)
            try:
                conn.writer.write(_head(method, target, host, headers, body) + body)
                await conn.writer.drain()
            except OSError as exc:
                raise conn.failure(httpx.WriteError(str(exc) or type(exc).__name__)) from None
            status, fields, keep_alive = await self._read_head(conn)
            body_of = _body_of(method, status, fields, keep_alive)
        except BaseException:  # a failure, or the caller cancelled: a half-used connection is never reused
            self._busy[key].discard(conn)
            conn.close()
            raise
        return NodeResponse(status, fields, conn, body_of, partial(self._give_back, key))

    async def _read_head(self, conn: _Connection) -> tuple[int, dict[str, str], bool]:
        try:
            while True:
                status, fields, keep_alive = _parse_head(await conn.reader.readuntil(b"\r\n\r\n"))
                if status >= 200:
                    return status, fields, keep_alive
        except asyncio.IncompleteReadError:
            raise conn.failure(httpx.RemoteProtocolError("the node disconnected without sending an answer")) from None
        except (asyncio.LimitOverrunError, ValueError) as exc:
            raise conn.failure(httpx.RemoteProtocolError(f"malformed answer from the node: {exc}")) from None
        except OSError as exc:
            raise conn.failure(httpx.ReadError(str(exc) or type(exc).__name__)) from None

    async def _connection(self, key: _Key) -> _Connection:
        idle = self._idle[key]
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
            conn.close()
        try:
            async with asyncio.timeout(self._connect_timeout):  # not wait_for: on 3.11 it can swallow a cancellation
                reader, writer = await asyncio.open_connection(*key)
        except TimeoutError:
            msg = f"no connection to {key[0]}:{key[1]} within {self._connect_timeout:g} s"
            raise httpx.ConnectTimeout(msg) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        return _Connection(reader, writer)

    def _give_back(self, key: _Key, conn: _Connection, reusable: bool) -> None:
        self._busy[key].discard(conn)
        idle = self._idle[key]
        if reusable and conn.usable() and not conn.abandoned and len(idle) < MAX_IDLE_PER_NODE:
            idle.append(conn)
        else:
            conn.close()

    def abandon(self, url: str) -> int:
        """Give the node at ``url`` up for gone: drop its idle connections, and abort those requests
        are using, so that each of those requests raises :class:`NodeAbandoned` at once (a node that
        vanished without closing its sockets would otherwise hold them forever: no read timeout).
        Answers how many connections requests were using (a request whose read already failed counts
        until its answer is closed). Requests sent to ``url`` afterwards connect anew."""
        key, _, _ = _key(url)
        self._abandons[key] += 1
        idle = self._idle.pop(key, deque())
        while idle:
            idle.pop().abandon()
        busy = self._busy.pop(key, set())
        for conn in busy:
            conn.abandon()
        return len(busy)

    async def aclose(self) -> None:
        """Close every idle connection (shut-down)."""
        for idle in self._idle.values():
            while idle:
                conn = idle.pop()
                conn.close()
                with contextlib.suppress(OSError):
                    await conn.writer.wait_closed()
