"""A worker whose log's disk is full keeps its lifecycle events and records them once space is freed.

Real workers append to a real SQLite log on a small tmpfs (skipped, saying why, where mounting is
refused), filled to the last byte the log can use (:func:`devtools.small_disk.fill_log`), while a
connection stays open on it as the service's tail would be. The rules are the workers' runtime's
(``workers/runtime/_full_log.py``): progress skipped, every other event retried until it lands, no
crash, whether the disk fills before an inference worker starts, while it stops, or while a
download runs.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devtools.hub_repos import make_repo
from devtools.hub_server import HubServer
from devtools.small_disk import SmallDisk, fill_log
from service.downloads.resolution import resolve
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from service.recovery.migrate import upgrade
from tests.conftest_hub import REPO_ROOT, DownloadProc, download_command, unique_repo, worker_env
from tests.eventually import eventually
from tests.small_disks import mounted
from tests.worker_proc import WorkerUnderTest
from tests.workers.conftest import WorkerProc

LIFECYCLE = ["instance_loading", "instance_ready", "instance_stopped"]


@pytest.fixture
def disk() -> Iterator[SmallDisk]:
    yield from mounted(8 << 20)


@pytest.fixture
def db(disk: SmallDisk) -> Iterator[Path]:
    """A migrated log on ``disk``, held open as the service holds it (its ``-wal`` and ``-shm`` stay)."""
    path = disk.root / "modelrouter.db"
    upgrade(path)
    service_side = sqlite3.connect(path)
    service_side.execute("PRAGMA journal_mode=WAL")
    try:
        yield path
    finally:
        service_side.close()


def _types(db: Path, *types: str) -> list[str]:
    store = SyncEventStore(db, source={"kind": "test"})
    try:
        return [r.event.TYPE for r in store.read(EventFilter(types=types, limit=1000))]
    finally:
        store.close()


def _logged(worker: WorkerUnderTest, event: str, **fields: str) -> bool:
    """Whether the worker's stderr has a JSON line for ``event`` with ``fields``."""
    for line in worker.stderr_tail(1 << 20).splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event and all(record.get(k) == v for k, v in fields.items()):
            return True
    return False


def _alive(worker: WorkerUnderTest) -> str | None:
    code = worker.proc.poll()
    return None if code is None else f"the worker exited ({code}):\n{worker.stderr_tail()}"


@pytest.mark.timeout(180)
def test_an_inference_worker_retries_its_lifecycle_events_until_the_full_log_takes_them(
    disk: SmallDisk, db: Path, tiny_gguf: Path, spawn_worker: Callable[..., WorkerProc]
) -> None:
    fill_log(disk, db)
    # The stop deadline (grace + 5 s) leaves the test ample time to free the disk during the stop.
    worker = spawn_worker(tiny_gguf, "--db", str(db), "--stop-timeout", "60", instance_id="full-1")
    eventually(
        lambda: _logged(worker, "log_disk_full", type="instance_loading"), "the refusal", abort=lambda: _alive(worker)
    )
    assert _types(db, *LIFECYCLE) == [], "nothing can have landed on a full disk"

    disk.free()
    eventually(
        lambda: _types(db, *LIFECYCLE) == LIFECYCLE[:2],
        "loading, then ready",
        timeout=120,
        abort=lambda: _alive(worker),
    )
    assert _logged(worker, "log_writable_again", type="instance_loading")

    fill_log(disk, db)  # full again, now while it serves: the stop's own event is refused
    assert worker.proc.stdin is not None
    worker.proc.stdin.write(b"stop requested\n")
    worker.proc.stdin.flush()
    eventually(
        lambda: _logged(worker, "log_disk_full", type="instance_stopped"),
        "the refusal of its stop",
        abort=lambda: _alive(worker),
    )
    disk.free()
    assert worker.wait_exit(60) == 0, worker.stderr_tail()
    assert _types(db, *LIFECYCLE) == LIFECYCLE, "each lifecycle event exactly once, in order"
    assert _logged(worker, "log_writable_again", type="instance_stopped")


@pytest.mark.timeout(120)
def test_a_download_that_finishes_while_the_log_is_full_is_recorded_finished_once_space_is_freed(
    disk: SmallDisk, db: Path, hub: HubServer, tmp_path: Path
) -> None:
    repo = unique_repo("full-log")
    make_repo(hub.root, repo, {"m-Q4_K_M.gguf": 2_000_000})
    hub.set_faults({"kind": "stall", "repo": repo, "at_fraction": 0.5})  # held there until hub.reset()
    command = download_command(resolve(repo, endpoint=hub.url).to_spec(), tmp_path / "hub", tmp_path / "unused", "j1")
    command[command.index("--events") : command.index("--events") + 2] = ["--db", str(db)]
    stderr = tmp_path / "download.stderr"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO_ROOT, env=worker_env()
        )
    worker = DownloadProc(proc, tmp_path / "unused", stderr, "j1")
    try:
        eventually(lambda: _types(db, "download_started"), "download_started", abort=lambda: _alive(worker))
        fill_log(disk, db)
        hub.reset()  # the stalled response is cut: the worker resumes with a Range request and finishes
        eventually(
            lambda: _logged(worker, "log_disk_full", type="download_finished"),
            "the refusal",
            abort=lambda: _alive(worker),
        )
        assert _logged(worker, "event_skipped_log_full", type="download_progress"), "its final 100 % is skipped"
        disk.free()
        assert worker.wait(60) == 0, worker.stderr()
    finally:
        worker.kill()
    assert _types(db, "download_*")[-1:] == ["download_finished"]
    assert _types(db, "download_finished", "download_failed") == ["download_finished"], "exactly once"
    assert _logged(worker, "log_writable_again", type="download_finished")
