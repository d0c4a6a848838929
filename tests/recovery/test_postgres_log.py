"""Recovery on PostgreSQL: ``migrate-store`` copies a SQLite log (positions and ids kept),
the copy rebuilds the same fold from snapshot + tail, and ``verify`` and ``gc`` read it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import psycopg
import pytest

from devtools.postgres_server import PostgresServer
from service.cli import main
from service.core.fold import replay
from service.core.snapshot import FOLD_VERSION
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent
from service.event_store.snapshots import save_snapshot_file
from service.event_store.statements import EventFilter
from service.event_store.sync_store import SyncEventStore
from service.recovery.copy_log import CopyRefused, copy_log
from service.recovery.gc import collect
from service.recovery.rebuild import rebuild_state
from service.recovery.verify import verify_url
from service.settings import Settings
from tests.event_store.contract import started
from tests.recovery.histories import history, publish_files, write_history

_ALL = EventFilter(limit=100_000)


def _rows(location: Path | str) -> list[tuple[object, ...]]:
    store = SyncEventStore(location, source={"kind": "test"})
    try:
        return [
            (r.position, r.event_id, r.type, r.model, r.event, dict(r.source), r.recorded_at) for r in store.read(_ALL)
        ]
    finally:
        store.close()


def test_migrate_store_copies_a_sqlite_log_with_positions_and_ids(
    db_path: Path, pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blobs = tmp_path / "hub" / "blobs"
    publish_files(blobs)
    write_history(db_path, history(blobs)).close()
    assert main(["migrate-store", "--from", f"sqlite:///{db_path}", "--to", pg_url]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out, out
    original = _rows(db_path)
    assert _rows(pg_url) == original, "every row arrives as stored: position, id, payload, source, time"

    # An interrupted copy resumes; a run with nothing new copies nothing.
    more = SyncEventStore(db_path, source={"kind": "test"})
    more.append([NewEvent(started(7)), NewEvent(started(8))])
    more.close()
    assert copy_log(f"sqlite:///{db_path}", pg_url).copied == 2
    assert copy_log(f"sqlite:///{db_path}", pg_url).copied == 0
    assert _rows(pg_url) == _rows(db_path)

    # The copy goes on as a log: the next append takes the next position.
    store = SyncEventStore(pg_url, source={"kind": "test"})
    assert store.append([NewEvent(started(9))]) == [len(original) + 3]
    store.close()
    with pytest.raises(CopyRefused, match="no such database file"):
        copy_log(f"sqlite:///{tmp_path / 'missing.db'}", pg_url)


def test_a_copy_into_a_database_holding_another_log_is_refused(db_path: Path, pg_url: str) -> None:
    write_history(db_path, history()).close()
    other = SyncEventStore(pg_url, source={"kind": "test"})
    other.append([NewEvent(started(1))])
    other.close()
    with pytest.raises(CopyRefused, match="not the start"):
        copy_log(f"sqlite:///{db_path}", pg_url)
    assert len(_rows(pg_url)) == 1, "nothing was written"


def test_rebuild_from_snapshot_and_tail_equals_replay_on_postgres(pg_url: str) -> None:
    items = history(progress=60)
    store = write_history(pg_url, items[:40])
    state = replay(store.read(_ALL))
    save_snapshot_file(pg_url, state, FOLD_VERSION)
    store.append(items[40:])
    full = replay(store.read(_ALL))
    store.close()

    async def rebuild() -> tuple[int, object]:
        service = AsyncEventStore(pg_url, source={"kind": "test"})
        try:
            result = await rebuild_state(service)
        finally:
            await service.close()
        return result.snapshot_position, result.state

    snapshot_position, rebuilt = asyncio.run(rebuild())
    assert snapshot_position == state.position > 0
    assert rebuilt == full


def test_verify_names_a_gap_and_a_missing_trigger_on_postgres(pg_url: str) -> None:
    store = write_history(pg_url, history())
    store.close()
    report = verify_url(pg_url)
    assert report.ok, report.render()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO events (position, event_id, type, schema_version, data, source, recorded_at) VALUES "
            "(1000, 'late', 'router_stopped', 1, '{\"pid\": 1, \"reason\": \"x\"}', '{}', '2026-11-29T15:00:00.000000Z')"
        )
        conn.execute("DROP TRIGGER events_no_truncate ON events")
    status = {c.name: (c.status, c.detail) for c in verify_url(pg_url).checks}
    assert status["positions"][0] == "FAIL" and "1 gap" in status["positions"][1]
    assert status["append_only"] == ("FAIL", "missing trigger(s): events_no_truncate")


def test_history_is_append_only_on_postgres(pg_url: str) -> None:
    store = write_history(pg_url, history())
    store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in ("UPDATE events SET type = 'x'", "DELETE FROM events", "TRUNCATE events"):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                conn.execute(statement)


def test_gc_reads_and_records_on_postgres(pg_url: str, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    orphan = cache / "models--org--x" / "blobs" / ("0" * 64 + ".incomplete")
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"partial")
    removed = collect(Settings(home=tmp_path, database_url=pg_url, hub_cache=cache), dry_run=False)
    assert [o.path for o in removed] == [orphan] and not orphan.exists()
    assert [r[2] for r in _rows(pg_url)] == ["partial_file_removed"]


def test_a_pg_dump_taken_while_appending_verifies_and_is_a_prefix(pg_server: PostgresServer, pg_url: str) -> None:
    """docs/operations.md's backup recipe: ``pg_dump`` reads one snapshot while writers go on."""
    write_history(pg_url, history()).close()
    stop = threading.Event()
    writer = SyncEventStore(pg_url, source={"kind": "test"})
    appended: list[int] = []

    def keep_appending() -> None:
        while not stop.is_set():
            appended.extend(writer.append([NewEvent(started(len(appended)))]))

    thread = threading.Thread(target=keep_appending)
    thread.start()
    try:
        dump = pg_server.root / "backup.sql"
        pg_server.tool("pg_dump", "--no-owner", "-d", pg_url.rsplit("/", 1)[1], "-f", str(dump))
    finally:
        stop.set()
        thread.join(30)
        writer.close()
    restored = pg_server.create_database("restored_from_dump")
    pg_server.tool("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "restored_from_dump", "-f", str(dump))
    report = verify_url(restored)
    assert report.ok, report.render()
    copy, original = _rows(restored), _rows(pg_url)
    assert appended and copy == original[: len(copy)], "the dump is a prefix of the log"
