"""``recorded_at`` follows position whatever the writers' clocks say.

On PostgreSQL (writers on several machines, one log) the database stamps each append with its
own ``clock_timestamp()``, read once the append lock is held; the writer's clock is not used.
On SQLite (one machine) the writer's clock stamps it, read under ``BEGIN IMMEDIATE``. Both
tests give the one insert every writer runs (``rows.insert_rows``) a clock an hour off.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from service.event_store.codec import NewEvent
from service.event_store.postgres.sql import PSYCOPG
from service.event_store.rows import insert_rows
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from tests.event_store.contract import started

HOUR = timedelta(hours=1)
SLACK = timedelta(seconds=30)  # the test's clock against the (local) server's: far below the skew
APPENDS = 60


def _clock(offset: timedelta) -> Callable[[], datetime]:
    return lambda: datetime.now(UTC) + offset


def _append_with(url: str, offset: timedelta, start: threading.Barrier) -> None:
    with psycopg.connect(url) as conn:
        start.wait()
        for i in range(APPENDS):
            with conn.cursor() as cursor:
                batch = [NewEvent(started(i)) for _ in range(1 + i % 2)]
                insert_rows(cursor, batch, {"kind": "test", "skew": str(offset)}, None, PSYCOPG, now=_clock(offset))
            conn.commit()


def _times(location: Path | str) -> list[tuple[str, datetime]]:
    store = SyncEventStore(location, source={"kind": "reader"})
    try:
        return [(str(r.source["skew"]), r.recorded_at) for r in store.read(EventFilter(limit=10_000))]
    finally:
        store.close()


def test_postgresql_stamps_the_databases_time_in_position_order_whatever_the_writers_clocks(pg_url: str) -> None:
    before = datetime.now(UTC)
    start = threading.Barrier(2)
    writers = [threading.Thread(target=_append_with, args=(pg_url, offset, start)) for offset in (HOUR, -HOUR)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    after = datetime.now(UTC)
    stored = _times(pg_url)
    assert len(stored) == 2 * sum(1 + i % 2 for i in range(APPENDS))
    # Whether or not their appends interleave, a writer's clock would step back 2 h between them.
    assert {skew for skew, _ in stored} == {str(HOUR), str(-HOUR)}, "both writers appended"
    times = [t for _, t in stored]
    assert times == sorted(times), "recorded_at never goes back in position order"
    assert before - SLACK <= times[0] and times[-1] <= after + SLACK, "neither writer's clock was used"


def test_sqlite_stamps_the_writers_time(db_path: Path) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        insert_rows(conn.cursor(), [NewEvent(started(1))], {"kind": "test", "skew": "1h"}, now=_clock(HOUR))
        conn.execute("COMMIT")
    finally:
        conn.close()
    [(_, recorded_at)] = _times(db_path)
    assert abs(recorded_at - (datetime.now(UTC) + HOUR)) < SLACK
