"""A PostgreSQL restart under a running service loses no acknowledged event.

While the server is down, commands that append answer a 503 problem and nothing is
acknowledged; once it is back, the service's store, its tail and a worker's writer all
reconnect by themselves. The server is really stopped (``pg_ctl stop -m immediate``, as in
a crash: the restart replays the WAL) and started again on the same port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from devtools.postgres_server import PostgresServer
from service.app import create_app
from service.core import events as ev
from service.event_store.codec import NewEvent
from service.event_store.live_state import LiveState
from service.event_store.rows import StoreUnavailable
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from service.event_store.worker_writer import EventWriter, open_writer
from service.recovery.migrate import upgrade_url
from service.settings import Settings


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    """A server of this test's own: stopping the session's would disturb the others."""
    own = PostgresServer().start()
    try:
        yield own
    finally:
        own.close()


async def _until(predicate: object, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]  # a zero-argument callable
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _stored_ids(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {str(row[0]) for row in conn.execute("SELECT event_id FROM events")}


@pytest.mark.timeout(180)
async def test_a_database_restart_fails_appends_clearly_then_everything_reconnects(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = server.create_database("modelrouter")
    upgrade_url(url)
    settings = Settings(home=tmp_path / "home", database_url=url)
    worker = open_writer(url, source={"kind": "download_worker", "job_id": "j"})
    async with AsyncTestClient(app=create_app(settings)) as client:
        live: LiveState = client.app.state.runtime.live
        live.retry_base = 0.05
        on_app = client.blocking_portal.call  # the store lives on the app's event loop, not the test's
        assert (await client.post("/models/reload")).status_code == 200
        acked = {r.event_id for r in on_app(live.store.read)}  # every append so far was acknowledged
        acked.add(_progress_id(worker, 1))

        server.stop("immediate")
        try:  # a failure here must not leave the server down for the shutdown below
            refused = await client.post("/models/reload")
            assert refused.status_code == 503, refused.text
            body = refused.json()
            assert body["type"] in ("/problems/store_unavailable", "/problems/state_unavailable"), body
            assert "unreachable" in body["detail"] or "stale" in body["detail"], body

            async def append_directly() -> None:
                await live.store.append([NewEvent(ev.RouterStopped(pid=1, reason="test"))])

            with pytest.raises(StoreUnavailable, match="unreachable"):
                on_app(append_directly)
            with pytest.raises(StoreUnavailable, match="unreachable"):
                _progress_id(worker, 2)
            assert (await client.get("/health")).status_code == 503
        finally:
            server.start()
        await _until(lambda: live.up, 30, "the tail to reconnect")
        answer = await client.post("/models/reload")
        assert answer.status_code == 200, answer.text
        acked.add(_progress_id(worker, 3))  # the worker's writer reconnects too
        head = on_app(live.store.head)

        async def folded() -> None:
            await live.wait_for(head, timeout=30)  # the worker's event reaches the service's fold

        on_app(folded)
        assert (await client.get("/health")).status_code == 200
    worker.close()
    stored = _stored_ids(url)
    assert acked <= stored, f"acknowledged before the crash, missing after it: {acked - stored}"
    reader = SyncEventStore(url, source={"kind": "test"})
    try:
        positions = [r.position for r in reader.read(EventFilter(limit=100_000))]
    finally:
        reader.close()
    assert positions == list(range(1, len(positions) + 1)), "the outage left no gap"


def _progress_id(worker: EventWriter, done: int) -> str:
    """Append one progress event through ``worker``; its id once acknowledged."""
    new = NewEvent(ev.DownloadProgress(job_id="j", bytes_done=done, bytes_total=9), "org/m:Q8_0")
    worker.append([new])
    return new.event_id
