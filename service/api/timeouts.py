"""llama-server's ``-to``/``--timeout`` on the service's port: a limit on each read and each write.

llama-server hands it to cpp-httplib as its read and write timeouts (600 s by default): a client
that stops sending its request, or stops taking the answer, for that long is cut off. uvicorn has
no such limits (only the keep-alive one between requests), so this ASGI middleware puts them on
the two waits an app makes on its client:

* a ``receive`` while the request body is incomplete: past the limit, 408 ``request_timeout``
  (once the body is whole, the next ``receive`` waits for the client to hang up, unlimited);
* a ``send`` that waits for the client to take bytes (uvicorn's flow control): past the limit the
  response is abandoned and the connection closed (the handler's stream is closed, so a proxied
  generation stops).

The hop to the workers has the same limit as httpx's read and write timeouts (``service.startup``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

from service.api.problems import Problem

_log = structlog.get_logger(__name__)


class BodyReadTimeout(Problem):
    """The client sent no more of its request body within ``--timeout`` seconds."""

    def __init__(self, seconds: float) -> None:
        detail = f"the request body did not arrive within the read timeout ({seconds:g} s, -to/--timeout)"
        super().__init__(408, "request_timeout", detail, headers={"Connection": "close"})


class _WriteTimeout(Exception):
    """The client took no bytes of the answer within ``--timeout`` seconds."""


class _Timed:
    """One request's ``receive`` and ``send``, each wait limited."""

    def __init__(self, receive: Receive, send: Send, seconds: float) -> None:
        self._receive, self._send, self._seconds = receive, send, seconds
        self._body_done = False

    async def receive(self) -> ReceiveMessage:
        if self._body_done:
            return await self._receive()  # the client hanging up, whenever it does
        try:
            async with asyncio.timeout(self._seconds):
                message = await self._receive()
        except TimeoutError:
            raise BodyReadTimeout(self._seconds) from None
        self._body_done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        try:
            async with asyncio.timeout(self._seconds):
                await self._send(message)
        except TimeoutError:
            raise _WriteTimeout from None


def io_timeout_middleware(seconds: float) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory: each body ``receive`` and each ``send`` waits at most ``seconds``."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            timed = _Timed(receive, send, seconds)
            try:
                await app(scope, timed.receive, timed.send)
            except _WriteTimeout:
                # Nothing more can be sent: returning leaves uvicorn to close the connection.
                _log.warning("response_write_timeout", path=scope.get("path"), timeout_s=seconds)

        return middleware

    return wrap
