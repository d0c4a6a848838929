"""Named keys for the e2e tests, created the way ``modelrouter keys add`` records them: a ``key_created``
event (:func:`service.core.key_commands.decide_create`) appended to the service's log, which every
node's tail folds. Only the salted digest is stored; the secret stays with the test."""

from __future__ import annotations

import secrets
from pathlib import Path

from service.core.key_commands import ScopeRequest, decide_create
from service.core.keys import SECRET_PREFIX, digest_secret
from service.core.state import RouterState
from service.event_store.sync_store import SyncEventStore


def add_key(location: Path | str, name: str, scope: ScopeRequest) -> str:
    """Append ``key_created`` for ``name`` with ``scope`` to the log at ``location``; the secret."""
    key_id, salt = secrets.token_hex(6), secrets.token_hex(16)
    secret = f"{SECRET_PREFIX}{key_id}-{secrets.token_urlsafe(24)}"
    event = decide_create(RouterState(), name, scope, key_id=key_id, salt=salt, digest=digest_secret(salt, secret))
    store = SyncEventStore(location, source={"kind": "test"})
    try:
        store.emit(event)
    finally:
        store.close()
    return secret
