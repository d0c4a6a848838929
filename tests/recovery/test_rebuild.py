"""Startup rebuild on a real SQLite file: snapshot + tail == full replay, and a
snapshot that is missing, of another fold version or damaged only costs time."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from structlog.testing import capture_logs

from service.core.devices import NodeDevices
from service.core.fold import replay
from service.core.snapshot import FOLD_VERSION
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.engines import sync_engine_for
from service.event_store.replay import fold_page, read_page
from service.event_store.snapshots import (
    KEEP,
    encode_state,
    list_snapshots,
    load_latest_snapshot,
    save_snapshot_file,
)
from service.event_store.statements import EventFilter, select_page_raw
from service.event_store.sync_store import SyncEventStore
from service.recovery import RebuildResult, Snapshotter, rebuild_state
from tests.recovery.histories import DEVICES, history, write_history


def _all(store: SyncEventStore) -> RouterState:
    return replay(store.read(EventFilter(limit=100_000)))


def _at(store: SyncEventStore, position: int) -> RouterState:
    return replay(store.read(EventFilter(before=position + 1, limit=100_000)))


def _save(db_path: Path | str, state: RouterState, fold_version: int = FOLD_VERSION) -> None:
    save_snapshot_file(db_path, state, fold_version)


def _raw_snapshot(db_path: Path | str, position: int, text: str, fold_version: int = FOLD_VERSION) -> None:
    row = (position, fold_version, text, "2026-11-29T15:00:00.000000Z")
    if isinstance(db_path, str):  # PostgreSQL: a json column refuses text that is not JSON, so damage the text type
        with psycopg.connect(db_path, autocommit=True) as pg:
            pg.execute("ALTER TABLE snapshots ALTER state TYPE text")
            pg.execute("INSERT INTO snapshots (position, fold_version, state, created_at) VALUES (%s, %s, %s, %s)", row)
        return
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO snapshots (position, fold_version, state, created_at) VALUES (?, ?, ?, ?)", row)


async def _rebuild(db_path: Path | str, **kwargs: int) -> RebuildResult:
    store = AsyncEventStore(db_path, source={"kind": "test"})
    try:
        return await rebuild_state(store, **kwargs)
    finally:
        await store.close()


@pytest.fixture
def db_path(db_location: Path | str) -> Path | str:
    """Every test here runs on a SQLite file and on a PostgreSQL database."""
    return db_location


@pytest.fixture
def store(db_path: Path | str) -> Iterator[SyncEventStore]:
    s = write_history(db_path, history())
    yield s
    s.close()


async def test_the_devices_come_back_from_the_log_and_from_a_snapshot(
    store: SyncEventStore, db_path: Path | str
) -> None:
    """``node_devices_measured`` (position 2, a service without ``--node``) through the real codec."""
    expected = {"": NodeDevices.of({"devices": list(DEVICES), "gpu_offload": True, "backends": ["CPU", "CUDA"]})}
    assert expected[""].offloading[0].name == "CUDA0"
    assert (await _rebuild(db_path)).state.devices == expected
    _save(db_path, _at(store, 5))
    rebuilt = await _rebuild(db_path)
    assert rebuilt.snapshot_position == 5 and rebuilt.state.devices == expected


async def test_without_snapshot_replays_everything(store: SyncEventStore, db_path: Path | str) -> None:
    result = await _rebuild(db_path, page_size=16)
    assert result.state == _all(store)
    assert result.snapshot_position == 0
    assert result.events_replayed == store.head()
    assert result.duration_ms > 0


async def test_a_long_replay_says_how_far_it_is(store: SyncEventStore, db_path: Path | str) -> None:
    """Nothing serves during the rebuild, so it logs its progress instead (here after every page)."""
    rebuilding = AsyncEventStore(db_path, source={"kind": "test"})
    try:
        with capture_logs() as logs:
            result = await rebuild_state(rebuilding, page_size=16, progress_every=0.0)
    finally:
        await rebuilding.close()
    lines = [line for line in logs if line["event"] == "fold_rebuilding"]
    head = store.head()
    assert len(lines) == (head - 1) // 16  # every full page but the last
    assert [line["position"] for line in lines] == [16 * (i + 1) for i in range(len(lines))]
    assert all(line["head"] == head and 0 < line["percent"] < 100 for line in lines)
    assert [line["event"] for line in logs][-1] == "fold_rebuilt" and result.state == _all(store)


async def test_empty_log_gives_the_empty_state(db_path: Path | str) -> None:
    result = await _rebuild(db_path)
    assert result == RebuildResult(RouterState(), 0, 0, result.duration_ms)


@pytest.mark.parametrize("cut", [1, 5, 23, 44, 50])
async def test_snapshot_plus_tail_equals_full_replay(store: SyncEventStore, db_path: Path | str, cut: int) -> None:
    head = store.head()
    cut = min(cut, head)
    _save(db_path, _at(store, cut))
    result = await _rebuild(db_path, page_size=8)
    assert result.state == _all(store)
    assert result.snapshot_position == cut
    assert result.events_replayed == head - cut


async def test_snapshot_at_head_replays_nothing(store: SyncEventStore, db_path: Path | str) -> None:
    _save(db_path, _all(store))
    result = await _rebuild(db_path)
    assert (result.snapshot_position, result.events_replayed) == (store.head(), 0)
    assert result.state == _all(store)


async def test_snapshot_of_another_fold_version_is_ignored(store: SyncEventStore, db_path: Path | str) -> None:
    # A deliberately wrong state: used by mistake, it would show in the result.
    _save(db_path, RouterState(position=store.head() - 3), fold_version=FOLD_VERSION - 1)
    _save(db_path, RouterState(position=store.head() - 2), fold_version=FOLD_VERSION + 1)
    result = await _rebuild(db_path)
    assert result.snapshot_position == 0
    assert result.state == _all(store)


async def test_damaged_snapshots_are_skipped_for_an_older_good_one(store: SyncEventStore, db_path: Path | str) -> None:
    _save(db_path, _at(store, 10))
    _raw_snapshot(db_path, 20, "{not json")
    _raw_snapshot(db_path, 21, '{"position": 21}')  # valid JSON, wrong shape
    _raw_snapshot(db_path, 22, "[]")
    _raw_snapshot(db_path, 30, encode_state(_at(store, 23)))  # state says 23, row says 30
    result = await _rebuild(db_path)
    assert result.snapshot_position == 10
    assert result.state == _all(store)


async def test_snapshot_beyond_the_head_is_ignored(store: SyncEventStore, db_path: Path | str) -> None:
    _save(db_path, RouterState(position=store.head() + 100))
    result = await _rebuild(db_path)
    assert result.snapshot_position == 0
    assert result.state == _all(store)


async def test_tail_written_after_the_snapshot_by_another_process_is_folded(
    store: SyncEventStore, db_path: Path | str
) -> None:
    _save(db_path, _all(store))
    write_history(db_path, history(progress=3)[1:]).close()  # new event ids, same shapes
    result = await _rebuild(db_path)
    assert result.events_replayed == len(history(progress=3)) - 1
    assert result.state == _all(store)


def test_a_page_is_read_whole_and_folded_without_its_superseded_progress(
    store: SyncEventStore, db_path: Path | str
) -> None:
    """``read_page`` keeps rows exactly as ``select_page_raw`` reads them (envelopes fetched
    for the progress it keeps) and leaves out all but the last progress of the download."""
    engine = sync_engine_for(db_path, write=False)
    try:
        with engine.connect() as conn:
            page = read_page(conn, 0, 1000)
            plain = select_page_raw(conn, 0, 1000)
    finally:
        engine.dispose()
    assert page.count == len(plain) == store.head()
    assert set(page.kept) <= {tuple(row) for row in plain} and page.kept[-1] == tuple(plain[-1])
    progress = [row for row in page.kept if row[2] == "download_progress"]
    assert len(progress) == 1 and progress[0] == tuple(max(r for r in plain if r[2] == "download_progress"))
    assert len(page.kept) == len(plain) - 39  # history(): 40 progress events of one job in a row
    assert fold_page(RouterState(), page) == _all(store)


def test_save_keeps_only_the_newest_few(store: SyncEventStore, db_path: Path | str) -> None:
    for position in range(1, KEEP + 4):
        _save(db_path, _at(store, position))
    engine = sync_engine_for(db_path, write=False)
    try:
        with engine.connect() as conn:
            kept = list_snapshots(conn)
            latest = load_latest_snapshot(conn, FOLD_VERSION)
    finally:
        engine.dispose()
    assert [s.position for s in kept] == list(range(KEEP + 3, 3, -1))
    assert latest is not None and latest[1] == KEEP + 3 and latest[0] == _at(store, KEEP + 3)


def test_load_returns_none_without_usable_snapshot(store: SyncEventStore, db_path: Path | str) -> None:
    _raw_snapshot(db_path, 5, "garbage")
    engine = sync_engine_for(db_path, write=False)
    try:
        with engine.connect() as conn:
            assert load_latest_snapshot(conn, FOLD_VERSION) is None
    finally:
        engine.dispose()


async def test_snapshotter_writes_when_due_and_at_shutdown(store: SyncEventStore, db_path: Path | str) -> None:
    snapshotter = Snapshotter(db_path, every=10)
    try:
        assert not snapshotter.maybe_snapshot(_at(store, 9))  # not due yet
        snapshotter.on_folded(None, _at(store, 10))  # type: ignore[arg-type]  # the LiveState listener form
        assert snapshotter.busy
        assert not snapshotter.maybe_snapshot(_at(store, 30))  # one write at a time
        await snapshotter.wait_idle()
        assert snapshotter.last_position == 10 and snapshotter.snapshots_taken == 1
        assert not snapshotter.maybe_snapshot(_at(store, 19))
        assert await snapshotter.snapshot_now(_all(store))
        assert not await snapshotter.snapshot_now(_all(store))  # nothing new since
    finally:
        await snapshotter.close()
    result = await _rebuild(db_path)
    assert (result.snapshot_position, result.events_replayed) == (store.head(), 0)
    assert result.state == _all(store)


async def test_snapshotter_starts_from_the_rebuild_position(store: SyncEventStore, db_path: Path | str) -> None:
    result = await _rebuild(db_path)
    async_store = AsyncEventStore(db_path, source={"kind": "test"})
    snapshotter = Snapshotter(async_store, every=10, last_position=result.snapshot_position)
    try:
        assert snapshotter.maybe_snapshot(result.state)  # a long replay is snapshotted at once
        await snapshotter.wait_idle()
        assert snapshotter.last_position == store.head()
    finally:
        await snapshotter.close()
        await async_store.close()


async def test_snapshotter_failure_is_logged_not_raised(tmp_path: Path) -> None:
    snapshotter = Snapshotter(tmp_path / "missing-dir" / "nope.db", every=1)
    try:
        assert snapshotter.maybe_snapshot(RouterState(position=5))
        await snapshotter.wait_idle()
        assert snapshotter.snapshots_taken == 0 and snapshotter.last_position == 0
        assert not snapshotter.maybe_snapshot(RouterState(position=5))  # waits another `every`
    finally:
        await snapshotter.close()
