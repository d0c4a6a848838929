"""The synchronous event store used by CLI tools and tests (a SQLite file or a PostgreSQL URL)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sqlalchemy import Connection

import service.event_store.statements as statements
from service.core.events import Event, EventSource, Recorded
from service.event_store.codec import NewEvent, to_recorded
from service.event_store.engines import sync_engine_for
from service.event_store.pragmas import Synchronous
from service.event_store.rows import LogDiskFull
from service.event_store.statements import EventFilter
from service.event_store.urls import is_postgres, is_sqlite, sqlite_path
from service.event_store.wakeup import Waker
from service.event_store.worker_writer import EventWriter


class SyncEventStore:
    """Append to and read from the log at ``location``: a SQLite file (stdlib sqlite3
    driver) or a ``postgresql://`` URL (psycopg 3).

    Each process opens its own connections (never inherit one across fork).
    ``source`` is stamped on every event this store appends, e.g.
    ``{"kind": "download_worker", "pid": 1234}``.
    """

    def __init__(self, location: Path | str, *, source: EventSource, synchronous: Synchronous = "FULL") -> None:
        text = str(location)
        self.postgres = is_postgres(text)
        path = None if self.postgres else sqlite_path(text) if is_sqlite(text) else Path(text)
        self.path = path
        self.source: EventSource = {**source, "pid": source.get("pid", os.getpid())}
        self._reader = sync_engine_for(location, synchronous, write=False)
        self._write_lock = threading.Lock()  # workers may append from a helper thread
        self._write_conn: Connection | None = None
        self._waker: Waker | None = None
        self._pg_writer: EventWriter | None = None
        if path is None:
            # Appends go through the workers' psycopg writer (the same insert_rows, without
            # SQLAlchemy's transaction layer: ~25 % more appends/s, docs/benchmarks.md), which
            # also reconnects after a server restart; its NOTIFY wakes a running service's tail.
            from service.event_store.postgres.worker_writer import PostgresWorkerEventWriter

            self._pg_writer = PostgresWorkerEventWriter(text, source=self.source, connect=False)
        else:
            self._writer = sync_engine_for(location, synchronous, write=True)
            self._waker = Waker(path)  # a running service's tail reads the log when told

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        """Append all of ``batch`` atomically; returns positions (see ``statements.append``).
        The write connection stays open: checking one out per append costs more
        than the insert itself. On PostgreSQL an unreachable server raises
        :class:`StoreUnavailable` (see ``postgres/worker_writer.py``); a full disk raises
        :class:`LogDiskFull` on either."""
        if self._pg_writer is not None:
            return self._pg_writer.append(batch)
        with self._write_lock:
            if self._write_conn is None:
                self._write_conn = self._writer.connect()
            try:
                positions = statements.append(self._write_conn, batch, self.source)
            except Exception as exc:
                self._write_conn.invalidate()
                self._write_conn.close()
                self._write_conn = None
                LogDiskFull.raise_if(exc, str(self.path))
                raise
        if self._waker is not None:
            self._waker.wake()
        return positions

    def emit(self, event: Event, *, model: str | None = None) -> int:
        """Append one event; returns its position."""
        return self.append([NewEvent(event, model)])[0]

    def read(self, flt: EventFilter = EventFilter()) -> list[Recorded]:
        with self._reader.connect() as conn:
            return [to_recorded(row) for row in statements.select_events(conn, flt)]

    def head(self) -> int:
        with self._reader.connect() as conn:
            return statements.head(conn)

    def tail(
        self, after: int = 0, *, poll_interval: float = 0.005, stop: Callable[[], bool] = lambda: False
    ) -> Iterator[Recorded]:
        """Yield every event after ``after`` in order, then wait for more until
        ``stop()``. Polls ``statements.change_marker`` (SQLite's ``data_version``,
        PostgreSQL's head) so commits by other processes are seen within ``poll_interval``."""
        position = after
        with self._reader.connect() as conn:
            seen_version: int | None = None
            while not stop():
                version = statements.change_marker(conn)
                if version != seen_version:
                    seen_version = version
                    while True:
                        rows = statements.select_events(conn, EventFilter(after=position, limit=1000))
                        for row in rows:
                            recorded = to_recorded(row)
                            position = recorded.position
                            yield recorded
                        if len(rows) < 1000:
                            break
                conn.rollback()  # end the implicit read so the next poll sees new commits
                time.sleep(poll_interval)

    def close(self) -> None:
        if self._waker is not None:
            self._waker.close()
        if self._pg_writer is not None:
            self._pg_writer.close()
        else:
            with self._write_lock:
                if self._write_conn is not None:
                    self._write_conn.close()
                    self._write_conn = None
            self._writer.dispose()
        self._reader.dispose()
