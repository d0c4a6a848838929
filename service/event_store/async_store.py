"""The service's event store: the same statements as the workers' store, run through
``AsyncConnection.run_sync`` on aiosqlite (a SQLite file) or asyncpg (a PostgreSQL URL)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from service.core.events import Recorded
from service.event_store import statements
from service.event_store.codec import NewEvent, to_recorded
from service.event_store.engines import async_engine_for
from service.event_store.pragmas import Synchronous
from service.event_store.rows import StoreUnavailable
from service.event_store.statements import EventFilter
from service.event_store.unavailable import describe, is_unreachable
from service.event_store.urls import is_postgres, is_sqlite, redacted, sqlite_path

T = TypeVar("T")
Unlisten = Callable[[], Awaitable[None]]


class AsyncEventStore:
    """Appends go through one write connection guarded by an ``asyncio.Lock``
    (SQLite has one writer anyway, PostgreSQL serialises appends with a lock of its
    own; the asyncio lock keeps waiting inside the event loop). Reads use a separate pool.

    ``location`` is a SQLite file or a ``postgresql://`` URL. On PostgreSQL a server that
    cannot be reached makes every call raise :class:`StoreUnavailable` (nothing was
    acknowledged), and the next call after it is back reconnects."""

    def __init__(self, location: Path | str, *, source: Mapping[str, Any], synchronous: Synchronous = "FULL") -> None:
        text = str(location)
        self.postgres = is_postgres(text)
        self.path: Path | None = None if self.postgres else sqlite_path(text) if is_sqlite(text) else Path(text)
        self.url = text if self.postgres else f"sqlite:///{self.path}"
        """The SQLite file; None on PostgreSQL."""
        self.source = {**source, "pid": source.get("pid", os.getpid())}
        self._writer: AsyncEngine = async_engine_for(location, synchronous, write=True)
        self._reader: AsyncEngine = async_engine_for(location, synchronous, write=False)
        self._lock = asyncio.Lock()
        self._commit_listeners: list[Callable[[], None]] = []

    def add_commit_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each append commits (the live state's tail reads it at once)."""
        self._commit_listeners.append(listener)

    async def append(self, batch: Sequence[NewEvent], expect: Mapping[str, int] | None = None) -> list[int]:
        """Append atomically; returns positions once committed (acknowledged).
        ``expect`` (model -> position) raises ``ConcurrencyConflict`` instead of
        appending when a newer event about one of those models exists."""
        async with self._lock:
            positions = await self._guard(self._append(batch, expect))
        for listener in self._commit_listeners:
            listener()
        return positions

    async def _append(self, batch: Sequence[NewEvent], expect: Mapping[str, int] | None) -> list[int]:
        async with self._writer.connect() as conn:
            return await conn.run_sync(statements.append, batch, self.source, expect)

    async def read(self, flt: EventFilter = EventFilter()) -> list[Recorded]:
        async def run() -> list[Recorded]:
            async with self._reader.connect() as conn:
                rows = await conn.run_sync(statements.select_events, flt)
            return [to_recorded(row) for row in rows]

        return await self._guard(run())

    async def head(self) -> int:
        async def run() -> int:
            async with self._reader.connect() as conn:
                return await conn.run_sync(statements.head)

        return await self._guard(run())

    async def watch_connection(self) -> AsyncConnection:
        """A dedicated read connection for the tailer (on SQLite its ``data_version``
        changes on every commit made through any other connection)."""
        return await self._guard(self._reader.connect())

    async def listen(self, conn: AsyncConnection, wake: Callable[[], None]) -> Unlisten | None:
        """On PostgreSQL: LISTEN on ``conn`` and call ``wake()`` on every append's NOTIFY (and
        when the connection is lost); returns how to stop. On SQLite None: writers wake the
        tail with datagrams instead (``wakeup.py``)."""
        if not self.postgres:
            return None
        from service.event_store.postgres.tail import listen

        return await self._guard(listen(conn, wake))

    async def _guard(self, call: Awaitable[T]) -> T:
        """Await ``call``; on PostgreSQL an unreachable server becomes :class:`StoreUnavailable`."""
        try:
            return await call
        except Exception as exc:
            if self.postgres and is_unreachable(exc):
                msg = (
                    f"the event store at {redacted(self.url)} is unreachable ({describe(exc)}); "
                    "nothing was acknowledged, and the store reconnects once the database is back"
                )
                raise StoreUnavailable(msg) from exc
            raise

    async def close(self) -> None:
        await self._writer.dispose()
        await self._reader.dispose()
