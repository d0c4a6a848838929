"""The fold's handlers of named keys (issue 34; see :mod:`service.core.fold`).

A creation adds the key (a second creation of a live name replaces it: the CLI refuses that, the
log may still hold it), a change replaces its scope, a revocation drops it. The fold holds the
current keys only; who had which key when is the log's to answer.
"""

from __future__ import annotations

from datetime import UTC, datetime

import service.core.events as ev
from service.core.fold_support import on
from service.core.key_events import KeyScopeFields
from service.core.keys import KeyScope, NamedKey
from service.core.state import RouterState, evolve


def scope_of(e: KeyScopeFields) -> KeyScope:
    """The scope a key's event states (an unreadable ``expires_at`` is taken as already expired)."""
    return KeyScope(
        models=tuple(e.models),
        endpoints=tuple(e.endpoints),
        rpm=e.rpm,
        tpm=e.tpm,
        max_keep_alive=e.max_keep_alive,
        expires_at=_when(e.expires_at),
        priority=e.priority,
    )


def _when(text: str | None) -> datetime | None:
    """An ISO 8601 time as an aware datetime (naive: UTC); an unreadable one is taken as long past."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@on(ev.KeyCreated)
def _created(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.KeyCreated)
    key = NamedKey(
        name=e.name, key_id=e.key_id, salt=e.salt, digest=e.digest, scope=scope_of(e), created_at=rec.recorded_at
    )
    return evolve(state, keys={**state.keys, e.name: key})


@on(ev.KeyChanged)
def _changed(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.KeyChanged)
    key = state.keys.get(e.name)
    if key is None:
        return state
    changed = NamedKey(
        name=key.name,
        key_id=key.key_id,
        salt=key.salt,
        digest=key.digest,
        scope=scope_of(e),
        created_at=key.created_at,
        changed_at=rec.recorded_at,
    )
    return evolve(state, keys={**state.keys, e.name: changed})


@on(ev.KeyRevoked)
def _revoked(state: RouterState, rec: ev.Recorded) -> RouterState:
    e = rec.event
    assert isinstance(e, ev.KeyRevoked)
    if e.name not in state.keys:
        return state
    return evolve(state, keys={k: v for k, v in state.keys.items() if k != e.name})
