"""``/keys``: named API keys and their scopes (issue 34). A key's secret is in one answer only,
``POST /keys``'s; the listings show names and scopes, never a secret or a digest."""

from __future__ import annotations

from typing import Annotated

import msgspec

KeyName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, description="1-64 of A-Z a-z 0-9 _ . -")]
_Patterns = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=512)]],
    msgspec.Meta(max_length=256, description="glob patterns over model names and aliases; empty: every model"),
]
_Endpoints = Annotated[list[str], msgspec.Meta(min_length=1, max_length=2, description="`inference` and/or `admin`")]
_PerMinute = Annotated[int, msgspec.Meta(ge=1, le=10**12)]
_Seconds = Annotated[float, msgspec.Meta(ge=0, le=10**10)]


class KeyCreate(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /keys``: a new named key. ``expires_at`` (ISO 8601) or ``expires_in`` (seconds from now)."""

    name: KeyName
    models: _Patterns = msgspec.field(default_factory=list)
    endpoints: _Endpoints = msgspec.field(default_factory=lambda: ["inference"])
    rpm: _PerMinute | None = None
    tpm: _PerMinute | None = None
    max_keep_alive: _Seconds | None = None
    expires_at: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    expires_in: _Seconds | None = None
    priority: Annotated[int, msgspec.Meta(ge=-1000, le=1000)] = 0


class KeyPatch(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``PATCH /keys/{name}``: the members given replace the key's; the others stay (``null`` clears
    a limit or the expiry)."""

    models: _Patterns | msgspec.UnsetType = msgspec.UNSET
    endpoints: _Endpoints | msgspec.UnsetType = msgspec.UNSET
    rpm: _PerMinute | msgspec.UnsetType | None = msgspec.UNSET
    tpm: _PerMinute | msgspec.UnsetType | None = msgspec.UNSET
    max_keep_alive: _Seconds | msgspec.UnsetType | None = msgspec.UNSET
    expires_at: Annotated[str, msgspec.Meta(max_length=64)] | msgspec.UnsetType | None = msgspec.UNSET
    expires_in: _Seconds | msgspec.UnsetType = msgspec.UNSET
    priority: Annotated[int, msgspec.Meta(ge=-1000, le=1000)] | msgspec.UnsetType = msgspec.UNSET


class KeyView(msgspec.Struct, frozen=True):
    """A named key's name and scope (``prefix``: the public start of its secret, to tell keys apart)."""

    name: str
    prefix: str
    models: list[str]
    endpoints: list[str]
    rpm: int | None
    tpm: int | None
    max_keep_alive: float | None
    expires_at: str | None
    expired: bool
    priority: int
    created_at: str
    changed_at: str | None


class KeyList(msgspec.Struct, frozen=True):
    """``GET /keys``: every live named key, by name."""

    keys: list[KeyView]


class KeyIssued(msgspec.Struct, frozen=True):
    """``POST /keys``'s answer: the secret, shown this once (only its salted digest is kept)."""

    secret: str
    key: KeyView


class KeyRevokedAnswer(msgspec.Struct, frozen=True):
    """``DELETE /keys/{name}``'s answer: the key is revoked (it stops working on every node)."""

    name: str
    revoked: bool = True
