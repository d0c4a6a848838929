"""The service's tail on PostgreSQL: woken by the NOTIFY each append sends, and still
reading by position when a notification never comes (a lost one costs latency, not an event)."""

from __future__ import annotations

import asyncio

import psycopg

from service.core import events as ev
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.event_store.postgres.sql import APPEND_LOCK
from service.event_store.worker_writer import open_writer


def _progress(done: int) -> ev.DownloadProgress:
    return ev.DownloadProgress(job_id="j", bytes_done=done, bytes_total=9)


async def test_a_workers_append_wakes_the_tail_long_before_its_safety_poll(pg_url: str) -> None:
    store = AsyncEventStore(pg_url, source={"kind": "router"})
    live = LiveState(store, poll_interval=600.0)  # the poll alone would take ten minutes
    await live.start()
    writer = open_writer(pg_url, source={"kind": "download_worker"})
    try:
        for done in range(3):
            position = await asyncio.to_thread(writer.emit, _progress(done), model="m")
            assert await live.wait_beyond(position - 1, timeout=30), f"position {position} was never folded"
    finally:
        writer.close()
        await live.stop()
        await store.close()


async def test_a_commit_without_a_notification_is_still_read_by_position(pg_url: str) -> None:
    store = AsyncEventStore(pg_url, source={"kind": "router"})
    live = LiveState(store, poll_interval=0.2)
    await live.start()
    try:
        with psycopg.connect(pg_url) as conn:  # an append whose NOTIFY is lost: none is sent
            conn.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK})")
            conn.execute(
                "INSERT INTO events (position, event_id, type, schema_version, model, data, source, recorded_at) "
                "VALUES ((SELECT COALESCE(MAX(position), 0) + 1 FROM events), 'silent', 'download_progress', 2,"
                " 'm', %s, '{}', '2026-12-01T00:00:00.000000Z')",
                ('{"job_id": "j", "bytes_done": 1, "bytes_total": 9, "bytes_per_second": null, "eta_seconds": null}',),
            )
        assert await live.wait_beyond(0, timeout=30), "the safety poll never read the silent commit"
        assert live.state.position == 1
    finally:
        await live.stop()
        await store.close()
