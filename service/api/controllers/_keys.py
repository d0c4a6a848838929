"""``/keys``: named API keys (issue 34). ``POST`` makes one and answers its secret once, ``GET`` lists
names and scopes, ``PATCH`` changes a scope, ``DELETE`` revokes. Only a full key manages keys (a
named key, even an admin one, may not widen its own scope); a service started without a full key
refuses to make named keys at all, so nobody locks themselves out. The decisions are
:mod:`service.core.key_commands`; the secret never reaches the log, only its salted digest."""

from __future__ import annotations

import dataclasses
import secrets
from datetime import UTC, datetime, timedelta
from typing import Annotated

import msgspec
from litestar import delete, get, patch, post
from litestar.params import Parameter, SkipValidation
from litestar.status_codes import HTTP_200_OK

from service.api.problems import Problem
from service.api.refusals import refusal_problem
from service.api.schemas import KeyCreate, KeyIssued, KeyList, KeyPatch, KeyRevokedAnswer, KeyView, problems
from service.core.decision import Append, Decision
from service.core.events import Event
from service.core.key_commands import ScopeRequest, current_scope, decide_change, decide_create, decide_revoke
from service.core.keys import SECRET_PREFIX, NamedKey, Principal, Refusal, digest_secret, expired
from service.core.state import RouterState
from service.event_store.codec import format_time
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.interpreter import Interpreter
from service.supervision.surroundings import Clock

NO_FULL_KEY = (
    "named keys need a full key: start the service with --api-key (or --api-key-file, LLAMA_API_KEY), "
    "then manage keys with it"
)
_FULL_ONLY = Refusal(403, "endpoint_not_allowed", "full key", "only a full key (--api-key) manages keys")
_Name = Annotated[str, Parameter(min_length=1, max_length=64, description="the key's name")]


def _require_full(caller: Principal, path: str) -> None:
    if not caller.full:
        raise refusal_problem(_FULL_ONLY, path)


def _expiry(expires_at: str | None, expires_in: float | None, now: datetime) -> str | None:
    """The expiry as ISO 8601 UTC text: ``expires_in`` seconds from now, or ``expires_at`` (naive: UTC)."""
    if expires_in is not None:
        return (now + timedelta(seconds=expires_in)).isoformat()
    if expires_at is None:
        return None
    try:
        when = datetime.fromisoformat(expires_at)
    except ValueError:
        raise Problem(400, "invalid_request", f"expires_at is not an ISO 8601 time: {expires_at!r}") from None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


def key_view(key: NamedKey, now: datetime) -> KeyView:
    """A key as the listings show it: never its digest or salt."""
    scope = key.scope
    return KeyView(
        name=key.name,
        prefix=f"{SECRET_PREFIX}{key.key_id}",
        models=list(scope.models),
        endpoints=list(scope.endpoints),
        rpm=scope.rpm,
        tpm=scope.tpm,
        max_keep_alive=scope.max_keep_alive,
        expires_at=None if scope.expires_at is None else format_time(scope.expires_at),
        expired=expired(scope, now),
        priority=scope.priority,
        created_at=format_time(key.created_at),
        changed_at=None if key.changed_at is None else format_time(key.changed_at),
    )


def _one_event(event: Event) -> Decision[None]:
    return Decision(None, (Append(event, None),))


@post("/keys", operation_id="createKey", tags=["keys"], status_code=HTTP_200_OK, responses=problems(400, 403, 409))
async def create_key(
    data: KeyCreate, interpreter: Interpreter, settings: Settings, clock: SkipValidation[Clock], caller: Principal
) -> KeyIssued:
    """A new named key; the answer holds its secret, shown this once."""
    _require_full(caller, "/keys")
    if not settings.api_keys:
        raise Problem(409, "no_full_key", NO_FULL_KEY)
    now = clock.now()
    scope = ScopeRequest(
        models=tuple(data.models),
        endpoints=tuple(data.endpoints),
        rpm=data.rpm,
        tpm=data.tpm,
        max_keep_alive=data.max_keep_alive,
        expires_at=_expiry(data.expires_at, data.expires_in, now),
        priority=data.priority,
    )
    key_id, salt = secrets.token_hex(6), secrets.token_hex(16)
    secret = f"{SECRET_PREFIX}{key_id}-{secrets.token_urlsafe(32)}"
    digest = digest_secret(salt, secret)

    def decide(state: RouterState) -> Decision[None]:
        return _one_event(decide_create(state, data.name, scope, key_id=key_id, salt=salt, digest=digest))

    applied = await interpreter.apply(decide)
    return KeyIssued(secret=secret, key=key_view(applied.state.keys[data.name], now))


@get("/keys", operation_id="listKeys", tags=["keys"], responses=problems(403))
async def list_keys(live: LiveState, clock: SkipValidation[Clock], caller: Principal) -> KeyList:
    """Every live named key: names and scopes, never secrets or digests."""
    _require_full(caller, "/keys")
    now = clock.now()
    return KeyList(keys=[key_view(key, now) for _, key in sorted(live.state.keys.items())])


def _patched(key: NamedKey, data: KeyPatch, now: datetime) -> ScopeRequest:
    base = current_scope(key.scope)
    given = {f: getattr(data, f) for f in data.__struct_fields__ if getattr(data, f) is not msgspec.UNSET}
    expires_in = given.pop("expires_in", None)
    if "expires_at" in given or expires_in is not None:
        given["expires_at"] = _expiry(given.get("expires_at"), expires_in, now)
    for listed in ("models", "endpoints"):
        if listed in given:
            given[listed] = tuple(given[listed])
    return dataclasses.replace(base, **given)


@patch("/keys/{name:str}", operation_id="changeKey", tags=["keys"], responses=problems(400, 403, 404))
async def change_key(
    name: _Name, data: KeyPatch, interpreter: Interpreter, clock: SkipValidation[Clock], caller: Principal
) -> KeyView:
    """Change a key's scope (the members given); its secret stays the same."""
    _require_full(caller, f"/keys/{name}")
    now = clock.now()

    def decide(state: RouterState) -> Decision[None]:
        key = state.keys.get(name)
        scope = _patched(key, data, now) if key is not None else ScopeRequest()
        return _one_event(decide_change(state, name, scope))

    applied = await interpreter.apply(decide)
    return key_view(applied.state.keys[name], now)


@delete(
    "/keys/{name:str}",
    operation_id="revokeKey",
    tags=["keys"],
    status_code=HTTP_200_OK,
    responses=problems(400, 403, 404),
)
async def revoke_key(name: _Name, interpreter: Interpreter, caller: Principal) -> KeyRevokedAnswer:
    """Revoke a key: it stops working on every node as soon as each one's tail has the event."""
    _require_full(caller, f"/keys/{name}")
    await interpreter.apply(lambda state: _one_event(decide_revoke(state, name)))
    return KeyRevokedAnswer(name=name)


KEY_HANDLERS = (create_key, list_keys, change_key, revoke_key)
