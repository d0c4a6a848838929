"""Startup rebuild of the fold: the newest valid snapshot plus the tail after it.

Startup time then depends on the events since the last snapshot, not on the
length of history. Without a usable snapshot (none yet, another fold version,
damaged) this is a full replay, and the caller's :class:`Snapshotter` writes a
fresh one soon after.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from service.core.fold import fold
from service.core.snapshot import FOLD_VERSION
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import decode_rows
from service.event_store.snapshots import load_latest_snapshot
from service.event_store.statements import select_page_raw

PAGE = 5000
"""Events per read: large enough that the per-page hop to the aiosqlite thread
is noise, small enough that one page's decode+fold (~30 ms) is a short pause."""

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RebuildResult:
    """What startup recovery reports (see ``recovery_completed``)."""

    state: RouterState
    snapshot_position: int
    """Position of the snapshot used; 0 when the whole log was replayed."""
    events_replayed: int
    duration_ms: float


async def rebuild_state(
    store: AsyncEventStore, *, fold_version: int = FOLD_VERSION, page_size: int = PAGE
) -> RebuildResult:
    """Fold the log at ``store`` from its newest usable snapshot to the head.

    Runs on the event loop between awaits (decode and fold are CPU work; the
    reads go to aiosqlite's thread), meant for the lifespan before serving.
    An event that does not decode raises, as the live tail would: a log this
    code cannot read must not be served from a partial fold."""
    started = time.perf_counter()
    conn = await store.watch_connection()
    try:
        loaded = await conn.run_sync(load_latest_snapshot, fold_version)
        state, snapshot_position = loaded if loaded is not None else (RouterState(), 0)
        replayed = 0
        while True:
            rows = await conn.run_sync(select_page_raw, state.position, page_size)
            for recorded in decode_rows(rows):
                state = fold(state, recorded)
            replayed += len(rows)
            if len(rows) < page_size:
                break
        await conn.rollback()
    finally:
        await conn.close()
    result = RebuildResult(
        state=state,
        snapshot_position=snapshot_position,
        events_replayed=replayed,
        duration_ms=(time.perf_counter() - started) * 1000.0,
    )
    _log.info(
        "fold_rebuilt",
        position=state.position,
        snapshot_position=snapshot_position,
        events_replayed=replayed,
        duration_ms=round(result.duration_ms, 1),
    )
    return result
