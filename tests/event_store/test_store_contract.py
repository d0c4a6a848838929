"""The writer contract (``tests/event_store/contract.py``) for all three writers, and
what only the stores do: append-only rows and filtered reads."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent, new_event
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from service.event_store.worker_writer import WorkerEventWriter, open_writer
from tests.event_store.contract import Writer, WriterContract, started


class _AsyncWriter:
    """The service's async store on a private event loop, called synchronously."""

    def __init__(self, path: Path | str, source: dict[str, Any]) -> None:
        self._loop = asyncio.new_event_loop()
        self.store = AsyncEventStore(path, source=source)
        self.source = self.store.source

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        return self._loop.run_until_complete(self.store.append(batch))

    def trace(self, callback: Callable[[str], None]) -> None:
        async def install() -> None:
            # pool_size=1: the one write connection every later append checks out.
            async with self.store._writer.connect() as conn:
                raw = await conn.get_raw_connection()
                await raw.driver_connection.set_trace_callback(callback)  # type: ignore[union-attr]  # aiosqlite's

        self._loop.run_until_complete(install())

    def close(self) -> None:
        self._loop.run_until_complete(self.store.close())
        self._loop.close()


class _SyncWriter:
    def __init__(self, path: Path | str, source: dict[str, Any]) -> None:
        self.store = SyncEventStore(path, source=source)
        self.source = self.store.source

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        return self.store.append(batch)

    def trace(self, callback: Callable[[str], None]) -> None:
        assert self.store._write_conn is not None, "append once first: the write connection opens lazily"
        self.store._write_conn.connection.dbapi_connection.set_trace_callback(callback)  # type: ignore[union-attr]  # sqlite3's

    def close(self) -> None:
        self.store.close()


class _WorkerWriter:
    """The writer a worker opens for its ``--db``/``--database-url`` (sqlite3, or psycopg)."""

    def __init__(self, path: Path | str, source: dict[str, Any]) -> None:
        self.writer = open_writer(path, source=source)
        self.source = self.writer.source

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        return self.writer.append(batch)

    def trace(self, callback: Callable[[str], None]) -> None:
        assert isinstance(self.writer, WorkerEventWriter)
        self.writer._conn.set_trace_callback(callback)

    def close(self) -> None:
        self.writer.close()


class TestAsyncEventStore(WriterContract):
    SOURCE_KIND = "router"

    def create_writer(self, path: Path | str, source: dict[str, Any]) -> Writer:
        return _AsyncWriter(path, source)


class TestSyncEventStore(WriterContract):
    SOURCE_KIND = "cli"

    def create_writer(self, path: Path | str, source: dict[str, Any]) -> Writer:
        return _SyncWriter(path, source)


class TestWorkerEventWriter(WriterContract):
    SOURCE_KIND = "download_worker"

    def create_writer(self, path: Path | str, source: dict[str, Any]) -> Writer:
        return _WorkerWriter(path, source)


@pytest.fixture
def store(db_location: Path | str) -> SyncEventStore:
    """A store on each backend (reads are the same queries on both)."""
    s = SyncEventStore(db_location, source={"kind": "test"})
    yield s
    s.close()


@pytest.fixture
def sqlite_store(db_path: Path) -> SyncEventStore:
    s = SyncEventStore(db_path, source={"kind": "test"})
    yield s
    s.close()


class TestImmutability:
    """SQLite's triggers; PostgreSQL's are in tests/recovery/test_postgres_log.py."""

    def test_update_is_rejected(self, sqlite_store: SyncEventStore, db_path: Path) -> None:
        store = sqlite_store
        store.append([NewEvent(started(1))])
        with sqlite3.connect(db_path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE events SET type = 'router_stopped'")

    def test_delete_is_rejected(self, sqlite_store: SyncEventStore, db_path: Path) -> None:
        store = sqlite_store
        store.append([NewEvent(started(1))])
        with sqlite3.connect(db_path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("DELETE FROM events")
        assert len(store.read()) == 1


_REQUESTED = {"repo": "org/a", "commit": "c" * 40, "files": [], "total_bytes": 1}


class TestRead:
    def test_filters(self, store: SyncEventStore) -> None:
        store.append(
            [
                new_event("download_requested", {"job_id": "a", **_REQUESTED}, model="m1"),
                new_event("download_progress", {"job_id": "a", "bytes_done": 1, "bytes_total": 1}, model="m1"),
                new_event("instance_requested", {"instance_id": "i", "port": 9000}, model="m2"),
                NewEvent(started(1)),
            ]
        )
        assert [r.position for r in store.read(EventFilter(model="m1"))] == [1, 2]
        assert [r.type for r in store.read(EventFilter(types=("download_*",)))] == [
            "download_requested",
            "download_progress",
        ]
        assert [r.position for r in store.read(EventFilter(types=("router_started", "instance_requested")))] == [3, 4]
        assert [r.position for r in store.read(EventFilter(after=1, before=4))] == [2, 3]
        assert [r.position for r in store.read(EventFilter(limit=2))] == [1, 2]

    def test_prefix_match_treats_underscore_literally(self, store: SyncEventStore) -> None:
        store.append([new_event("download_requested", {"job_id": "a", **_REQUESTED}, model="m")])
        assert store.read(EventFilter(types=("downloadXrequested",))) == []
        assert store.read(EventFilter(types=("download?*",))) == []

    def test_emit_appends_one_typed_event(self, store: SyncEventStore) -> None:
        assert store.emit(started(7), model="m") == 1
        (rec,) = store.read()
        assert (rec.event, rec.model) == (started(7), "m")
