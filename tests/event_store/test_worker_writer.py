"""The workers' writers (stdlib sqlite3, psycopg): their contract is in ``test_store_contract.py``;
here, what they cost to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from service.core import events as ev
from service.event_store.sync_store import SyncEventStore
from service.event_store.worker_writer import WorkerEventWriter


def test_emit_appends_one_typed_event_for_a_model(db_path: Path) -> None:
    writer = WorkerEventWriter(db_path, source={"kind": "download_worker", "job_id": "j"})
    progress = ev.DownloadProgress(job_id="j", bytes_done=3, bytes_total=9)
    assert writer.emit(progress, model="org/m:Q8_0") == 1
    writer.close()
    (stored,) = SyncEventStore(db_path, source={"kind": "test"}).read()
    assert (stored.event, stored.model, stored.source["job_id"]) == (progress, "org/m:Q8_0", "j")


def test_worker_entry_points_do_not_load_sqlalchemy() -> None:
    """Every worker start pays for what it imports (~0.2 s for SQLAlchemy, ~0.1 s for structlog)."""
    code = (
        "import sys, workers.download._cli, workers.inference._worker, workers.runtime._worker_runtime, workers.download._job, workers.runtime._event_sinks;"
        "import service.event_store.worker_writer;"
        "bad = [m for m in ('sqlalchemy', 'huggingface_hub', 'litestar', 'structlog', 'psycopg', 'asyncpg')"
        " if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_worker_on_postgresql_appends_through_psycopg_alone(pg_url: str) -> None:
    """The PostgreSQL writer a worker opens for ``--database-url`` loads psycopg, not SQLAlchemy."""
    code = (
        "import sys; from service.core import events as ev;"
        "from service.event_store.worker_writer import open_writer;"
        f"w = open_writer({pg_url!r}, source={{'kind': 'download_worker'}});"
        "print(w.emit(ev.DownloadProgress(job_id='j', bytes_done=1, bytes_total=2), model='m'));"
        "bad = [m for m in ('sqlalchemy', 'asyncpg', 'structlog') if m in sys.modules]; print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "[]"], done.stdout


def test_the_service_on_sqlite_loads_no_postgresql_driver(db_path: Path) -> None:
    """SQLite stays the embedded default at the same start-up cost: asyncpg and psycopg load
    only for a PostgreSQL URL."""
    code = (
        "import sys, asyncio; import service.startup, service.api, service.cli;"
        "from service.event_store.async_store import AsyncEventStore;"
        "from service.event_store.sync_store import SyncEventStore;"
        f"s = AsyncEventStore({str(db_path)!r}, source={{'kind': 't'}}); print(asyncio.run(s.head()));"
        f"SyncEventStore({str(db_path)!r}, source={{'kind': 't'}}).head();"
        "print([m for m in ('asyncpg', 'psycopg') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "[]"], done.stdout
