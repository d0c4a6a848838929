"""One total order no reader can skip, on both backends: 8 processes append at once for 10 s
while the service's tail (``LiveState``: woken by NOTIFY on PostgreSQL, by datagrams on
SQLite) reads. On PostgreSQL a BIGSERIAL alone would let a later position commit first, and
the tail, having read past it, would never see the earlier one; here every position must
arrive exactly once, in order, with no gap, and ``recorded_at`` must follow position."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from service.core.events import Recorded
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState

WRITERS, SECONDS = 8, 10.0
# Each writer appends for SECONDS and at least MIN_BATCHES batches (1500 events in all), so a slow
# machine makes the run longer, never too small to prove anything.
MIN_BATCHES = 100


def _writer(location: Path | str, number: int) -> subprocess.Popen[str]:
    # Half append through the workers' writer, half through the tools' SQLAlchemy store; batch
    # sizes differ so that batches of several events interleave with single ones. NORMAL keeps
    # SQLite's run about contention, not fsyncs (synchronous does not change locking).
    argv = [
        sys.executable,
        "-m",
        "tests.event_store.writer_process",
        "--db",
        str(location),
        "--writer",
        str(number),
        "--batches",
        "1000000",
        "--seconds",
        str(SECONDS),
        "--min-batches",
        str(MIN_BATCHES),
        "--batch-size",
        str(1 + number % 3),
        "--writer-kind",
        "worker" if number % 2 else "store",
        "--synchronous",
        "NORMAL",
    ]
    env = {**os.environ, "MODELROUTER_SYNCHRONOUS": "NORMAL"}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)


def _stored(location: Path | str) -> list[tuple[Any, ...]]:
    sql = "SELECT position, event_id, recorded_at FROM events ORDER BY position"
    if isinstance(location, Path):
        with sqlite3.connect(location) as conn:
            return conn.execute(sql).fetchall()
    with psycopg.connect(location) as pg:
        return pg.execute(sql).fetchall()


@pytest.mark.timeout(900)  # generous: 35 s on a quiet 2-core machine, minutes under load
async def test_eight_writers_for_ten_seconds_the_tail_sees_every_position_once_in_order(
    db_location: Path | str,
) -> None:
    store = AsyncEventStore(db_location, source={"kind": "test_tail"})
    live = LiveState(store)
    seen: list[tuple[int, str]] = []

    def record(recorded: Recorded, _state: RouterState) -> None:
        seen.append((recorded.position, recorded.event_id))

    live.add_listener(record)
    await live.start()
    try:
        writers = [_writer(db_location, n) for n in range(WRITERS)]
        outputs = await asyncio.gather(*(asyncio.to_thread(p.communicate, timeout=600) for p in writers))
        acked: set[str] = set()
        for proc, (out, _) in zip(writers, outputs, strict=True):
            assert proc.returncode == 0, out[-500:]
            acked.update(i for line in out.splitlines() if line.startswith("ACK") for i in line.split()[3].split(","))
        stored = _stored(db_location)
        rows = [(int(p), str(e)) for p, e, _ in stored]
        await live.wait_for(rows[-1][0], timeout=60)
    finally:
        await live.stop()
        await store.close()
    assert len(acked) > 1000, f"only {len(acked)} events in {SECONDS} s: the test proves little"
    assert [p for p, _ in rows] == list(range(1, len(rows) + 1)), "positions must run 1..n with no gap"
    assert {e for _, e in rows} == acked, "every acknowledged event is stored, and nothing else"
    assert seen == rows, "the tail must see every position exactly once, in order"
    times = [at for _, _, at in stored]
    assert times == sorted(times), "recorded_at follows position order across all eight writers"
