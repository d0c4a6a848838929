"""The one insert every writer runs, at the DBAPI level.

``statements.append`` (SQLAlchemy: the service and CLI tools) and
``WorkerEventWriter`` (stdlib sqlite3: worker processes) both call
:func:`insert_rows` inside their own ``BEGIN IMMEDIATE`` transaction, so there
is one append path whichever process writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from service.event_store.codec import NewEvent, dumps, encode, format_time

INSERT_SQL = (
    "INSERT INTO events (event_id, type, schema_version, model, data, source, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(event_id) DO NOTHING RETURNING position"
)
EXISTING_SQL = "SELECT position FROM events WHERE event_id = ?"


def insert_rows(cursor: Any, batch: Sequence[NewEvent], source: dict[str, Any]) -> list[int]:
    """Insert ``batch`` with the write lock already held; one position per event
    (an ``event_id`` already stored gives its original position)."""
    source_json = dumps(source)
    # Stamped after taking the write lock, so recorded_at follows position order.
    recorded_at = format_time(datetime.now(UTC))
    positions: list[int] = []
    for new in batch:
        cursor.execute(INSERT_SQL, encode(new, source_json, recorded_at))
        row = cursor.fetchone()
        if row is None:
            cursor.execute(EXISTING_SQL, (new.event_id,))
            row = cursor.fetchone()
        positions.append(int(row[0]))
    return positions
