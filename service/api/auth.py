"""API keys, as llama-server checks them (``--api-key``, ``--api-key-file``, ``LLAMA_API_KEY``).

With keys configured, every request but ``/health``, ``/v1/health`` and CORS
preflights (``OPTIONS``) needs ``Authorization: Bearer <key>`` or
``X-Api-Key: <key>``; anything else gets llama.cpp's 401 body
``{"error": {"message": "Invalid API Key", "type": "authentication_error",
"code": 401}}``, with the problem+json members beside it. The event stream,
the audit log, ``/metrics`` and the OpenAPI schema are covered like everything
else. The dashboard's static files (``/`` and ``/dashboard/*``) are public: they
hold no data, and the page asks for the key once a request answers 401.

A browser's ``EventSource`` cannot send headers, so the two event streams
(``GET /events/stream``, ``GET /models/sse``) also take the key as
``?api_key=``, checked the same way. Only there: a key in a URL can end up in
proxy logs and browser history, so no other route accepts one.

Where we differ from llama.cpp on purpose: it compares keys with
``std::find`` (string ``==``, which stops at the first differing byte), so
the answer time leaks how much of a guess is right. Here every configured key
is compared with ``hmac.compare_digest`` over SHA-256 digests (equal lengths,
so not even a key's length leaks), and always all of them. Keys are never
logged: :class:`~service.settings.Settings` redacts them and the log
processor scrubs their values (``Settings.secrets``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from urllib.parse import parse_qsl

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, HTTPResponseBodyEvent, HTTPResponseStartEvent, HTTPScope, Receive, Scope, Send

from service.api.problems import PROBLEM_JSON

PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/"})
PUBLIC_PREFIX = "/dashboard/"  # the dashboard's static files
STREAM_PATHS = frozenset({"/events/stream", "/models/sse", "/logs/stream"})  # where ``?api_key=`` is read
_MESSAGE = "Invalid API Key"
_log = structlog.get_logger(__name__)


def _digest(key: str | bytes) -> bytes:
    return hashlib.sha256(key if isinstance(key, bytes) else key.encode()).digest()


class KeyChecker:
    """Constant-time membership of a presented key among the configured ones."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._digests = tuple(_digest(k) for k in keys)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def accepts(self, presented: bytes | None) -> bool:
        """Whether ``presented`` is one of the keys; compares against every key, always."""
        if presented is None:
            return False
        digest = _digest(presented)
        found = False
        for expected in self._digests:
            found |= hmac.compare_digest(digest, expected)
        return found


def presented_key(headers: dict[bytes, bytes]) -> bytes | None:
    """The key a request carries: ``Authorization`` (``Bearer `` stripped), else ``X-Api-Key``."""
    value = headers.get(b"authorization") or headers.get(b"x-api-key")
    if value is None:
        return None
    return value[len(b"Bearer ") :] if value.startswith(b"Bearer ") else value


def query_key(scope: HTTPScope) -> bytes | None:
    """``?api_key=`` on a GET of an event stream (EventSource sends no headers), else None."""
    if scope["method"] != "GET" or scope["path"] not in STREAM_PATHS:
        return None
    for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
        if name == "api_key":
            return value.encode("latin-1")
    return None


def _is_public(scope: HTTPScope) -> bool:
    path: str = scope["path"]
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX) or scope["method"] == "OPTIONS"


def unauthorized_body(path: str) -> bytes:
    """llama.cpp's 401 body, plus the problem details members; on Ollama's routes, Ollama's
    ``{"error": "..."}`` (its clients show that string)."""
    if path.startswith("/api/"):
        return json.dumps({"error": _MESSAGE}).encode()
    body = {
        "type": "/problems/authentication_error",
        "title": "authentication error",
        "status": 401,
        "detail": _MESSAGE,
        "instance": path,
        "error": {"message": _MESSAGE, "type": "authentication_error", "code": 401},
    }
    return json.dumps(body).encode()


def api_key_middleware(keys: Sequence[str]) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory, wrapped around the whole app before routing (``service.app``), as
    llama-server checks keys before routing (an unknown path is a 401 without one); a no-op without keys."""
    checker = KeyChecker(keys)

    def middleware(app: ASGIApp) -> ASGIApp:
        if not checker:
            return app

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP or _is_public(scope):
                await app(scope, receive, send)
                return
            presented = presented_key(dict(scope.get("headers") or [])) or query_key(scope)
            if checker.accepts(presented):
                await app(scope, receive, send)
                return
            _log.warning("unauthorized", path=scope["path"])  # never the presented value
            body = unauthorized_body(scope["path"])
            media = b"application/json" if scope["path"].startswith("/api/") else PROBLEM_JSON.encode()
            headers = [
                (b"content-type", media),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ]
            await send(HTTPResponseStartEvent(type="http.response.start", status=401, headers=headers))
            await send(HTTPResponseBodyEvent(type="http.response.body", body=body, more_body=False))

        return guarded

    return middleware
