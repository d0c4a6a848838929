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

Named keys (issue 34, :mod:`service.core.keys`) sit beside the full keys: the middleware reads them
from the fold on every request, so auth is on as soon as one exists, and a revocation counts as soon
as this node's tail has it. A named key's request is refused before routing when the key has
expired (401 ``key_expired``) or the route is outside its ``endpoints`` (403
``endpoint_not_allowed``), in the shape of the API spoken (:mod:`service.api.refusals`); else its
:class:`~service.core.keys.Principal` goes to the handlers, which check the model.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from urllib.parse import parse_qsl

import structlog
from litestar.enums import ScopeType
from litestar.types import ASGIApp, HTTPResponseBodyEvent, HTTPResponseStartEvent, HTTPScope, Receive, Scope, Send

from service.api.principal import set_principal
from service.api.problems import PROBLEM_JSON
from service.api.refusals import send_refusal
from service.cluster.forwarding import CALLER_HEADER
from service.core.keys import (
    FULL_PRINCIPAL,
    NamedKey,
    Principal,
    Refusal,
    check_endpoint,
    endpoint_class,
    expired,
    find_key,
    name_problem,
)

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


KeySource = Callable[[], Mapping[str, NamedKey]]
"""The named keys as the fold holds them now (``live.state.keys``), read on every request, so a key
created or revoked on any node counts here as soon as this node's tail has it."""

# A forwarding node names the caller it served (service.cluster.forwarding.CALLER_HEADER); trusted only
# on a hop that presented a full key, so a named key cannot pose as another.
_CALLER = CALLER_HEADER.encode()


def forwarded_caller(headers: dict[bytes, bytes]) -> Principal:
    """The principal of a request made with a full key: the caller a forwarding node names (a
    valid key name), else :data:`~service.core.keys.FULL_PRINCIPAL`. Full access either way: the
    first node checked the caller's scope; the name only goes to ``request_completed``."""
    named = headers.get(_CALLER)
    name = named.decode("latin-1") if named else ""
    if name and name_problem(name) is None:
        return Principal(name)
    return FULL_PRINCIPAL


def _unauthorized(path: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = unauthorized_body(path)
    media = b"application/json" if path.startswith("/api/") else PROBLEM_JSON.encode()
    headers = [(b"content-type", media), (b"content-length", str(len(body)).encode()), (b"www-authenticate", b"Bearer")]
    return body, headers


def _named_caller(key: NamedKey, method: str, path: str, now: datetime) -> Principal | Refusal:
    """The principal of a named key's request, or why it is refused (expired: 401; route: 403)."""
    if expired(key.scope, now):
        return Refusal(401, "key_expired", "expires_at", "this key has expired")
    principal = Principal(key.name, key.scope)
    refusal = check_endpoint(principal, endpoint_class(method, path))
    return refusal if refusal is not None else principal


Admission = Callable[[Principal, str, str], Refusal | None]
"""The rate limits (:meth:`service.api.rate_gate.RateGate.admit_request`): a refusal, or None."""


def _admit_all(_principal: Principal, _method: str, _path: str) -> Refusal | None:
    return None


def api_key_middleware(
    keys: Sequence[str], named: KeySource, now: Callable[[], datetime], admit: Admission = _admit_all
) -> Callable[[ASGIApp], ASGIApp]:
    """An ASGI middleware factory, wrapped around the whole app before routing (``service.app``), as
    llama-server checks keys before routing (an unknown path is a 401 without one). On when a full
    key is configured or any named key exists (``named``); it sets the request's principal
    (:mod:`service.api.principal`) for the handlers. ``now``: the clock expiries are read against;
    ``admit``: the rate limits, asked once the caller is known (a 429 is answered here)."""
    checker = KeyChecker(keys)

    def middleware(app: ASGIApp) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP or _is_public(scope):
                await app(scope, receive, send)
                return
            current = named()
            if not checker and not current:  # llama-server's open mode: everyone is anonymous
                await app(scope, receive, send)
                return
            path: str = scope["path"]
            headers = dict(scope.get("headers") or [])
            presented = presented_key(headers) or query_key(scope)
            if checker.accepts(presented):
                await _admitted(forwarded_caller(headers), scope, receive, send)
                return
            key = find_key(current, presented)
            if key is None:
                _log.warning("unauthorized", path=path)  # never the presented value
                body, start = _unauthorized(path)
                await send(HTTPResponseStartEvent(type="http.response.start", status=401, headers=start))
                await send(HTTPResponseBodyEvent(type="http.response.body", body=body, more_body=False))
                return
            caller = _named_caller(key, scope["method"], path, now())
            if isinstance(caller, Refusal):
                _log.warning("key_refused", path=path, key=key.name, code=caller.code)
                await send_refusal(send, caller, path)
                return
            await _admitted(caller, scope, receive, send)

        async def _admitted(caller: Principal, scope: HTTPScope, receive: Receive, send: Send) -> None:
            """The caller is known (and the route in its scope): its rate limits, then the app."""
            set_principal(scope, caller)
            refusal = admit(caller, scope["method"], scope["path"])
            if refusal is not None:
                await send_refusal(send, refusal, scope["path"])
                return
            await app(scope, receive, send)

        return guarded

    return middleware
