"""The event store: one schema, an async path (service), a sync path (CLI tools)
and lean writers for workers (stdlib sqlite3; psycopg for a PostgreSQL log, ``postgres/``).

Import each name from its module: ``codec`` (``NewEvent``, ``new_event``, ``to_wire``),
``statements`` (``EventFilter``), ``sync_store`` (``SyncEventStore``), ``async_store``,
``worker_writer``. This front exports nothing, so that a worker importing
``service.event_store.worker_writer`` does not pay for SQLAlchemy (~230 ms).
"""

from __future__ import annotations
