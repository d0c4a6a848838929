"""ASGI middleware: a request id bound to every log line, and one access line per request."""

from __future__ import annotations

from collections.abc import Callable

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from service.api.parts import IdSource
from service.supervision.surroundings import Clock

_log = structlog.get_logger("modelrouter.access")


def request_id_middleware(new_id: IdSource, clock: Clock) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory (wrapped around the whole app, ``service.app``): bind ``request_id``
    (from ``X-Request-ID``, else ``new_id()``) for the request's duration, echo it in the
    response, and log one canonical access line, timed by ``clock``."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            headers = dict(scope.get("headers") or [])
            request_id = headers.get(b"x-request-id", b"").decode("latin-1") or new_id()
            status: dict[str, int | None] = {"code": None}
            started = clock.monotonic()

            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status["code"] = message["status"]
                    message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode("latin-1"))]
                await send(message)

            with structlog.contextvars.bound_contextvars(request_id=request_id):
                try:
                    await app(scope, receive, send_with_id)
                finally:
                    _log.info(
                        "request",
                        method=scope.get("method"),
                        path=scope.get("path"),
                        status=status["code"],
                        duration_ms=round((clock.monotonic() - started) * 1000, 2),
                    )

        return middleware

    return wrap
