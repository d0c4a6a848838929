"""The worker processes of one supervisor, by key: spawn, stop, watch to the end.

Both supervisors (downloads, inference instances) use it, so there is one
place that escalates a stop (a stdin line, then SIGTERM to the process group,
then SIGKILL) and one place that turns an exit into a :class:`ProcessExit`
for the core's decisions. A key stays in the pool until its process has been
reaped: until then it still holds whatever slot it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

import structlog

from service.core.processes import ProcessExit
from service.supervision.surroundings import Child, Spawner

OnExit = Callable[[str, ProcessExit], Awaitable[None]]
ABANDON_GRACE_SECONDS = 5.0
"""How long an abandoned worker (stdin EOF: it stops at once) may take before SIGKILL."""
_log = structlog.get_logger(__name__)


class WorkerPool:
    """Children by key; ``on_exit(key, exit)`` runs once per child after it is reaped."""

    def __init__(self, spawn: Spawner, on_exit: OnExit) -> None:
        self._spawn = spawn
        self._on_exit = on_exit
        self._children: dict[str, Child] = {}
        self._spawning: dict[str, asyncio.Future[Child | None]] = {}
        self._forced: set[str] = set()
        self._watchers: dict[str, asyncio.Task[None]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._children or key in self._spawning

    def active(self) -> set[str]:
        """Keys whose process is spawning or not reaped yet."""
        return set(self._children) | set(self._spawning)

    def child(self, key: str) -> Child | None:
        return self._children.get(key)

    async def spawn(self, key: str, argv: Sequence[str], *, name: str, env: Mapping[str, str] | None = None) -> Child:
        """Start the process for ``key``; raises ``OSError`` when it cannot start."""
        pending: asyncio.Future[Child | None] = asyncio.get_running_loop().create_future()
        self._spawning[key] = pending
        try:
            child = await self._spawn(argv, name=name, env=env)
        except BaseException:
            pending.set_result(None)
            raise
        finally:
            self._spawning.pop(key, None)
        self._children[key] = child
        pending.set_result(child)
        self._watchers[key] = asyncio.create_task(self._watch(key, child), name=f"watch-{key}")
        return child

    async def settled(self, key: str) -> Child | None:
        """The child of ``key`` once any spawn in progress has finished (None: no process)."""
        pending = self._spawning.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        return self._children.get(key)

    async def _watch(self, key: str, child: Child) -> None:
        status = await child.wait()
        exit_ = ProcessExit(
            exit_code=status.exit_code,
            signal=status.signal,
            forced=key in self._forced,
            stderr_tail=child.stderr_tail(),
            max_rss_bytes=status.max_rss_bytes,
            oom_killed=status.oom_killed,
        )
        self._children.pop(key, None)
        self._forced.discard(key)
        try:
            await self._on_exit(key, exit_)
        except Exception:
            _log.exception("on_exit_failed", key=key)
        finally:
            self._watchers.pop(key, None)

    async def stop(self, key: str, line: str, *, grace: float, timeout: float) -> bool:
        """Ask nicely (``line`` on stdin), wait ``grace``; SIGTERM the group, wait
        ``timeout``; then SIGKILL (the exit is then reported as ``forced``).
        Returns once the exit has been handled by ``on_exit``; False when ``key``
        had no process (never spawned, or already reaped)."""
        child = await self.settled(key)
        if child is None:
            return False
        child.send_line(line)
        if not await self._exited_within(child, grace):
            child.signal_group(signal.SIGTERM)
            if not await self._exited_within(child, timeout):
                self._forced.add(key)  # STOPPING -> killed: ignores SIGTERM, or SIGSTOPped
                child.signal_group(signal.SIGKILL)
        await self.reaped(key)
        return True

    async def abandon(self, keys: Collection[str], grace: float = ABANDON_GRACE_SECONDS) -> list[str]:
        """Stdin EOF to each of ``keys`` ("the service is going away": stop at once, record nothing),
        SIGKILL for those still running ``grace`` seconds later; returns ``keys`` once every exit
        has been handled."""
        children = {key: child for key in keys if (child := self._children.get(key)) is not None}
        for child in children.values():
            child.close_stdin()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        for key, child in children.items():
            if not await self._exited_within(child, deadline - loop.time()):
                self.kill(key)
        for key in keys:
            await self.reaped(key)
        return list(keys)

    def kill(self, key: str) -> None:
        """SIGKILL at once (a load deadline passed): nothing to save."""
        child = self._children.get(key)
        if child is not None:
            self._forced.add(key)
            child.signal_group(signal.SIGKILL)

    async def reaped(self, key: str) -> None:
        """Wait until ``key``'s exit has been handled."""
        watcher = self._watchers.get(key)
        if watcher is not None:
            await asyncio.shield(watcher)

    @staticmethod
    async def _exited_within(child: Child, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):  # not wait_for: on 3.11 it can swallow a cancellation
                await child.wait()
            return True
        return False

    def close_all_stdin(self) -> None:
        """EOF to every worker: "the service is going away" (keep partials, record nothing)."""
        for child in self._children.values():
            child.close_stdin()

    def kill_all(self) -> None:
        for key in list(self._children):
            self.kill(key)

    async def wait_all(self, timeout: float) -> bool:
        """Wait for every watcher (exit handled); False if some are still running."""
        watchers = set(self._watchers.values())
        if not watchers:
            return True
        _, pending = await asyncio.wait(watchers, timeout=timeout)
        return not pending
