"""The writer contract every path into the log keeps, as an abstract test case.

Three writers append to the same ``events`` table: the service's
:class:`AsyncEventStore`, the CLI tools' :class:`SyncEventStore` and the
workers' writer (stdlib :class:`WorkerEventWriter`, or psycopg's on PostgreSQL).
Each test module subclasses :class:`WriterContract` and implements
:meth:`WriterContract.create_writer` (eventsourcing's ``AggregateRecorderTestCase``
pattern); every test runs on both backends (``db_location``: a real, migrated
SQLite file and a real PostgreSQL database) and reads back through a separate
connection. Only how the write lock is taken differs: ``BEGIN IMMEDIATE`` on
SQLite, an advisory lock (and a NOTIFY at commit) on PostgreSQL.
"""

from __future__ import annotations

import abc
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pytest

from service.core import events as ev
from service.core.errors import InvalidEvent
from service.event_store.codec import NewEvent
from service.event_store.postgres.sql import APPEND_LOCK, CHANNEL
from service.event_store.sync_store import SyncEventStore


class Writer(Protocol):
    """What the contract drives: a synchronous face on each writer."""

    source: dict[str, Any]

    def append(self, batch: Sequence[NewEvent]) -> list[int]: ...

    def trace(self, callback: Callable[[str], None]) -> None:
        """Route every SQL statement the write connection runs to ``callback``
        (``sqlite3``'s trace callback: what SQLite really executed)."""

    def close(self) -> None: ...


def started(pid: int) -> ev.RouterStarted:
    return ev.RouterStarted(pid=pid, version="0.1.0", host="127.0.0.1", port=8080)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Unregistered(ev.RouterStarted):
    """A subclass the registry does not know: its rows could never be read back as itself."""


class WriterContract(abc.ABC):
    """Subclass as ``TestXxx(WriterContract)`` and implement :meth:`create_writer`."""

    SOURCE_KIND: ClassVar[str] = "contract"

    @abc.abstractmethod
    def create_writer(self, location: Path | str, source: dict[str, Any]) -> Writer:
        """A writer appending to the migrated log at ``location`` (a SQLite file or a
        PostgreSQL URL), stamping ``source``."""

    @pytest.fixture
    def writer(self, db_location: Path | str) -> Iterator[Writer]:
        w = self.create_writer(db_location, {"kind": self.SOURCE_KIND})
        try:
            yield w
        finally:
            w.close()

    @pytest.fixture
    def stored(self, db_location: Path | str) -> Iterator[Callable[[], list[ev.Recorded]]]:
        reader = SyncEventStore(db_location, source={"kind": "reader"})
        try:
            yield reader.read
        finally:
            reader.close()

    def test_positions_are_consecutive_and_returned_in_order(
        self, writer: Writer, stored: Callable[[], list[ev.Recorded]]
    ) -> None:
        assert writer.append([NewEvent(started(i)) for i in range(3)]) == [1, 2, 3]
        assert writer.append([NewEvent(started(i)) for i in range(3, 5)]) == [4, 5]
        assert [(r.position, r.event) for r in stored()] == [(i + 1, started(i)) for i in range(5)]

    def test_duplicate_event_id_returns_the_original_position_and_stores_nothing(
        self, writer: Writer, stored: Callable[[], list[ev.Recorded]]
    ) -> None:
        first = NewEvent(started(1), event_id="00000000-0000-0000-0000-000000000001")
        writer.append([NewEvent(started(0))])
        assert writer.append([first]) == [2]
        retry = NewEvent(started(99), event_id=first.event_id)
        assert writer.append([NewEvent(started(3)), retry]) == [3, 2]
        assert [(r.position, r.event) for r in stored()] == [(1, started(0)), (2, started(1)), (3, started(3))]

    def test_a_batch_is_all_or_nothing(self, writer: Writer, stored: Callable[[], list[ev.Recorded]]) -> None:
        writer.append([NewEvent(started(1))])
        poisoned = NewEvent(ev.DownloadProgress(job_id="j", bytes_done=object(), bytes_total=1))  # type: ignore[arg-type]  # not JSON: fails inside the transaction
        with pytest.raises(TypeError):
            writer.append([NewEvent(started(2)), NewEvent(started(3)), poisoned])
        assert [r.position for r in stored()] == [1]
        assert writer.append([NewEvent(started(4))]) == [2]  # no position was burnt visibly

    def test_an_event_of_an_unregistered_class_is_refused_with_its_batch(
        self, writer: Writer, stored: Callable[[], list[ev.Recorded]]
    ) -> None:
        """Only the registry's classes are written: anything else would read back as another class."""
        for stray in (_Unregistered(pid=2, version="x", host="h", port=1), ev.Event()):
            with pytest.raises(InvalidEvent, match="not the registered class"):
                writer.append([NewEvent(started(1)), NewEvent(stray)])
        assert stored() == []

    def test_source_and_model_are_recorded(self, writer: Writer, stored: Callable[[], list[ev.Recorded]]) -> None:
        writer.append([NewEvent(ev.DownloadProgress(job_id="j", bytes_done=1, bytes_total=2), "org/m:Q8_0")])
        writer.append([NewEvent(started(1))])
        first, second = stored()
        assert (first.model, second.model) == ("org/m:Q8_0", None)
        assert first.source["kind"] == self.SOURCE_KIND and isinstance(first.source["pid"], int)
        assert first.source == writer.source

    def test_one_batch_shares_one_recorded_at_and_time_follows_position(
        self, writer: Writer, stored: Callable[[], list[ev.Recorded]]
    ) -> None:
        writer.append([NewEvent(started(i)) for i in range(3)])
        writer.append([NewEvent(started(3))])
        times = [r.recorded_at for r in stored()]
        assert times[0] == times[1] == times[2] <= times[3]

    def test_every_append_is_one_locked_transaction(self, writer: Writer, db_location: Path | str) -> None:
        if isinstance(db_location, str):
            _one_notify_per_committed_append(writer, db_location)
            return
        writer.append([NewEvent(started(0))])  # opens the write connection where that is lazy
        statements: list[str] = []
        writer.trace(statements.append)
        writer.append([NewEvent(started(1)), NewEvent(started(2))])
        assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
        assert statements.count("BEGIN IMMEDIATE") == 1

    def test_a_writer_waits_for_the_write_lock_instead_of_failing(
        self, writer: Writer, db_location: Path | str
    ) -> None:
        """A deferred read-then-write transaction would fail with SQLITE_BUSY at
        once; ``BEGIN IMMEDIATE`` under ``busy_timeout`` waits for the lock. On
        PostgreSQL the writer queues on the append lock another transaction holds."""
        if isinstance(db_location, str):
            _waits_for_the_append_lock(writer, db_location)
            return
        db_path = db_location
        writer.append([NewEvent(started(0))])
        statements: list[str] = []
        began = threading.Event()

        def seen(sql: str) -> None:
            statements.append(sql)
            if sql == "BEGIN IMMEDIATE":
                began.set()  # traced as the statement starts, before it waits for the lock

        writer.trace(seen)
        holder = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute(
            "INSERT INTO events (event_id, type, schema_version, data, source, recorded_at)"
            " VALUES ('x', 'router_stopped', 1, '{\"pid\": 1}', '{}', '2026-01-01T00:00:00.000000Z')"
        )
        outcome: list[object] = []

        def append() -> None:
            try:
                outcome.append(writer.append([NewEvent(started(2))]))
            except Exception as exc:  # reported below: failing fast is the bug this test catches
                outcome.append(exc)

        thread = threading.Thread(target=append)
        thread.start()
        try:
            # The writer has asked for the lock while the holder has it.
            assert began.wait(30), f"the writer never began its transaction: {statements}"
        finally:
            holder.execute("COMMIT")
            holder.close()
        thread.join(60)
        assert outcome == [[3]]


def _one_notify_per_committed_append(writer: Writer, url: str) -> None:
    """Every committed append sends exactly one NOTIFY, at commit; a failed batch sends none.
    The listener counts until a sentinel sent after the appends (delivery follows commit order)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as listener, psycopg.connect(url, autocommit=True) as other:
        listener.execute(f"LISTEN {CHANNEL}")
        writer.append([NewEvent(started(1)), NewEvent(started(2))])
        poisoned = NewEvent(ev.DownloadProgress(job_id="j", bytes_done=object(), bytes_total=1))  # type: ignore[arg-type]  # fails inside the transaction
        with pytest.raises(TypeError):
            writer.append([NewEvent(started(3)), poisoned])
        writer.append([NewEvent(started(4))])
        other.execute(f"NOTIFY {CHANNEL}, 'end'")
        payloads: list[str] = []
        for note in listener.notifies(timeout=30):
            payloads.append(note.payload)
            if note.payload == "end":
                break
    assert payloads == ["", "", "end"]


def _waits_for_the_append_lock(writer: Writer, url: str) -> None:
    import psycopg

    writer.append([NewEvent(started(0))])
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as watcher:
        holder.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
        holder.execute(
            "INSERT INTO events (position, event_id, type, schema_version, data, source, recorded_at)"
            " VALUES (2, 'x', 'router_stopped', 1, '{\"pid\": 1}', '{}', '2026-01-01T00:00:00.000000Z')"
        )
        outcome: list[object] = []

        def append() -> None:
            try:
                outcome.append(writer.append([NewEvent(started(2))]))
            except Exception as exc:  # reported below
                outcome.append(exc)

        thread = threading.Thread(target=append)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            while watcher.execute(waiting).fetchone() != (1,):  # the writer has asked for the lock
                assert time.monotonic() < deadline, "the writer never waited for the append lock"
                time.sleep(0.01)
            assert outcome == [], "the writer appended while another transaction held the lock"
        finally:
            holder.commit()
        thread.join(60)
    assert outcome == [[3]]
