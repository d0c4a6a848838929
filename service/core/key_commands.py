"""Decisions on named keys (issue 34): ``keys add``, a scope change, ``keys revoke``, as events.

Each takes the fold and the request and returns the event to append, or raises
:class:`~service.core.errors.CommandRejected` with a reason a person can read. The secret, its salt
and its id are made by the caller (randomness is not pure); only the digest reaches the event.
Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import service.core.events as ev
from service.core.errors import CommandRejected
from service.core.keys import ENDPOINT_CLASSES, KeyScope, name_problem
from service.core.state import RouterState


@dataclass(frozen=True, slots=True)
class ScopeRequest:
    """A scope as a client asks for it (``expires_at``: ISO 8601 text, checked by the caller)."""

    models: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ("inference",)
    rpm: int | None = None
    tpm: int | None = None
    max_keep_alive: float | None = None
    expires_at: str | None = None
    priority: int = 0


def _check_scope(scope: ScopeRequest) -> None:
    unknown = sorted(set(scope.endpoints) - set(ENDPOINT_CLASSES))
    if unknown or not scope.endpoints:
        raise CommandRejected(
            "invalid_request", f"endpoints must be one or more of {', '.join(ENDPOINT_CLASSES)} (got {scope.endpoints})"
        )
    for name, value in (("rpm", scope.rpm), ("tpm", scope.tpm)):
        if value is not None and value <= 0:
            raise CommandRejected("invalid_request", f"{name} must be a positive integer (got {value})")
    if scope.max_keep_alive is not None and scope.max_keep_alive < 0:
        raise CommandRejected(
            "invalid_request", f"max_keep_alive must be 0 or more seconds (got {scope.max_keep_alive})"
        )
    if any(not pattern or len(pattern) > 512 for pattern in scope.models):
        raise CommandRejected("invalid_request", "each model pattern must be 1-512 characters")


# Any: each field's own type, as the two events' constructors take them
def _scope_fields(scope: ScopeRequest) -> dict[str, Any]:
    """The scope as the fields ``key_created`` and ``key_changed`` share (endpoints without repeats)."""
    return {
        "models": tuple(scope.models),
        "endpoints": tuple(dict.fromkeys(scope.endpoints)),
        "rpm": scope.rpm,
        "tpm": scope.tpm,
        "max_keep_alive": scope.max_keep_alive,
        "expires_at": scope.expires_at,
        "priority": scope.priority,
    }


def decide_create(
    state: RouterState, name: str, scope: ScopeRequest, *, key_id: str, salt: str, digest: str
) -> ev.KeyCreated:
    """A new named key; a live name is a 409 (revoke it first), a bad name or scope a 400."""
    problem = name_problem(name)
    if problem is not None:
        raise CommandRejected("invalid_request", problem)
    if name in state.keys:
        raise CommandRejected("conflict", f"a key named {name!r} exists: revoke it first, or change its scope")
    if any(key.key_id == key_id for key in state.keys.values()):
        raise CommandRejected("conflict", "key id collision: try again")  # 48 random bits: never in practice
    _check_scope(scope)
    return ev.KeyCreated(name=name, key_id=key_id, salt=salt, digest=digest, **_scope_fields(scope))


def decide_change(state: RouterState, name: str, scope: ScopeRequest) -> ev.KeyChanged:
    """The key's whole scope replaced; an unknown key is a 404."""
    if name not in state.keys:
        raise CommandRejected("key_not_found", f"no key named {name!r}")
    _check_scope(scope)
    return ev.KeyChanged(name=name, **_scope_fields(scope))


def decide_revoke(state: RouterState, name: str) -> ev.KeyRevoked:
    """The key revoked; an unknown (or already revoked) key is a 404."""
    if name not in state.keys:
        raise CommandRejected("key_not_found", f"no key named {name!r}")
    return ev.KeyRevoked(name=name)


def current_scope(scope: KeyScope) -> ScopeRequest:
    """A key's scope as a request (``PATCH`` changes some fields and keeps the others)."""
    return ScopeRequest(
        models=scope.models,
        endpoints=scope.endpoints,
        rpm=scope.rpm,
        tpm=scope.tpm,
        max_keep_alive=scope.max_keep_alive,
        expires_at=None if scope.expires_at is None else scope.expires_at.isoformat(),
        priority=scope.priority,
    )
