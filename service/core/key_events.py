"""Named API keys' events (issue 34): created, changed, revoked.

Kept beside :mod:`service.core.events`, which re-exports them and lists them in its registry; the
catalogue is ``docs/event-catalogue.md`` ("Keys"). A key's secret is never in an event: only its
public ``key_id`` (the part of the secret that finds it) and a salted SHA-256 ``digest`` of the whole
secret. The envelope's ``model`` is empty: a key is not a model's. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from service.core.event_base import Event


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyScopeFields(Event):
    """A named key's scope as its events carry it (:class:`service.core.keys.KeyScope` in the fold).
    ``models``: glob patterns over model names and aliases, empty for every model; ``endpoints``:
    ``inference`` and/or ``admin``; ``rpm``/``tpm``: requests and tokens per minute (None: unlimited);
    ``max_keep_alive``: seconds, the cap on a client's ``keep_alive``/``ttl``; ``expires_at``: ISO 8601
    UTC, or None; ``priority``: a higher one is served first in a model's queue."""

    name: str
    models: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ("inference",)
    rpm: int | None = None
    tpm: int | None = None
    max_keep_alive: float | None = None
    expires_at: str | None = None
    priority: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyCreated(KeyScopeFields):
    """``modelrouter keys add`` / ``POST /keys``: a named key exists from now on. ``key_id`` is the
    public part of its secret (``mr-<key_id>-<token>``), ``salt`` and ``digest`` (hex) check the whole
    secret: ``sha256(salt + secret)``."""

    TYPE: ClassVar[str] = "key_created"
    key_id: str
    salt: str
    digest: str


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyChanged(KeyScopeFields):
    """``PATCH /keys/{name}``: the key's whole scope is now this one (its secret is unchanged)."""

    TYPE: ClassVar[str] = "key_changed"


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyRevoked(Event):
    """``modelrouter keys revoke`` / ``DELETE /keys/{name}``: the key stops working on every node."""

    TYPE: ClassVar[str] = "key_revoked"
    name: str
    reason: str = "revoked"
