"""The service's live state: the fold of the log, fed only by tailing it.

The service's own appends are not applied directly: they are committed like a
worker's, then picked up by the same tail. ``kick()`` merely shortens the wait
so a handler can read its own write (``await wait_for(position)``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from service.core.events import Recorded
from service.core.fold import fold
from service.core.state import RouterState
from service.event_store import _sql
from service.event_store._sql import EventFilter
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent, to_recorded

Listener = Callable[[Recorded, RouterState], None]
_log = structlog.get_logger(__name__)
_PAGE = 1000


class LiveState:
    """Owns ``state`` and the task that keeps it current.

    ``poll_interval`` bounds how late a commit by another process is noticed
    (PRAGMA data_version changes on each foreign commit)."""

    def __init__(self, store: AsyncEventStore, state: RouterState | None = None, poll_interval: float = 0.01) -> None:
        self.store = store
        self.state = state if state is not None else RouterState()
        self.poll_interval = poll_interval
        self._changed = asyncio.Condition()
        self._kick = asyncio.Event()
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self.events_applied = 0

    @property
    def position(self) -> int:
        return self.state.position

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(recorded, new_state)`` for every event after it is folded.
        Listeners must not block; they schedule work instead."""
        self._listeners.append(listener)

    async def catch_up(self) -> int:
        """Fold every stored event after the current position; returns how many."""
        count = 0
        while True:
            batch = await self.store.read(EventFilter(after=self.position, limit=_PAGE))
            self._apply(batch)
            count += len(batch)
            if len(batch) < _PAGE:
                return count

    def _apply(self, batch: list[Recorded]) -> None:
        for recorded in batch:
            before = self.state.anomalies
            self.state = fold(self.state, recorded)
            if self.state.anomalies != before:
                _log.error("impossible_transition", detail=self.state.last_anomaly, count=self.state.anomalies)
            self.events_applied += 1
            for listener in self._listeners:
                try:
                    listener(recorded, self.state)
                except Exception:  # a listener bug must not stop the tail
                    _log.exception("listener_failed", event=recorded.type, position=recorded.position)

    async def start(self) -> None:
        await self.catch_up()
        self._task = asyncio.create_task(self._run(), name="live-state-tail")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def kick(self) -> None:
        """Wake the tail now (after our own append) instead of at the next poll."""
        self._kick.set()

    async def _run(self) -> None:
        conn = await self.store.watch_connection()
        try:
            seen: int | None = None
            while True:
                version = await conn.run_sync(_sql.data_version)
                if version != seen or self._kick.is_set():
                    self._kick.clear()
                    seen = version
                    await self._read_new(conn)
                await conn.rollback()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._kick.wait(), self.poll_interval)
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("tail_failed")
            raise
        finally:
            await asyncio.shield(conn.close())

    async def _read_new(self, conn: object) -> None:
        while True:
            rows = await conn.run_sync(_sql.select_events, EventFilter(after=self.position, limit=_PAGE))  # type: ignore[attr-defined]
            if not rows:
                return
            self._apply([to_recorded(row) for row in rows])
            async with self._changed:
                self._changed.notify_all()
            if len(rows) < _PAGE:
                return

    async def record(self, batch: list[NewEvent]) -> tuple[list[int], RouterState]:
        """The service's append path: commit, then wait until the tail has folded it."""
        positions = await self.store.append(batch)
        state = await self.wait_for(max(positions)) if positions else self.state
        return positions, state

    async def sync(self, timeout: float = 5.0) -> RouterState:
        """Fold everything committed so far (e.g. a worker's last events before it
        exited) before deciding something from the state."""
        return await self.wait_for(await self.store.head(), timeout=timeout)

    async def wait_for(self, position: int, timeout: float = 5.0) -> RouterState:
        """Return once the fold has reached ``position`` (read-your-writes)."""
        if self.position < position:
            self.kick()
        await self.wait_beyond(position - 1, timeout=timeout)
        return self.state

    async def wait_beyond(self, position: int, timeout: float | None = None) -> bool:
        """Wait until the fold passes ``position``; False on timeout."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self.position > position), timeout)
            except TimeoutError:
                return False
        return True
