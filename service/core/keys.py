"""Named API keys and their scopes (issue 34): the values the fold holds and the rules that check them.

``--api-key`` keys keep llama-server's meaning: full access. Named keys sit beside them, each with a
:class:`KeyScope`; a request is made by a :class:`Principal`: the named key's, :data:`FULL` (a full
key) or :data:`ANONYMOUS` (no key configured at all). Each rule answers None (allowed) or a
:class:`Refusal` naming the rule, never another key's data; the API shapes it per dialect.

A secret is ``mr-<key_id>-<token>``: ``key_id`` finds the key without trying each one, and the whole
secret is checked against its salted SHA-256 digest in constant time. Pure: stdlib only (hashlib and
hmac compute, they keep no state).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

ANONYMOUS = "anonymous"
"""The caller's name when the service has no key at all (every request is allowed, as llama-server)."""
FULL = "api-key"
"""The caller's name for a key given with ``--api-key``/``--api-key-file``/``LLAMA_API_KEY``: full access."""
RESERVED_NAMES = frozenset({ANONYMOUS, FULL})

INFERENCE = "inference"
ADMIN = "admin"
OPEN = "open"
"""A route any valid key may call (health, listings filtered by scope, its own usage)."""
ENDPOINT_CLASSES = (INFERENCE, ADMIN)
"""What a scope's ``endpoints`` may name."""

SECRET_PREFIX = "mr-"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEY_ID = re.compile(r"[0-9a-f]{12}")


@dataclass(frozen=True, slots=True)
class KeyScope:
    """What a named key may do. ``models``: glob patterns (``fnmatch``, case-sensitive) over a model's
    name and aliases, empty for every model; ``endpoints``: :data:`INFERENCE` and/or :data:`ADMIN`;
    ``rpm``/``tpm``: requests and tokens (prompt + completion) per minute, None for no limit;
    ``max_keep_alive``: seconds, the cap on a client's ``keep_alive``/``ttl``; ``expires_at``: after
    it, the key is refused; ``priority``: a higher one is served first when requests wait."""

    models: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = (INFERENCE,)
    rpm: int | None = None
    tpm: int | None = None
    max_keep_alive: float | None = None
    expires_at: datetime | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True)
class NamedKey:
    """A named key as the fold holds it: never its secret, only what checks it."""

    name: str
    key_id: str
    salt: str
    digest: str
    scope: KeyScope
    created_at: datetime
    changed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a request: ``scope`` None is full access (a full key, or no keys configured)."""

    name: str
    scope: KeyScope | None = None

    @property
    def full(self) -> bool:
        return self.scope is None


ANONYMOUS_PRINCIPAL = Principal(ANONYMOUS)
FULL_PRINCIPAL = Principal(FULL)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: ``status`` (403 scope, 429 limit, 401 expired), a stable ``code``
    (``model_not_allowed``, ``endpoint_not_allowed``, ``key_expired``, ``rate_limited``), the ``rule``
    in words (``models: team/*``), and ``retry_after`` seconds for a 429."""

    status: int
    code: str
    rule: str
    message: str
    retry_after: int | None = None


# --- names and secrets -------------------------------------------------------------


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a key (None: it can): 1-64 of ``A-Za-z0-9_.-``, not a reserved name."""
    if not _NAME.fullmatch(name):
        return f"key name {name!r} must be 1-64 characters of A-Z a-z 0-9 _ . -, starting with a letter or digit"
    if name in RESERVED_NAMES:
        return f"key name {name!r} is reserved"
    return None


def secret_key_id(secret: str | bytes) -> str | None:
    """The ``key_id`` of a named key's secret (``mr-<key_id>-<token>``), None if it is not one."""
    text = secret.decode("latin-1") if isinstance(secret, bytes) else secret
    if not text.startswith(SECRET_PREFIX):
        return None
    key_id, sep, token = text[len(SECRET_PREFIX) :].partition("-")
    return key_id if sep and token and _KEY_ID.fullmatch(key_id) else None


def digest_secret(salt: str, secret: str | bytes) -> str:
    """The stored digest of a secret: hex ``sha256(bytes.fromhex(salt) + secret)``."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(bytes.fromhex(salt) + raw).hexdigest()


def find_key(keys: Mapping[str, NamedKey], secret: bytes | None) -> NamedKey | None:
    """The named key ``secret`` opens, compared in constant time; None for none."""
    if secret is None:
        return None
    key_id = secret_key_id(secret)
    if key_id is None:
        return None
    for key in keys.values():
        if key.key_id == key_id:
            return key if hmac.compare_digest(digest_secret(key.salt, secret), key.digest) else None
    return None


# --- rules ---------------------------------------------------------------------------


def expired(scope: KeyScope, now: datetime) -> bool:
    return scope.expires_at is not None and now >= scope.expires_at


def model_allowed(scope: KeyScope, names: Iterable[str]) -> bool:
    """Whether any of a model's ``names`` (its name and aliases) matches one of the scope's patterns."""
    if not scope.models:
        return True
    names = tuple(names)
    return any(fnmatchcase(name, pattern) for pattern in scope.models for name in names)


def check_model(principal: Principal, names: Iterable[str], shown: str) -> Refusal | None:
    """A request naming model ``shown`` (known by ``names``): None if the principal may use it."""
    scope = principal.scope
    if scope is None or model_allowed(scope, names):
        return None
    rule = "models: " + ", ".join(scope.models)
    return Refusal(403, "model_not_allowed", rule, f"this key may not use model {shown!r} (its scope is {rule})")


def check_endpoint(principal: Principal, kind: str) -> Refusal | None:
    """A request to a route of class ``kind`` (:func:`endpoint_class`): None if the principal may."""
    scope = principal.scope
    if scope is None or kind == OPEN or kind in scope.endpoints:
        return None
    rule = "endpoints: " + ", ".join(scope.endpoints)
    return Refusal(403, "endpoint_not_allowed", rule, f"this key may not call {kind} routes (its scope is {rule})")


def capped_keep_alive(scope: KeyScope | None, requested: float | None) -> float | None:
    """A client's ``keep_alive``/``ttl`` in seconds (negative: forever; None: the model's own), capped by
    the scope's ``max_keep_alive``: forever and unset both become the cap."""
    if scope is None or scope.max_keep_alive is None:
        return requested
    cap = scope.max_keep_alive
    if requested is None or requested < 0:
        return cap
    return min(requested, cap)


# --- which routes are which -----------------------------------------------------------

INFERENCE_PATHS = frozenset(
    {
        "/completion",
        "/completions",
        "/v1/completions",
        "/chat/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/embedding",
        "/embeddings",
        "/v1/embeddings",
        "/rerank",
        "/reranking",
        "/v1/rerank",
        "/v1/reranking",
        "/infill",
        "/tokenize",
        "/detokenize",
        "/apply-template",
        "/api/chat",
        "/api/generate",
        "/api/embed",
        "/api/embeddings",
        "/v1/stream",
        "/v1/streams/lookup",
        "/chat/completions/input_tokens",
        "/v1/chat/completions/input_tokens",
        "/responses/input_tokens",
        "/v1/responses/input_tokens",
        "/v1/chat/completions/control",
        "/audio/transcriptions",
        "/v1/audio/transcriptions",
        "/predict",
    }
)
"""Routes that run a model for the caller (chat, completions, embeddings, rerank, Anthropic, Responses,
Ollama's chat and generate, transcriptions, Vertex's predict, and their helpers: counting tokens,
controlling or resuming one's own completion). Each checks the model too."""

OPEN_PATHS = frozenset(
    {
        "/health",
        "/v1/health",
        "/models",
        "/v1/models",
        "/api/tags",
        "/api/ps",
        "/api/version",
        "/api/show",
        "/usage",
    }
)
"""Routes any valid key may call: their answers are filtered to the key's scope (or its own usage)."""

OPEN_POSTS = frozenset({"/api/show"})
"""Reads that Ollama makes POSTs: a model's details, checked against the key's models."""


def endpoint_class(method: str, path: str) -> str:
    """:data:`INFERENCE`, :data:`OPEN` or :data:`ADMIN` for a request; anything not listed (control,
    the event log, metrics, logs, nodes, keys, ``/slots``, ``POST /props``, the server-side tools)
    is admin. The OpenAPI schema (``/schema*``) is open: it holds no data."""
    if path in INFERENCE_PATHS or path.startswith("/v1/stream/"):
        return INFERENCE
    if path == "/lora-adapters":  # reading a model's adapters is a client's; setting their scales, everyone's
        return INFERENCE if method in ("GET", "HEAD") else ADMIN
    if method in ("GET", "HEAD") and (path in OPEN_PATHS or path == "/props" or _is_schema(path)):
        return OPEN
    if method == "POST" and path in OPEN_POSTS:
        return OPEN
    return ADMIN


def _is_schema(path: str) -> bool:
    return path == "/schema" or path.startswith("/schema/")
