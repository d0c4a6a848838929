"""The event store's contract, on a real SQLite file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy.exc import StatementError

from service.core.events import DownloadProgress, RouterStarted
from service.event_store import EventFilter, NewEvent, SyncEventStore, new_event


@pytest.fixture
def store(db_path: Path) -> SyncEventStore:
    s = SyncEventStore(db_path, source={"kind": "test"})
    yield s
    s.close()


_REQUESTED = {"repo": "org/a", "commit": "c" * 40, "files": [], "total_bytes": 1}


class TestAppend:
    def test_positions_are_consecutive_and_returned_in_order(self, store: SyncEventStore) -> None:
        positions = store.append(
            [NewEvent(RouterStarted(pid=i, version="0.1.0", host="127.0.0.1", port=8080)) for i in range(5)]
        )
        assert positions == [1, 2, 3, 4, 5]
        assert [r.event.pid for r in store.read()] == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]

    def test_duplicate_event_id_returns_original_position_and_stores_nothing(self, store: SyncEventStore) -> None:
        first = NewEvent(
            RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080),
            event_id="00000000-0000-0000-0000-000000000001",
        )
        store.append([NewEvent(RouterStarted(pid=0, version="0.1.0", host="127.0.0.1", port=8080))])
        assert store.append([first]) == [2]
        again = NewEvent(RouterStarted(pid=99, version="0.1.0", host="127.0.0.1", port=8080), event_id=first.event_id)
        assert store.append([NewEvent(RouterStarted(pid=3, version="0.1.0", host="127.0.0.1", port=8080)), again]) == [
            3,
            2,
        ]
        stored = store.read()
        assert len(stored) == 3
        assert stored[1].event == RouterStarted(
            pid=1, version="0.1.0", host="127.0.0.1", port=8080
        )  # the original, not the retry's payload

    def test_batch_is_all_or_nothing(self, store: SyncEventStore) -> None:
        store.append([NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080))])
        poisoned = NewEvent(DownloadProgress(job_id="j", bytes_done=object(), bytes_total=1))  # type: ignore[arg-type]
        with pytest.raises((TypeError, StatementError)):
            store.append(
                [
                    NewEvent(RouterStarted(pid=2, version="0.1.0", host="127.0.0.1", port=8080)),
                    NewEvent(RouterStarted(pid=3, version="0.1.0", host="127.0.0.1", port=8080)),
                    poisoned,
                ]
            )
        assert [r.position for r in store.read()] == [1]
        assert store.append([NewEvent(RouterStarted(pid=4, version="0.1.0", host="127.0.0.1", port=8080))]) == [
            2
        ]  # no position was burnt visibly

    def test_source_and_model_are_recorded(self, store: SyncEventStore) -> None:
        store.emit(DownloadProgress(job_id="j", bytes_done=1, bytes_total=1), model="org/m:Q8_0")
        (rec,) = store.read()
        assert rec.model == "org/m:Q8_0"
        assert rec.source["kind"] == "test" and isinstance(rec.source["pid"], int)


class TestImmutability:
    def test_update_is_rejected(self, store: SyncEventStore, db_path: Path) -> None:
        store.append([NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080))])
        with sqlite3.connect(db_path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE events SET type = 'router_stopped'")

    def test_delete_is_rejected(self, store: SyncEventStore, db_path: Path) -> None:
        store.append([NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080))])
        with sqlite3.connect(db_path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("DELETE FROM events")
        assert len(store.read()) == 1


class TestRead:
    def test_filters(self, store: SyncEventStore) -> None:
        store.append(
            [
                new_event("download_requested", {"job_id": "a", **_REQUESTED}, model="m1"),
                new_event("download_progress", {"job_id": "a", "bytes_done": 1, "bytes_total": 1}, model="m1"),
                new_event("instance_requested", {"instance_id": "i", "port": 9000}, model="m2"),
                new_event("router_started", {"pid": 1, "version": "0.1.0", "host": "127.0.0.1", "port": 8080}),
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


class TestTransactions:
    def test_writes_use_begin_immediate(self, db_path: Path) -> None:
        """Guard: a deferred read-then-write loses the race with SQLITE_BUSY at once,
        while our store's writer waits for the lock and succeeds."""
        holder = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute(
            "INSERT INTO events (event_id, type, schema_version, data, source, recorded_at) VALUES ('x','router_started',1,'{}','{}','2026-01-01T00:00:00.000000Z')"
        )
        store = SyncEventStore(db_path, source={"kind": "test"})
        done: list[int] = []
        thread = threading.Thread(
            target=lambda: done.extend(
                store.append([NewEvent(RouterStarted(pid=2, version="0.1.0", host="127.0.0.1", port=8080))])
            )
        )
        thread.start()
        thread.join(0.3)
        assert thread.is_alive(), "the store's writer must wait on the lock (busy_timeout), not fail"
        holder.execute("COMMIT")
        thread.join(30)
        assert done == [2]
        store.close()
        holder.close()

    def test_every_append_transaction_starts_with_begin_immediate(self, db_path: Path) -> None:
        store = SyncEventStore(db_path, source={"kind": "test"})
        store.append(
            [NewEvent(RouterStarted(pid=0, version="0.1.0", host="127.0.0.1", port=8080))]
        )  # opens the write connection
        assert store._write_conn is not None
        statements: list[str] = []
        store._write_conn.connection.dbapi_connection.set_trace_callback(statements.append)  # type: ignore[union-attr]
        store.append(
            [
                NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080)),
                NewEvent(RouterStarted(pid=2, version="0.1.0", host="127.0.0.1", port=8080)),
            ]
        )
        assert statements[0] == "BEGIN IMMEDIATE"
        assert statements.count("BEGIN IMMEDIATE") == 1
        assert statements[-1] == "COMMIT"
        store.close()
