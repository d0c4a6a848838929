"""The service's event store: the same statements as the workers' store, run through
``AsyncConnection.run_sync`` on aiosqlite (a SQLite file) or asyncpg (a PostgreSQL URL)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

import service.event_store.statements as statements
from service.core.events import EventSource, LogWritesResumed, Recorded
from service.event_store.codec import NewEvent, to_recorded
from service.event_store.engines import async_engine_for
from service.event_store.pragmas import Synchronous
from service.event_store.rows import LogDiskFull, StoreUnavailable
from service.event_store.statements import EventFilter
from service.event_store.unavailable import describe, is_unreachable
from service.event_store.urls import is_postgres, is_sqlite, redacted, sqlite_path

T = TypeVar("T")
Unlisten = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class WriteOutage:
    """Appends refused for a full disk, since the first refusal (``since``: monotonic seconds)."""

    since: float
    refused: int
    last: LogDiskFull
    """The latest refusal: what ``/health`` shows."""


class AsyncEventStore:
    """Appends go through one write connection guarded by an ``asyncio.Lock``
    (SQLite has one writer anyway, PostgreSQL serialises appends with a lock of its
    own; the asyncio lock keeps waiting inside the event loop). Reads use a separate pool.

    ``location`` is a SQLite file or a ``postgresql://`` URL. On PostgreSQL a server that
    cannot be reached makes every call raise :class:`StoreUnavailable` (nothing was
    acknowledged), and the next call after it is back reconnects.

    A full disk (either backend) makes an append raise :class:`LogDiskFull` and opens an
    :attr:`outage`; the first append that lands afterwards carries a ``log_writes_resumed``
    event in its transaction, which closes it (:meth:`retry_outage` tries that alone)."""

    def __init__(self, location: Path | str, *, source: EventSource, synchronous: Synchronous = "FULL") -> None:
        text = str(location)
        self.postgres = is_postgres(text)
        self.path: Path | None = None if self.postgres else sqlite_path(text) if is_sqlite(text) else Path(text)
        self.url = text if self.postgres else f"sqlite:///{self.path}"
        """The SQLite file; None on PostgreSQL."""
        self.location = redacted(text) if self.postgres else str(self.path)
        """What messages name: the file, or the database's URL without its password."""
        self.outage: WriteOutage | None = None
        """Set while the log's disk refuses appends (until one lands again)."""
        self.source: EventSource = {**source, "pid": source.get("pid", os.getpid())}
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
            positions = await self._append_noting_outage(batch, expect, counted=True)
        for listener in self._commit_listeners:
            listener()
        return positions

    async def retry_outage(self) -> LogDiskFull | None:
        """While appends are refused for a full disk, try to record the outage's end now (a
        ``log_writes_resumed`` event alone); the refusal when the disk is still full, else None."""
        if self.outage is None:
            return None
        async with self._lock:
            if self.outage is None:  # an append that waited for the lock just closed it
                return None
            try:
                await self._append_noting_outage([], None, counted=False)
            except LogDiskFull as exc:
                return exc
            except StoreUnavailable:  # down as well: the refusal stands until it is back
                return self.outage.last
        for listener in self._commit_listeners:
            listener()
        return None

    async def _append_noting_outage(
        self, batch: Sequence[NewEvent], expect: Mapping[str, int] | None, *, counted: bool
    ) -> list[int]:
        """Append (the lock held); a refusal for a full disk opens or extends :attr:`outage`, and
        while one is open the batch also carries the event that closes it."""
        outage = self.outage
        full = [*batch, self._resumed(outage)] if outage is not None else batch
        try:
            positions = await self._guard(self._append(full, expect))
        except LogDiskFull as exc:
            if outage is None:
                self.outage = WriteOutage(time.monotonic(), int(counted), exc)
            else:
                outage.refused += int(counted)
                outage.last = exc
            raise
        self.outage = None
        return positions[: len(batch)]

    def _resumed(self, outage: WriteOutage) -> NewEvent:
        outage_ms = round((time.monotonic() - outage.since) * 1000, 1)
        return NewEvent(LogWritesResumed(refused=outage.refused, outage_ms=outage_ms, location=self.location))

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
        """Await ``call``; a full disk becomes :class:`LogDiskFull`, and on PostgreSQL an
        unreachable server :class:`StoreUnavailable`."""
        try:
            return await call
        except Exception as exc:
            LogDiskFull.raise_if(exc, self.location)
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
