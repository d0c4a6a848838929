"""Startup rebuild of the fold: the newest valid snapshot plus the tail after it.

Startup time then depends on the events since the last snapshot, not on the
length of history. Without a usable snapshot (none yet, another fold version,
damaged) this is a full replay, and the caller's :class:`Snapshotter` writes a
fresh one soon after.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import structlog

from service.core.snapshot import FOLD_VERSION
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.replay import fold_page, planned_pages
from service.event_store.snapshots import load_latest_snapshot
from service.event_store.statements import head

PAGE = 20_000
"""Events (positions, on SQLite) per read: large enough that the per-page hops to
the aiosqlite thread are noise and a page's summary query runs long beside the
planning of the one before (0.72-0.77 s against 0.96-1.02 s at 5,000 for a
million events), small enough that a page of events that all have to be folded
(~25 us each: 0.5 s) is a short pause while nothing serves yet."""

PROGRESS_EVERY = 1.0
"""Seconds between ``fold_rebuilding`` log lines during a long replay."""

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
    store: AsyncEventStore,
    *,
    fold_version: int = FOLD_VERSION,
    page_size: int = PAGE,
    progress_every: float = PROGRESS_EVERY,
) -> RebuildResult:
    """Fold the log at ``store`` from its newest usable snapshot to the head.

    Runs on the event loop between awaits (decode and fold are CPU work; the
    reads go to aiosqlite's thread), meant for the lifespan before serving:
    nothing serves or acts on a half-built state, so a long replay says how far
    it is (``fold_rebuilding``, every ``progress_every`` seconds) instead.
    Pages come from :func:`~service.event_store.replay.planned_pages`, which
    leaves out the progress events a later one supersedes (same state) and, on
    SQLite, reads the next page while this one is folded.
    An event that does not decode raises, as the live tail would: a log this
    code cannot read must not be served from a partial fold."""
    started = time.perf_counter()
    conn = await store.watch_connection()
    try:
        loaded = await conn.run_sync(load_latest_snapshot, fold_version)
        state, snapshot_position = loaded if loaded is not None else (RouterState(), 0)
        target = await conn.run_sync(head)
        replayed, next_report = 0, started + progress_every
        async with contextlib.aclosing(planned_pages(conn, state.position, page_size)) as pages:
            async for page in pages:
                state = fold_page(state, page)
                replayed += page.count
                if page.count == page_size and time.perf_counter() >= next_report:  # not after the last
                    next_report = time.perf_counter() + progress_every
                    _log_progress(state, target, replayed, started)
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


def _log_progress(state: RouterState, target: int, replayed: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    _log.info(
        "fold_rebuilding",
        position=state.position,
        head=target,
        percent=round(100.0 * state.position / target, 1) if target else 100.0,
        events_replayed=replayed,
        events_per_second=round(replayed / elapsed) if elapsed > 0 else None,
    )
