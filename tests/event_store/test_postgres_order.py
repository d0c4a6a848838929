"""One total order no reader can skip, on PostgreSQL: 8 processes append at once for 10 s
while the service's tail (``LiveState``, woken by NOTIFY) reads. With a BIGSERIAL alone a
later position could commit first and the tail, having read past it, would never see the
earlier one; here every position must arrive exactly once, in order, with no gap."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import psycopg
import pytest

from service.core.events import Recorded
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.live_state import LiveState

WRITERS, SECONDS = 8, 10.0


def _writer(url: str, number: int) -> subprocess.Popen[str]:
    # Half append through the workers' psycopg writer, half through the tools' SQLAlchemy store;
    # batch sizes differ so that batches of several events interleave with single ones.
    argv = [sys.executable, "-m", "tests.event_store.writer_process", "--db", url, "--writer", str(number),
            "--batches", "1000000", "--seconds", str(SECONDS), "--batch-size", str(1 + number % 3),
            "--writer-kind", "worker" if number % 2 else "store"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)


@pytest.mark.timeout(240)
async def test_eight_writers_for_ten_seconds_the_tail_sees_every_position_once_in_order(pg_url: str) -> None:
    store = AsyncEventStore(pg_url, source={"kind": "test_tail"})
    live = LiveState(store)
    seen: list[tuple[int, str]] = []

    def record(recorded: Recorded, _state: RouterState) -> None:
        seen.append((recorded.position, recorded.event_id))

    live.add_listener(record)
    await live.start()
    try:
        writers = [_writer(pg_url, n) for n in range(WRITERS)]
        outputs = await asyncio.gather(*(asyncio.to_thread(p.communicate, timeout=180) for p in writers))
        acked: set[str] = set()
        for proc, (out, _) in zip(writers, outputs, strict=True):
            assert proc.returncode == 0, out[-500:]
            acked.update(i for line in out.splitlines() if line.startswith("ACK") for i in line.split()[3].split(","))
        with psycopg.connect(pg_url) as conn:
            rows = [
                (int(p), str(e)) for p, e in conn.execute("SELECT position, event_id FROM events ORDER BY position")
            ]
        await live.wait_for(rows[-1][0], timeout=60)
    finally:
        await live.stop()
        await store.close()
    assert len(acked) > 1000, f"only {len(acked)} events in {SECONDS} s: the test proves little"
    assert [p for p, _ in rows] == list(range(1, len(rows) + 1)), "positions must run 1..n with no gap"
    assert {e for _, e in rows} == acked, "every acknowledged event is stored, and nothing else"
    assert seen == rows, "the tail must see every position exactly once, in order"
