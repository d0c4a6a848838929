"""The event store: one schema, an async path (service) and a sync path (workers)."""

from __future__ import annotations

from service.event_store._sql import EventFilter
from service.event_store.codec import NewEvent, new_event, to_wire
from service.event_store.sync_store import StoreSink, SyncEventStore

__all__ = ["EventFilter", "NewEvent", "StoreSink", "SyncEventStore", "new_event", "to_wire"]
