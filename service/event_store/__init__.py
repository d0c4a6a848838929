"""The event store: one schema, an async path (service), a sync path (CLI tools)
and lean writers for workers (stdlib sqlite3; psycopg for a PostgreSQL log, ``postgres/``).

Exports load lazily, so that a worker importing ``service.event_store.worker_writer``
does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real types for mypy; at run time each name loads on first use (__getattr__)
    from service.event_store.codec import NewEvent, new_event, to_wire
    from service.event_store.statements import EventFilter
    from service.event_store.sync_store import SyncEventStore

__all__ = ["EventFilter", "NewEvent", "SyncEventStore", "new_event", "to_wire"]

_HOMES = {
    "EventFilter": "service.event_store.statements",
    "NewEvent": "service.event_store.codec",
    "new_event": "service.event_store.codec",
    "to_wire": "service.event_store.codec",
    "SyncEventStore": "service.event_store.sync_store",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
