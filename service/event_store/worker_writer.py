"""The workers' event writer: stdlib ``sqlite3`` only (``open_writer`` hands a PostgreSQL
URL to ``postgres/worker_writer.py`` instead).

Importing SQLAlchemy costs a worker ~0.2 s of start-up (every download and
every model load pays it), and a worker only ever appends. It runs the same
insert as the service (:func:`service.event_store.rows.insert_rows`) under the
same PRAGMAs and the same ``BEGIN IMMEDIATE`` discipline.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from service.core.events import Event, EventSource
from service.event_store.codec import NewEvent
from service.event_store.pragmas import BUSY_TIMEOUT_MS, Synchronous, configure_connection
from service.event_store.rows import LogDiskFull, insert_rows
from service.event_store.urls import is_postgres, is_sqlite, sqlite_path
from service.event_store.wakeup import Waker


class EventWriter(Protocol):
    """What a worker appends through, whichever database holds the log."""

    source: EventSource

    def append(self, batch: Sequence[NewEvent]) -> list[int]: ...

    def emit(self, event: Event, *, model: str | None = None) -> int: ...

    def close(self) -> None: ...


def open_writer(target: Path | str, *, source: EventSource) -> EventWriter:
    """The writer for a worker's ``--db PATH`` or ``--database-url URL``: stdlib sqlite3 for a
    file (or ``sqlite:///`` URL), psycopg for ``postgresql://`` -- imported only then."""
    text = str(target)
    if is_postgres(text):
        from service.event_store.postgres.worker_writer import PostgresWorkerEventWriter

        return PostgresWorkerEventWriter(text, source=source)
    return WorkerEventWriter(sqlite_path(text) if is_sqlite(text) else text, source=source)


class WorkerEventWriter:
    """Append-only access to the log from a worker process."""

    def __init__(self, path: Path | str, *, source: EventSource, synchronous: Synchronous | None = None) -> None:
        level = synchronous or os.environ.get("MODELROUTER_SYNCHRONOUS", "FULL").upper()
        self.source: EventSource = {**source, "pid": source.get("pid", os.getpid())}
        self.location = str(path)
        # Opened here, in this process: never inherit a connection across fork.
        self._conn = sqlite3.connect(
            str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
        )
        configure_connection(self._conn, "NORMAL" if level == "NORMAL" else "FULL")
        self._lock = threading.Lock()  # a worker may emit from a helper thread
        self._waker = Waker(path)  # the service's tail reads the log when told, instead of polling

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        """Append ``batch`` atomically; returns positions once committed. A full disk raises
        :class:`LogDiskFull` (SQLite has rolled the transaction back: the next append may succeed)."""
        with self._lock:
            cursor = self._conn.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    positions = insert_rows(cursor, batch, self.source)
                    cursor.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # SQLITE_FULL at COMMIT rolls back by itself
                        cursor.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                LogDiskFull.raise_if(exc, self.location)
                raise
            finally:
                cursor.close()
        self._waker.wake()
        return positions

    def emit(self, event: Event, *, model: str | None = None) -> int:
        """Append one event (durable when this returns); returns its position."""
        return self.append([NewEvent(event, model)])[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._waker.close()
