"""This node's membership: its advisory lock, its ``node_joined``, and the watch for lost nodes.

**Liveness through the database, not a home-made protocol.** Each node holds a
session-level advisory lock named after it on a dedicated connection for as
long as it lives. PostgreSQL releases the lock when that connection dies (the
process was killed, the machine or the network went away: TCP keepalives end
it). Any node that can then take the lock knows the holder is gone, appends
``node_lost`` and the ends of what that incarnation ran (deterministic event
ids: two nodes detecting it at once store it once), and lets go of the lock
again so that the node may come back. A slow node that still holds its
connection is never lost. The lock is taken before ``node_joined`` is
appended, so a joined incarnation whose lock is free is really gone.

**A clean stop is not a loss.** A stopping node appends ``node_left`` (with its
``router_stopped``) before it closes the lock's connection, and a node that
finds a lock free first folds everything committed so far: a node that left
is then seen as left, never recorded lost.

**Recorded lost, yet alive.** A node whose lock connection was cut (a partition
between it and the database, ``pg_terminate_backend``) while the others could
still reach the database is recorded lost by them, with its instances. When it
sees that ``node_lost`` for its own incarnation in its tail (it holds its lock
again by then: taking it back waited for the node that recorded the loss to let
go), it stops the workers whose instances the log ended, without a word (stdin
EOF: they record nothing more), joins again as a new incarnation, and takes
back the downloads the log interrupted (their workers stopped the same way,
keeping their partials; the jobs resumed as a restart resumes them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
from typing import Any

import psycopg
import structlog

from service.core import cluster
from service.core import events as ev
from service.core.decision import Append
from service.downloads.cache_files import free_bytes
from service.event_store.live_state import LiveState, StateUnavailable
from service.event_store.rows import StoreUnavailable
from service.event_store.urls import libpq_url
from service.settings import Settings
from service.supervision.downloads import DownloadSupervisor
from service.supervision.instances import InstanceSupervisor
from service.supervision.interpreter import Interpreter

_log = structlog.get_logger(__name__)
WATCH_SECONDS = 1.0
"""How often the other nodes' locks are tried: a kill -9 is recorded within ~1 s plus the time
PostgreSQL takes to notice the dead connection (immediate for a closed socket)."""
RECONNECT_GRACE = 10.0
"""After this node's connection came back (a database restart, a partition), seconds it waits before
trying the others' locks: every node lost its lock with the database, and must get the time to take
it again before its free lock means it is gone."""


def lock_key(node: str) -> int:
    """The advisory lock key of ``node``: 63 bits of a hash of its name (stable across versions)."""
    digest = hashlib.sha256(f"modelrouter-node:{node}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


def lock_application_name(node: str) -> str:
    """The ``application_name`` of ``node``'s lock connection (``pg_stat_activity``)."""
    return f"modelrouter-node:{node}"


def joined_event(settings: Settings, incarnation: str, memory: int, models: tuple[str, ...]) -> ev.NodeJoined:
    """``node_joined`` for this process, with the free disk where its downloads go (the others place
    pulls by it)."""
    assert settings.node is not None and settings.advertise_url is not None
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return ev.NodeJoined(
        node=settings.node,
        incarnation=incarnation,
        url=settings.advertise_url,
        pid=settings.service_pid,
        cpus=os.cpu_count() or 1,
        ram_bytes=ram,
        memory_bytes=memory,
        models_max=settings.models_max,
        models=models,
        disk_free_bytes=free_bytes(settings.cache_dir),
        disk_reserve_bytes=settings.disk_reserve_bytes,
    )


class Membership:
    """Holds this node's lock and watches the others' (one dedicated connection)."""

    def __init__(
        self,
        settings: Settings,
        live: LiveState,
        interpreter: Interpreter,
        instances: InstanceSupervisor,
        downloads: DownloadSupervisor,
    ) -> None:
        assert settings.node is not None
        self.node = settings.node
        self._settings = settings
        self._url = libpq_url(settings.database_url)
        self._live = live
        self._instances = instances
        self._downloads = downloads
        self._interpreter = interpreter
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.incarnation: str | None = None  # this process's current incarnation, once joined
        self._checks_from = 0.0  # loop time before which the others are not checked (after a reconnect)
        self._resuming = False  # the first check after a reconnect is logged (node_watch_resumed)

    async def join(self, timeout: float = 30.0) -> None:
        """Take this node's lock (waiting while a previous incarnation's connection lingers), then
        append ``node_joined`` as a new incarnation."""
        await self._lock(timeout)
        await self._append_joined()

    async def _append_joined(self) -> None:
        view = cluster.own_view(self._live.state, self.node)
        held = tuple(sorted(m.name for m in view.models.values() if m.available))
        joined = joined_event(self._settings, self._instances.new_id(), self._instances.memory, held)
        await self._interpreter.record([Append(joined)])
        self.incarnation = joined.incarnation

    def leaving(self) -> Append | None:
        """``node_left`` for this incarnation, to append with the shutdown's last events while the
        lock is still held (None: never joined)."""
        return cluster.on_leaving(self.node, self.incarnation) if self.incarnation is not None else None

    async def _lock(self, timeout: float) -> None:
        # Named, so that an operator (or a test) can find this node's lock connection in pg_stat_activity.
        self._conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name=lock_application_name(self.node)
        )
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancellation
                await self._conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(self.node),))
        except TimeoutError:
            msg = f"node {self.node!r} is already running (its advisory lock is held)"
            raise RuntimeError(msg) from None

    async def _reconnect(self) -> None:
        """A new connection holding this node's lock again, retried until the database answers."""
        await self.close()
        while True:
            try:
                await self._lock(timeout=60.0)
            except (psycopg.Error, OSError) as exc:
                _log.warning("node_lock_reconnect_failed", error=str(exc))
                await asyncio.sleep(WATCH_SECONDS)
                continue
            self._checks_from = asyncio.get_running_loop().time() + RECONNECT_GRACE
            self._resuming = True
            _log.info("node_lock_reconnected", node=self.node)
            return

    async def _ensure_locked(self) -> None:
        """Prove the lock's connection works (a live session still holds its lock), else take it anew."""
        try:
            assert self._conn is not None
            await self._conn.execute("SELECT 1")
        except (psycopg.Error, AssertionError):
            await self._reconnect()

    async def rejoin_if_lost(self) -> bool:
        """When the log says this incarnation is lost (the others found its lock free), stop the
        workers of the instances it ended and join again as a new incarnation; answers whether."""
        if self.incarnation is None or not cluster.recorded_lost(self._live.state, self.node, self.incarnation):
            return False
        _log.warning("node_recorded_lost_while_alive", node=self.node, incarnation=self.incarnation)
        await self._ensure_locked()  # before node_joined: a joined incarnation whose lock is free is gone
        done = await asyncio.gather(*self._interpreter.perform([cluster.AbandonEnded()]))
        stopped = [instance for ids in done for instance in ids]
        resumed = await self._downloads.take_back()
        await self._append_joined()
        _log.warning("node_rejoined", node=self.node, incarnation=self.incarnation, stopped=stopped, resumed=resumed)
        return True

    async def check(self) -> list[str]:
        """One pass over the other nodes: those whose lock could be taken are recorded lost."""
        assert self._conn is not None
        lost: list[str] = []
        if asyncio.get_running_loop().time() < self._checks_from:
            return lost  # the others may not have their locks back yet
        for name, incarnation in cluster.lost_to_check(self._live.state, self.node):
            cur = await self._conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(name),))
            row = await cur.fetchone()
            if not (row and row[0]):
                continue  # held: that node lives, however slow
            try:
                await self._live.sync()  # its node_left, committed before it let go, is then seen
                decide = functools.partial(
                    cluster.decide_node_lost, node=name, incarnation=incarnation, detected_by=self.node
                )
                applied = await self._interpreter.apply(decide)
            finally:
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key(name),))
            if applied.answer:
                lost.append(name)
                _log.warning("node_lost", node=name, incarnation=incarnation)
        if self._resuming:
            self._resuming = False
            _log.info("node_watch_resumed", node=self.node, lost=lost)
        return lost

    async def watch(self) -> None:
        """Every :data:`WATCH_SECONDS` until cancelled: re-join if this node was recorded lost, then
        :meth:`check` the others. A database error is logged and retried, and a lost connection
        re-established with this node's lock."""
        while True:
            try:
                await self.rejoin_if_lost()
                await self.check()
            except psycopg.Error as exc:
                _log.warning("node_watch_failed", error=str(exc))
                if self._conn is None or self._conn.closed or self._conn.broken:
                    await self._reconnect()  # the lock went with the connection: take it again
            except (StateUnavailable, StoreUnavailable) as exc:  # the tail or the log is down: next pass
                _log.warning("node_watch_failed", error=str(exc))
            except Exception:  # a bug must not end the watch: a node that watches no more records no loss
                _log.exception("node_watch_failed")
            await asyncio.sleep(WATCH_SECONDS)

    async def close(self) -> None:
        """Let go of the lock (a clean stop: the node is not lost, it left)."""
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
            self._conn = None
