"""The forwarding hop's HTTP/1.1 client (``service/cluster/node_client.py``) against a real server on
127.0.0.1: raw sockets in a thread, so each test answers byte for byte what it is about (keep-alive,
chunked bodies, a node that dies mid-answer, a node that closes idle connections, a client that
hangs up, a node that goes silent and is abandoned). The two-node test (``tests/e2e/test_two_nodes.py``) runs it against real nodes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from service.cluster.node_client import NodeAbandoned, NodeClient
from service.supervision.ports import free_port
from tests.eventually import eventually

Answer = Callable[[socket.socket, bytes], bool]  # (connection, request head + body) -> keep the connection open


def _read_request(conn: socket.socket, buffered: bytearray) -> bytes | None:
    """One request (head and ``Content-Length`` body), or None once the client closed."""
    while b"\r\n\r\n" not in buffered:
        data = conn.recv(65536)
        if not data:
            return None
        buffered += data
    head, _, rest = bytes(buffered).partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(rest) < length:
        rest += conn.recv(65536)
    buffered[:] = rest[length:]
    return head + b"\r\n\r\n" + rest[:length]


class Node:
    """A server that answers every request with ``answer`` and notes each connection's client port."""

    def __init__(self, answer: Answer) -> None:
        self.ports: list[int] = []
        self.requests: list[bytes] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer.ports.append(self.client_address[1])
                buffered = bytearray()
                while (request := _read_request(self.request, buffered)) is not None:
                    outer.requests.append(request)
                    if not answer(self.request, request):
                        return

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Node]]:
    nodes: list[Node] = []

    def start(answer: Answer) -> Node:
        nodes.append(Node(answer))
        return nodes[-1]

    yield start
    for node in nodes:
        node.close()


def _json(conn: socket.socket, request: bytes) -> bool:
    body = b'{"echo": ' + str(len(request)).encode() + b"}"
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    return True


def _chunked(parts: list[bytes], *, cut: bool = False) -> Answer:
    def answer(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for part in parts:
            conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        if cut:
            conn.shutdown(socket.SHUT_RDWR)  # the node died mid-answer
            return False
        conn.sendall(b"0\r\n\r\n")
        return True

    return answer


async def test_requests_one_after_another_share_one_connection(serve: Callable[[Answer], Node]) -> None:
    node = serve(_json)
    client = NodeClient()
    for _ in range(3):
        answer = await client.send(
            "POST", f"{node.url}/v1/completions?x=1", {"content-type": "application/json"}, b"{}"
        )
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
        assert (await answer.aread()).startswith(b'{"echo": ')
        await answer.aclose()
    assert len(node.ports) == 1, "the keep-alive connection was reused"
    head = node.requests[0].split(b"\r\n\r\n")[0].split(b"\r\n")
    assert head[0] == b"POST /v1/completions?x=1 HTTP/1.1"
    assert b"content-length: 2" in [line.lower() for line in head] and node.requests[0].endswith(b"\r\n\r\n{}")
    await client.aclose()


async def test_a_chunked_stream_arrives_chunk_by_chunk_without_its_framing(serve: Callable[[Answer], Node]) -> None:
    parts = [b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"]
    node = serve(_chunked(parts))
    client = NodeClient()
    answer = await client.send("POST", f"{node.url}/v1/chat/completions", {}, b"{}")
    assert [chunk async for chunk in answer.aiter_raw()] == parts
    await answer.aclose()
    again = await client.send("POST", f"{node.url}/v1/chat/completions", {}, b"{}")
    assert await again.aread() == b"".join(parts)
    await again.aclose()
    assert len(node.ports) == 1


async def test_a_node_that_dies_mid_answer_is_a_protocol_error_and_its_connection_is_not_reused(
    serve: Callable[[Answer], Node],
) -> None:
    node = serve(_chunked([b"data: one\n\n"], cut=True))
    client = NodeClient()
    answer = await client.send("POST", f"{node.url}/v1/chat/completions", {}, b"{}")
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        async for chunk in answer.aiter_raw():
            received.append(chunk)
    assert received == [b"data: one\n\n"]
    await answer.aclose()
    with pytest.raises(httpx.RemoteProtocolError):  # the next request: a new connection, cut as well
        await (await client.send("POST", f"{node.url}/x", {}, b"{}")).aread()
    assert len(node.ports) == 2


async def test_an_idle_connection_the_node_closed_is_not_written_to(serve: Callable[[Answer], Node]) -> None:
    closed = threading.Event()

    def once(conn: socket.socket, request: bytes) -> bool:
        _json(conn, request)
        conn.shutdown(socket.SHUT_RDWR)  # like uvicorn's keep-alive timeout, without saying so
        closed.set()
        return False

    node = serve(once)
    client = NodeClient()
    for _ in range(2):
        answer = await client.send("GET", f"{node.url}/health", {}, b"")
        assert answer.status_code == 200
        await answer.aread()
        await answer.aclose()
        assert closed.wait(10)  # its FIN is in this side's socket now (loopback delivers it in shutdown())
        for _ in range(3):  # loop turns: the one that polls the socket runs its read callback after this task
            await asyncio.sleep(0)
    assert len(node.ports) == 2
    assert b"content-length" not in node.requests[0].lower(), "a GET without a body says no length"


async def test_closing_an_answer_before_its_end_hangs_up_on_the_node(serve: Callable[[Answer], Node]) -> None:
    hung_up = threading.Event()

    def endless(conn: socket.socket, _request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(2000):
                conn.sendall(b"6\r\ntoken \r\n")
                threading.Event().wait(0.01)
        except OSError:  # the client hung up: a node stops generating here
            hung_up.set()
        return False

    node = serve(endless)
    client = NodeClient()
    answer = await client.send("POST", f"{node.url}/v1/completions", {}, b"{}")
    async for chunk in answer.aiter_raw():
        assert chunk == b"token "
        break
    await answer.aclose()
    assert await asyncio.to_thread(hung_up.wait, 15), "the node never saw the client go"


async def test_a_request_cancelled_before_its_answer_hangs_up_on_the_node(serve: Callable[[Answer], Node]) -> None:
    hung_up = threading.Event()

    def silent(conn: socket.socket, _request: bytes) -> bool:
        if conn.recv(1) == b"":  # still processing the prompt when the client goes
            hung_up.set()
        return False

    node = serve(silent)
    client = NodeClient()
    sending = asyncio.ensure_future(client.send("POST", f"{node.url}/v1/completions", {}, b"{}"))
    await asyncio.to_thread(lambda: eventually(lambda: node.requests, "the request arrived"))
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert await asyncio.to_thread(hung_up.wait, 15), "the node never saw the client go"


async def test_abandon_ends_at_once_the_requests_waiting_on_a_node_that_went_silent(
    serve: Callable[[Answer], Node],
) -> None:
    """A node that vanished without closing its sockets answers nothing, ever (no read timeout):
    abandoning it ends a request waiting for its answer and a stream waiting for its next chunk with
    :class:`NodeAbandoned` (a read error: the proxy's ``node_lost``), drops its idle connections,
    and leaves other nodes' requests alone."""
    gone: list[bytes] = []

    def silent(conn: socket.socket, request: bytes) -> bool:
        if request.startswith(b"GET /health"):
            _json(conn, request)  # then idle in the client's pool
        elif request.startswith(b"POST /stream"):
            conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x\r\ndata: one\n\n\r\n" % 11)
        with contextlib.suppress(OSError):  # an aborted connection is reset
            conn.recv(1)  # silent from here on, until the client goes
        gone.append(request.split(b" ", 2)[1])
        return False

    node, other = serve(silent), serve(silent)
    client = NodeClient()
    waiting = asyncio.ensure_future(client.send("POST", f"{node.url}/wait", {}, b"{}"))
    elsewhere = asyncio.ensure_future(client.send("POST", f"{other.url}/wait", {}, b"{}"))
    stream = await client.send("POST", f"{node.url}/stream", {}, b"{}")
    chunks = stream.aiter_raw()
    assert await anext(chunks) == b"data: one\n\n"
    reading = asyncio.ensure_future(anext(chunks))
    idle = await client.send("GET", f"{node.url}/health", {}, b"")
    await idle.aread()
    await idle.aclose()  # back in the pool
    await asyncio.to_thread(lambda: eventually(lambda: len(node.requests) == 3 and other.requests, "all arrived"))
    assert not waiting.done() and not reading.done()

    started = time.monotonic()
    assert client.abandon(f"{node.url}/ignored/path") == 2, "the waiting request and the stream"
    async with asyncio.timeout(5):
        with pytest.raises(NodeAbandoned):
            await waiting
        with pytest.raises(NodeAbandoned):
            await reading
    assert time.monotonic() - started < 1, "at once"
    await stream.aclose()
    await asyncio.to_thread(
        lambda: eventually(
            lambda: sorted(gone) == [b"/health", b"/stream", b"/wait"], "the node saw every connection to it closed"
        )
    )
    assert not elsewhere.done(), "another node's request goes on"
    again = await client.send("GET", f"{node.url}/health", {}, b"")  # a new connection: the pool was dropped
    assert again.status_code == 200 and len(node.ports) == 4
    await again.aread()
    await again.aclose()
    elsewhere.cancel()
    with pytest.raises(asyncio.CancelledError):
        await elsewhere
    await client.aclose()


async def test_a_node_that_is_not_there_is_a_connect_error() -> None:
    with pytest.raises(httpx.ConnectError):
        await NodeClient().send("GET", f"http://127.0.0.1:{free_port()}/health", {}, b"")


def test_only_plain_http_goes_through_it() -> None:
    assert NodeClient.handles("http://10.0.0.2:8080/v1/models")
    assert not NodeClient.handles("https://node-b.example:8443/v1/models")
