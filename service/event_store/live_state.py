"""The service's live state: the fold of the log, fed only by tailing it.

The service's own appends are not applied directly: they are committed like a
worker's, then picked up by the same tail. ``kick()`` merely shortens the wait
so a handler can read its own write (``await wait_for(position)``).

The tail is supervised: if it fails (its connection breaks, a read raises) it
is restarted with capped exponential backoff. While it is down the state is
stale, so :meth:`LiveState.record` refuses at once (:class:`StateUnavailable`)
instead of appending a command whose outcome could never be read back, and
``/health`` answers 503 with the lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

import service.event_store.statements as statements
import service.event_store.wakeup as wakeup
from service.core.backoff import retry_delay
from service.core.decision import Decision
from service.core.events import Recorded
from service.core.fold import fold
from service.core.state import RouterState
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import NewEvent, from_append, to_recorded
from service.event_store.rows import ConcurrencyConflict, StoreUnavailable
from service.event_store.statements import EventFilter


class StateUnavailable(RuntimeError):
    """The live state is not being kept current (tail down) or did not reach a
    position in time; the API answers 503 ``state_unavailable``."""


@dataclass(frozen=True, slots=True)
class TailHealth:
    """What ``/health`` reports about the tail."""

    up: bool
    position: int
    head: int
    lag_ms: float
    restarts: int
    last_error: str | None

    @property
    def lag_events(self) -> int:
        return max(0, self.head - self.position)


A = TypeVar("A")
Listener = Callable[[Recorded, RouterState], None]
_log = structlog.get_logger(__name__)
_PAGE = 1000
POLL_INTERVAL = 0.01
"""Seconds between polls of the log where writers cannot wake the tail."""
WOKEN_POLL_INTERVAL = 1.0
"""Seconds between polls when writers wake the tail: only a safety net for a lost datagram."""


def _version(conn: Connection) -> int:
    """``PRAGMA data_version`` (PostgreSQL: the head position), then end the read transaction
    (one thread hop)."""
    version = statements.change_marker(conn)
    conn.rollback()
    return version


def _page(conn: Connection, after: int) -> Sequence[Any]:
    """The next page of rows after ``after``, then end the read transaction (one thread hop)."""
    rows = statements.select_events(conn, EventFilter(after=after, limit=_PAGE))
    conn.rollback()
    return rows


class LiveState:
    """Owns ``state`` and the task that keeps it current.

    Other processes' commits are noticed when their writer's wake-up datagram
    arrives (:mod:`service.event_store.wakeup`), else at the next poll of
    ``PRAGMA data_version`` (which changes on each foreign commit):
    ``poll_interval`` is that safety net, 1 s by default with wake-ups and
    10 ms where the platform has none. On PostgreSQL the wake-up is the NOTIFY
    each append sends at commit (LISTEN on the tail's own connection) and the
    safety net polls the head position."""

    def __init__(
        self,
        store: AsyncEventStore,
        state: RouterState | None = None,
        poll_interval: float | None = None,
        *,
        wakeups: bool = True,
        retry_base: float = 0.1,
        retry_cap: float = 5.0,
    ) -> None:
        self.store = store
        self.state = state if state is not None else RouterState()
        self._wake = wakeup.listen(store.path) if wakeups and store.path is not None else None
        if poll_interval is None:
            woken = self._wake is not None or (wakeups and store.postgres)
            poll_interval = WOKEN_POLL_INTERVAL if woken else POLL_INTERVAL
        self._notifies = wakeups and store.postgres
        self.poll_interval = poll_interval
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self.restarts = 0
        self.last_error: str | None = None
        self._down_since: float | None = None
        self._failures_in_a_row = 0
        self.connection: AsyncConnection | None = None  # the tail's own, while it runs
        self._changed = asyncio.Condition()
        self._kick = asyncio.Event()
        store.add_commit_listener(self.kick)  # the service's own appends: read at once
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
        if self._wake is not None:
            asyncio.get_running_loop().add_reader(self._wake, self._on_wake)
        self._task = asyncio.create_task(self._supervise(), name="live-state-tail")

    def _on_wake(self) -> None:
        assert self._wake is not None
        if wakeup.drain(self._wake):
            self._kick.set()

    async def stop(self) -> None:
        if self._wake is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._wake)
            self._wake.close()
            self._wake = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def kick(self) -> None:
        """Wake the tail now (after our own append) instead of at the next poll."""
        self._kick.set()

    @property
    def up(self) -> bool:
        """Whether the tail runs and its last read succeeded."""
        return self._task is not None and not self._task.done() and self._down_since is None

    async def _supervise(self) -> None:
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failures_in_a_row += 1
                self.restarts += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self._down_since is None:
                    self._down_since = time.monotonic()
                delay = retry_delay(self._failures_in_a_row, base=self.retry_base, cap=self.retry_cap)
                _log.error("tail_failed", error=self.last_error, retry_in_s=round(delay, 2), restarts=self.restarts)
                async with self._changed:
                    self._changed.notify_all()  # waiters re-check, and give up on a dead tail
                await asyncio.sleep(delay)

    async def _run(self) -> None:
        conn = await self.store.watch_connection()
        self.connection = conn
        unlisten = None
        try:
            if self._notifies:  # before the first read below, so no commit falls between
                unlisten = await self.store.listen(conn, self.kick)
            seen: int | None = None
            while True:
                # Told of a commit: read at once. Otherwise (the safety-net poll) ask data_version first.
                # Each read ends its own transaction in the same thread hop (_page), so the next
                # data_version sees the commits after it: three hops to SSE became one or two.
                kicked = self._kick.is_set()
                self._kick.clear()
                version = None if kicked else await conn.run_sync(_version)
                if kicked or version != seen:
                    seen = version
                    await self._read_new(conn)
                if self._down_since is not None:
                    _log.info("tail_recovered", down_ms=round((time.monotonic() - self._down_since) * 1000, 1))
                self._down_since, self._failures_in_a_row = None, 0
                with contextlib.suppress(asyncio.TimeoutError):
                    async with asyncio.timeout(self.poll_interval):  # not wait_for: see wait_until
                        await self._kick.wait()
        except Exception:
            # A broken connection must not go back to the pool for the next attempt.
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.invalidate())
            raise
        finally:
            self.connection = None
            if unlisten is not None:
                await asyncio.shield(unlisten())
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.close())

    async def health(self) -> TailHealth:
        """Position vs. head of the log, and how old the oldest unfolded event is. A database
        that cannot be reached (PostgreSQL restarting) reports the tail down, with the reason."""
        try:
            head = await self.store.head()
            lag_ms = 0.0
            if head > self.position:
                first = await self.store.read(EventFilter(after=self.position, limit=1))
                if first:
                    lag_ms = max(0.0, (datetime.now(UTC) - first[0].recorded_at).total_seconds() * 1000)
        except StoreUnavailable as exc:
            down_ms = 0.0 if self._down_since is None else (time.monotonic() - self._down_since) * 1000
            return TailHealth(False, self.position, self.position, round(down_ms, 1), self.restarts, str(exc))
        if self._down_since is not None:
            lag_ms = max(lag_ms, (time.monotonic() - self._down_since) * 1000)
        return TailHealth(self.up, self.position, head, round(lag_ms, 1), self.restarts, self.last_error)

    async def _read_new(self, conn: AsyncConnection) -> None:
        while True:
            rows = await conn.run_sync(_page, self.position)
            if not rows:
                return
            self._apply([to_recorded(row) for row in rows])
            async with self._changed:
                self._changed.notify_all()
            if len(rows) < _PAGE:
                return

    async def record(
        self, batch: list[NewEvent], expect: Mapping[str, int] | None = None
    ) -> tuple[list[int], RouterState]:
        """The service's append path: commit, then wait until the tail has folded it.
        Refused before anything is written while the tail is down. ``expect``:
        optimistic concurrency per model (see :meth:`decide`)."""
        self._require_up()
        positions = await self.store.append(batch, expect)
        state = await self.wait_for(max(positions)) if positions else self.state
        return positions, state

    async def commit(self, batch: list[NewEvent]) -> list[int]:
        """Append without waiting for the tail to fold it, and even while the tail is down: for facts
        nothing reads back (a finished request, the shutdown's last events). Their positions."""
        return await self.store.append(batch)

    async def decide(
        self, decision: Callable[[RouterState], Decision[A]], attempts: int = 20
    ) -> tuple[Decision[A], RouterState]:
        """Run ``decision`` over the fold and append its events, as one step for the models they are
        about: if another writer (a worker) appended an event about one of them after the state the
        decision saw, nothing is written, and the decision runs again on the newer state. Without
        this, a cancel decided just before the worker's ``download_finished`` was folded would land
        after it, an impossible transition. Returns the decision that held and the state after it.
        (The supervisors reach this through ``service/supervision/interpreter.py``.)"""
        state = self.state
        for _ in range(attempts):
            made = decision(state)
            if not made.events:
                return made, state
            batch = [from_append(a) for a in made.events]
            expect = {new.model: state.position for new in batch if new.model is not None}
            try:
                return made, (await self.record(batch, expect))[1]
            except ConcurrencyConflict:
                state = await self.sync()
        msg = f"no decision held after {attempts} attempts: the log kept changing under it"
        raise StateUnavailable(msg)

    async def sync(self, timeout: float = 5.0) -> RouterState:
        """Fold everything committed so far (e.g. a worker's last events before it
        exited) before deciding something from the state."""
        return await self.wait_for(await self.store.head(), timeout=timeout)

    async def wait_for(self, position: int, timeout: float = 5.0) -> RouterState:
        """Return once the fold has reached ``position`` (read-your-writes); raises
        :class:`StateUnavailable` on timeout or when the tail is down."""
        if self.position < position:
            self._require_up()
            self.kick()
        if not await self.wait_beyond(position - 1, timeout=timeout):
            self._require_up()
            msg = f"the live state did not reach position {position} within {timeout:g} s (at {self.position})"
            raise StateUnavailable(msg)
        return self.state

    def _require_up(self) -> None:
        if self._task is not None and not self.up:
            msg = f"the live state is stale: its tail is down ({self.last_error}); retrying"
            raise StateUnavailable(msg)

    async def wait_until(self, predicate: Callable[[RouterState], bool], timeout: float) -> RouterState | None:
        """The state once ``predicate`` holds for it (checked after every folded batch); None on timeout."""
        async with self._changed:
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that arrives
                # as the wait ends (it returns the result instead), and the cancelled caller runs on.
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(lambda: predicate(self.state))
            except TimeoutError:
                return None
        return self.state

    async def wait_beyond(self, position: int, timeout: float | None = None, *, while_down: bool = False) -> bool:
        """Wait until the fold passes ``position``; False on timeout, or as soon as
        the tail goes down (nothing will arrive until it is back) unless ``while_down``."""

        def reached() -> bool:
            return self.position > position or (not while_down and self._down_since is not None)

        async with self._changed:
            try:
                async with asyncio.timeout(timeout):  # not wait_for: see wait_until
                    await self._changed.wait_for(reached)
            except TimeoutError:
                return False
        return self.position > position
