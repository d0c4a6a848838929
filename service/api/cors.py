"""CORS, answered as llama-server answers it (``tools/server/server-http.cpp``, its pre-routing handler).

Every response carries ``Access-Control-Allow-Origin``:

* ``--cors-origins *`` (the default) with ``--cors-credentials`` (the default): the request's
  ``Origin`` echoed, so a page may call with credentials;
* ``localhost``: the ``Origin`` echoed only when its host is ``localhost``, ``127.0.0.1`` or
  ``::1`` (any port), else no header;
* anything else: that value. llama-server sends a comma-separated list as it is, which no
  browser accepts; here a list is matched instead, and the ``Origin`` echoed when it is in it
  (docs/llama-cpp-compat.md, "differs on purpose").

Every ``OPTIONS`` request is a preflight answered before routing and before the API key is
checked (browsers send no ``Authorization`` on a preflight): 200 with an empty ``text/html``
body and ``Access-Control-Allow-Credentials``, ``-Methods`` and ``-Headers`` from
``--cors-credentials``, ``--cors-methods`` and ``--cors-headers``. The route's ``Allow`` (Litestar's
answer to ``OPTIONS``) is kept. Where the answer depends on ``Origin``, ``Vary: Origin`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from service.settings import Settings

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
Headers = list[tuple[bytes, bytes]]


def origin_is_localhost(origin: str) -> bool:
    """llama-server's ``origin_is_localhost``: the Origin's host is localhost, 127.0.0.1 or ::1."""
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in _LOCAL_HOSTS


class CorsPolicy:
    """The headers llama-server's settings give a request (pure: origin in, headers out)."""

    def __init__(self, settings: Settings) -> None:
        self.origins = settings.cors_origins.strip() or "*"
        self.listed = frozenset(o.strip() for o in self.origins.split(",") if o.strip())
        self.credentials = settings.cors_credentials
        self.preflight = [
            (b"access-control-allow-credentials", b"true" if self.credentials else b"false"),
            (b"access-control-allow-methods", settings.cors_methods.encode("latin-1", "replace")),
            (b"access-control-allow-headers", settings.cors_headers.encode("latin-1", "replace")),
        ]

    def allow_origin(self, origin: str | None) -> tuple[str | None, bool]:
        """``(Access-Control-Allow-Origin or None, whether it depends on the Origin)``."""
        if self.origins == "*":
            return (origin or None, True) if self.credentials else ("*", False)
        if self.origins == "localhost":
            return (origin if origin and origin_is_localhost(origin) else None), True
        if len(self.listed) == 1:
            return self.origins, False
        return (origin if origin in self.listed else None), True

    def response_headers(self, origin: str | None, *, preflight: bool) -> Headers:
        allowed, varies = self.allow_origin(origin)
        out: Headers = []
        if allowed is not None:
            out.append((b"access-control-allow-origin", allowed.encode("latin-1", "replace")))
        if varies:
            out.append((b"vary", b"Origin"))
        return out + self.preflight if preflight else out


def _origin(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or []:
        if name == b"origin":
            return value.decode("latin-1")
    return None


def cors_middleware(settings: Settings) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory, wrapped around the whole app before routing (``service.app``):
    outermost, so that a 401, a problem or an unknown path's 404 carries the CORS headers too, as
    llama-server's do."""
    policy = CorsPolicy(settings)

    def middleware(app: ASGIApp) -> ASGIApp:
        async def cors(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            preflight = scope["method"] == "OPTIONS"
            extra = policy.response_headers(_origin(scope), preflight=preflight)

            async def send_with_cors(message: Message) -> None:
                if message["type"] == "http.response.start":
                    kept = [(k, v) for k, v in message.get("headers") or [] if not preflight or k.lower() == b"allow"]
                    if preflight:  # llama-server: 200, a blank text/html body, whatever the route
                        kept += [(b"content-type", b"text/html"), (b"content-length", b"0")]
                        message = {**message, "status": 200}
                    message = {**message, "headers": [*kept, *extra]}
                elif message["type"] == "http.response.body" and preflight:
                    message = {**message, "body": b""}
                await send(message)

            await app(scope, receive, send_with_cors)

        return cors

    return middleware
