"""The workers' stdlib writer keeps the store's contract, without SQLAlchemy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.core.events import DownloadProgress, RouterStarted
from service.event_store import NewEvent, SyncEventStore
from service.event_store.worker_writer import WorkerEventWriter, WriterSink


def test_appends_are_read_back_by_the_store(db_path: Path) -> None:
    writer = WorkerEventWriter(db_path, source={"kind": "download_worker"})
    assert writer.append(
        [
            NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080)),
            NewEvent(RouterStarted(pid=2, version="0.1.0", host="127.0.0.1", port=8080)),
        ]
    ) == [1, 2]
    WriterSink(writer, "org/m:Q8_0").emit("download_progress", {"job_id": "j", "bytes_done": 3, "bytes_total": 9})
    stored = SyncEventStore(db_path, source={"kind": "test"}).read()
    assert [r.position for r in stored] == [1, 2, 3]
    assert stored[2].model == "org/m:Q8_0" and stored[2].source["kind"] == "download_worker"
    assert stored[2].event == DownloadProgress(job_id="j", bytes_done=3, bytes_total=9)


def test_duplicate_event_id_returns_the_original_position(db_path: Path) -> None:
    writer = WorkerEventWriter(db_path, source={"kind": "t"})
    first = NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080))
    assert writer.append([first]) == [1]
    assert writer.append(
        [
            NewEvent(RouterStarted(pid=2, version="0.1.0", host="127.0.0.1", port=8080)),
            NewEvent(RouterStarted(pid=9, version="0.1.0", host="127.0.0.1", port=8080), event_id=first.event_id),
        ]
    ) == [
        2,
        1,
    ]


def test_batches_are_all_or_nothing_and_use_begin_immediate(db_path: Path) -> None:
    writer = WorkerEventWriter(db_path, source={"kind": "t"})
    statements: list[str] = []
    writer._conn.set_trace_callback(statements.append)
    with pytest.raises(TypeError):
        writer.append(
            [
                NewEvent(RouterStarted(pid=1, version="0.1.0", host="127.0.0.1", port=8080)),
                NewEvent(DownloadProgress(job_id="j", bytes_done=object(), bytes_total=1)),
            ]
        )  # type: ignore[arg-type]
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "ROLLBACK"
    assert SyncEventStore(db_path, source={"kind": "t"}).read() == []
    assert writer.append([NewEvent(RouterStarted(pid=2, version="0.1.0", host="127.0.0.1", port=8080))]) == [1]


def test_worker_entry_points_do_not_load_sqlalchemy() -> None:
    """Every worker start pays for what it imports (~0.2 s for SQLAlchemy)."""
    code = (
        "import sys, workers.download, workers.inference, workers._job, workers._sink;"
        "import service.event_store.worker_writer;"
        "bad = [m for m in ('sqlalchemy', 'huggingface_hub', 'litestar') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
