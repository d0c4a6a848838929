"""Bytes on the wire: request bodies off the socket, JSON and SSE heads onto it.

:func:`read_body` reads ``Content-Length`` or chunked bodies, capped at
``limit`` bytes. Every refusal leaves unread bytes behind, so the caller must
close the connection after answering it (they would otherwise be read as the
next request).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from workers.inference.http._errors import ApiError
from workers.inference.http.dialects import SseEvent

SSE_HEAD = b"".join(
    (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n",
        b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
)


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sse_bytes(item: Any) -> bytes:
    """One server-sent event: a named one (``SseEvent``) as ``event:`` + ``data:``, else ``data:`` alone."""
    if isinstance(item, SseEvent):
        return b"event: " + item.name.encode() + b"\ndata: " + json_bytes(item.data) + b"\n\n"
    return b"data: " + json_bytes(item) + b"\n\n"


def phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Client Closed Request" if status == 499 else "Unknown"


def read_body(headers: Any, rfile: Any, limit: int) -> bytes:
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        return _read_chunked(rfile, limit)
    try:
        length = int(headers.get("Content-Length", "0"))
    except ValueError:
        raise ApiError(400, "invalid Content-Length") from None
    if length > limit or length < 0:
        raise ApiError(413, f"request body over {limit} bytes")
    data: bytes = rfile.read(length)
    return data


def _read_chunked(rfile: Any, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        try:
            size = int(rfile.readline(1024).split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ApiError(400, "malformed chunked body") from None
        if size == 0:
            while rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        total += size
        if total > limit:
            raise ApiError(413, f"request body over {limit} bytes")
        parts.append(rfile.read(size))
        rfile.readline(8)  # CRLF after each chunk
