"""A worker whose log's disk is full keeps its lifecycle events and records them once space is freed.

A real inference worker appends to a real SQLite log on a small tmpfs (skipped, saying why, where
mounting is refused), filled to the last byte the log can use (:func:`devtools.small_disk.fill_log`).
The rules are the workers' runtime's (``workers/runtime/_full_log.py``), shared by the download
worker: no crash, no lost lifecycle event, whether the disk fills before the worker starts or
while it stops.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devtools.small_disk import SmallDisk, fill_log
from service.event_store import EventFilter, SyncEventStore
from service.migrate import upgrade
from tests.eventually import eventually
from tests.small_disks import mounted
from tests.workers.conftest import WorkerProc

LIFECYCLE = ["instance_loading", "instance_ready", "instance_stopped"]


@pytest.fixture
def disk() -> Iterator[SmallDisk]:
    yield from mounted(8 << 20)


def _logged(worker: WorkerProc, event: str, **fields: str) -> bool:
    """Whether the worker's stderr has a JSON line for ``event`` with ``fields``."""
    for line in worker.stderr_tail(1 << 20).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event and all(record.get(k) == v for k, v in fields.items()):
            return True
    return False


def _alive(worker: WorkerProc) -> str | None:
    code = worker.proc.poll()
    return None if code is None else f"the worker exited ({code}):\n{worker.stderr_tail()}"


@pytest.mark.timeout(180)
def test_an_inference_worker_retries_its_lifecycle_events_until_the_full_log_takes_them(
    disk: SmallDisk, tiny_gguf: Path, spawn_worker: Callable[..., WorkerProc]
) -> None:
    db = disk.root / "modelrouter.db"
    upgrade(db)
    service_side = sqlite3.connect(db)  # open throughout, as the service's tail is: its -wal and -shm stay
    service_side.execute("PRAGMA journal_mode=WAL")
    fill_log(disk, db)
    # The stop deadline (grace + 5 s) leaves the test ample time to free the disk during the stop.
    worker = spawn_worker(tiny_gguf, "--db", str(db), "--stop-timeout", "60", instance_id="full-1")
    eventually(
        lambda: _logged(worker, "log_disk_full", type="instance_loading"), "the refusal", abort=lambda: _alive(worker)
    )

    store = SyncEventStore(db, source={"kind": "test"})
    try:

        def recorded() -> list[str]:
            return [r.event.TYPE for r in store.read(EventFilter(types=tuple(LIFECYCLE), limit=100))]

        assert recorded() == [], "nothing can have landed on a full disk"
        disk.free()
        eventually(
            lambda: recorded() == LIFECYCLE[:2], "loading, then ready", timeout=120, abort=lambda: _alive(worker)
        )
        assert _logged(worker, "log_writable_again", type="instance_loading")

        fill_log(disk, db)  # full again, now while it serves: the stop's own event is refused
        assert worker.proc.stdin is not None
        worker.proc.stdin.write(b"stop requested\n")
        worker.proc.stdin.flush()
        eventually(lambda: _logged(worker, "log_disk_full", type="instance_stopped"), "the refusal of its stop",
                   abort=lambda: _alive(worker))  # fmt: skip
        disk.free()
        assert worker.wait_exit(60) == 0, worker.stderr_tail()
        assert recorded() == LIFECYCLE, "each lifecycle event exactly once, in order"
        assert _logged(worker, "log_writable_again", type="instance_stopped")
    finally:
        store.close()
        service_side.close()
