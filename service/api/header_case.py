"""Header names on the wire in llama-server's case.

HTTP header names are case-insensitive, but scripts (llama.cpp's own server tests among them)
compare them as plain strings, and llama-server (cpp-httplib) writes them as its code spells
them: ``Access-Control-Allow-Origin``, ``Process-Start-Time-Unix``. Litestar lowercases every
name it encodes and uvicorn writes names as given, so this wrapper, outermost, gives the names
llama-server sends their case back on every answer: the service's own and those relayed from a
worker alike.
"""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

LLAMA_SERVER_CASE: dict[bytes, bytes] = {
    name.lower().encode("latin-1"): name.encode("latin-1")
    for name in (
        "Access-Control-Allow-Origin",  # tools/server/server-http.cpp, its pre-routing handler
        "Access-Control-Allow-Credentials",
        "Access-Control-Allow-Methods",
        "Access-Control-Allow-Headers",
        "Vary",  # ours (llama-server sends none): in the case HTTP's own texts spell it
        "Process-Start-Time-Unix",  # tools/server/server-context.cpp, GET /metrics
    )
}
"""Lowercase name -> llama-server's spelling."""


def llama_case(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` with llama-server's names in its case (the others as they are)."""
    return [(LLAMA_SERVER_CASE.get(name.lower(), name), value) for name, value in headers]


def header_case_middleware(app: ASGIApp) -> ASGIApp:
    """Rewrite the response's header names (:data:`LLAMA_SERVER_CASE`) as they leave."""

    async def cased(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return

        async def send_cased(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = llama_case(list(message.get("headers") or []))
            await send(message)

        await app(scope, receive, send_cased)

    return cased
