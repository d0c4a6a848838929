"""Periodic snapshots of the live fold, written off the hot path.

The service calls :meth:`Snapshotter.maybe_snapshot` after folding events (a
LiveState listener); once ``every`` events have been folded since the last
snapshot it schedules one background write. Encoding runs in a worker thread
and the write on the Snapshotter's own write connection, so neither the event
loop nor the store's append lock waits on it. ``snapshot_now`` is for shutdown,
so the next start replays almost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from service.core.events import Recorded
from service.core.snapshot import FOLD_VERSION
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.engines import async_engine_for
from service.event_store.pragmas import Synchronous
from service.event_store.snapshots import KEEP, encode_state, save_encoded

_log = structlog.get_logger(__name__)


class Snapshotter:
    """Writes a snapshot every ``every`` folded events (``every <= 0`` disables
    the periodic ones; ``snapshot_now`` still works).

    ``last_position`` should start at the position of the snapshot the rebuild
    used (``RebuildResult.snapshot_position``), so a rebuild that replayed a
    long tail is snapshotted right away."""

    def __init__(
        self,
        target: AsyncEventStore | Path | str,
        every: int,
        *,
        last_position: int = 0,
        keep: int = KEEP,
        fold_version: int = FOLD_VERSION,
        synchronous: Synchronous = "NORMAL",  # a lost snapshot only costs replay time
    ) -> None:
        # The store's database (a SQLite file or a PostgreSQL URL), on a write engine of our own.
        self.location: Path | str = target.url if isinstance(target, AsyncEventStore) else target
        self.every = every
        self.last_position = last_position
        self.keep = keep
        self.fold_version = fold_version
        self.snapshots_taken = 0
        self._synchronous: Synchronous = synchronous
        self._engine: AsyncEngine | None = None
        self._task: asyncio.Task[bool] | None = None
        self._attempted = last_position  # a failed write waits another `every` events

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def due(self, state: RouterState) -> bool:
        """Whether ``state`` is ``every`` events past the last snapshot (or attempt)."""
        return self.every > 0 and state.position - max(self.last_position, self._attempted) >= self.every

    def maybe_snapshot(self, state: RouterState) -> bool:
        """Schedule a snapshot of ``state`` if one is due and none is being written.
        Cheap when nothing is due (called for every folded event). Must be called
        from the event loop. Returns whether one was scheduled."""
        if not self.due(state) or self.busy:
            return False
        self._attempted = state.position
        self._task = asyncio.create_task(self._write(state), name="snapshot-write")
        return True

    def on_folded(self, _recorded: Recorded, state: RouterState) -> None:
        """``LiveState`` listener form of :meth:`maybe_snapshot`."""
        self.maybe_snapshot(state)

    async def snapshot_now(self, state: RouterState) -> bool:
        """Wait for any write in flight, then snapshot ``state`` unless a snapshot
        at or past its position exists. Returns whether one was written."""
        await self.wait_idle()
        if state.position <= self.last_position:
            return False
        self._attempted = max(self._attempted, state.position)
        return await self._write(state)

    async def wait_idle(self) -> None:
        """Wait until no snapshot write is in flight (errors are already logged)."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    async def close(self) -> None:
        await self.wait_idle()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def _write(self, state: RouterState) -> bool:
        try:
            # The state is immutable, so encoding it in a thread is safe.
            text = await asyncio.to_thread(encode_state, state)
            if self._engine is None:
                self._engine = async_engine_for(self.location, self._synchronous, write=True)
            async with self._engine.connect() as conn:
                await conn.run_sync(save_encoded, state.position, self.fold_version, text, keep=self.keep)
        except asyncio.CancelledError:
            raise
        except Exception:  # a snapshot is an optimisation: log, never propagate
            _log.exception("snapshot_failed", position=state.position)
            return False
        self.last_position = max(self.last_position, state.position)
        self.snapshots_taken += 1
        _log.info("snapshot_written", position=state.position, bytes=len(text))
        return True
