"""The service's event store: the same statements as the workers' store, run
on aiosqlite through ``AsyncConnection.run_sync``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from service.core.events import Recorded
from service.event_store import statements
from service.event_store.codec import NewEvent, to_recorded
from service.event_store.engines import async_engine
from service.event_store.pragmas import Synchronous
from service.event_store.statements import EventFilter


class AsyncEventStore:
    """Appends go through one write connection guarded by an ``asyncio.Lock``
    (SQLite has one writer anyway; the lock keeps waiting inside the event loop
    instead of inside SQLite's busy handler). Reads use a separate pool."""

    def __init__(self, path: Path | str, *, source: Mapping[str, Any], synchronous: Synchronous = "FULL") -> None:
        self.path = Path(path)
        self.source = {**source, "pid": source.get("pid", os.getpid())}
        self._writer: AsyncEngine = async_engine(self.path, synchronous, write=True)
        self._reader: AsyncEngine = async_engine(self.path, synchronous, write=False)
        self._lock = asyncio.Lock()
        self._commit_listeners: list[Callable[[], None]] = []

    def add_commit_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each append commits (the live state's tail reads it at once)."""
        self._commit_listeners.append(listener)

    async def append(self, batch: Sequence[NewEvent], expect: Mapping[str, int] | None = None) -> list[int]:
        """Append atomically; returns positions once committed (acknowledged).
        ``expect`` (model -> position) raises ``ConcurrencyConflict`` instead of
        appending when a newer event about one of those models exists."""
        async with self._lock, self._writer.connect() as conn:
            positions = await conn.run_sync(statements.append, batch, self.source, expect)
        for listener in self._commit_listeners:
            listener()
        return positions

    async def read(self, flt: EventFilter = EventFilter()) -> list[Recorded]:
        async with self._reader.connect() as conn:
            rows = await conn.run_sync(statements.select_events, flt)
        return [to_recorded(row) for row in rows]

    async def head(self) -> int:
        async with self._reader.connect() as conn:
            return await conn.run_sync(statements.head)

    async def watch_connection(self) -> AsyncConnection:
        """A dedicated read connection for the tailer (its ``data_version``
        changes on every commit made through any other connection)."""
        return await self._reader.connect()

    async def close(self) -> None:
        await self._writer.dispose()
        await self._reader.dispose()
