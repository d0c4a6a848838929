"""Inference instances: one ``workers.inference`` process per loaded model.

Scheduling (who gets a slot) is decided under one lock from the fold plus the
in-memory count of requests in flight; waiting happens outside the lock. The
worker records its own loading/ready/failed/stopped events; the service records
requests, stop requests, crashes and timeouts.

Edges recorded here (model status in brackets):
  * unloaded -> loading         ``instance_requested``      (load, autoload, restart, startup)
  * loading  -> failed          ``instance_load_failed``    (load_timeout; the worker records the rest)
  * loaded   -> unloading       ``instance_stop_requested`` (unload, evicted, idle, shutdown, remove)
  * unloading -> unloaded       ``instance_stopped``        (when the worker could not say so itself)
  * loading/loaded -> failed    ``instance_crashed``        (exit nobody asked for)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import structlog

from service.core import commands
from service.core import events as ev
from service.core.backoff import retry_delay
from service.core.errors import CommandRejected
from service.core.state import InstanceStatus, ModelState, RouterState
from service.event_store.codec import NewEvent
from service.live_state import LiveState
from service.settings import Settings
from service.supervision.child_process import ChildProcess
from service.supervision.ports import free_port
from service.supervision.worker_args import inference_argv

_log = structlog.get_logger(__name__)
_WAKE_TYPES = frozenset(
    {"instance_requested", "instance_loading", "loading_progress", "instance_ready", "instance_load_failed",
     "instance_stop_requested", "instance_stopped", "instance_crashed", "instance_lost", "request_completed",
     "model_removed", "model_discovered"}
)  # fmt: skip


class InstanceSupervisor:
    """Owns the inference worker processes and the slot queue."""

    def __init__(self, settings: Settings, live: LiveState) -> None:
        self.settings = settings
        self.live = live
        self.busy: dict[str, int] = {}
        self._children: dict[str, ChildProcess] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._forced: set[str] = set()
        self._lock = asyncio.Lock()
        self._queue: deque[object] = deque()
        self._change = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shutting_down = False
        live.add_listener(self._on_event)

    # --- change notification ---------------------------------------------------

    def _on_event(self, recorded: ev.Recorded, _state: RouterState) -> None:
        if recorded.type in _WAKE_TYPES:
            self._poke()

    def _poke(self) -> None:
        change, self._change = self._change, asyncio.Event()
        change.set()

    async def _wait_change(self, change: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(change.wait(), max(timeout, 0.0))

    def _spawn_task(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- public API --------------------------------------------------------------

    async def load(self, name: str, *, reason: str = "load") -> ModelState:
        """Start loading ``name`` if it is not running; returns at once (readiness
        arrives as events). Evicts the LRU idle model when at capacity."""
        commands.require_loadable(self.live.state, name)
        async with self._lock:
            model = commands.require_loadable(self.live.state, name)
            if model.instance is not None:
                return model
            if not self._has_slot(model.name):
                if not await self._evict_for(model.name):
                    raise CommandRejected(
                        "capacity",
                        f"model limit reached ({self.settings.models_max}) and every loaded model is busy "
                        "or loading; try again later",
                    )
                await self._wait_slot_free_locked(model.name)
            await self._start(model, reason)
        return self.live.state.models[model.name]

    async def unload(self, name: str, *, reason: str = "unload") -> None:
        """Stop the model's worker: SIGTERM, SIGKILL after ``stop_timeout``."""
        model = self.live.state.resolve(name)
        if model is None or not model.listed:
            raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
        if model.instance is None:
            raise CommandRejected("not_running", f"model {model.name!r} is not running", model=model.name)
        async with self._lock:
            model = self.live.state.models[model.name]
            if model.instance is None:
                return
            await self._request_stop(model, reason)
        await self._stop_process(model)

    @asynccontextmanager
    async def lease(self, name: str, *, autoload: bool) -> AsyncIterator[tuple[str, str]]:
        """Hold the model loaded while a request runs: yields ``(model, endpoint)``.
        Loads it first when ``autoload`` allows, queueing for a slot (FIFO)."""
        model_name, endpoint = await self._acquire(name, autoload=autoload)
        try:
            yield model_name, endpoint
        finally:
            self.busy[model_name] -= 1
            if self.busy[model_name] <= 0:
                self.busy.pop(model_name, None)
                self._poke()

    # --- acquiring a ready instance ---------------------------------------------

    async def _acquire(self, name: str, *, autoload: bool) -> tuple[str, str]:
        ticket = object()
        queued = False
        started: str | None = None
        deadline = time.monotonic() + self.settings.queue_timeout
        try:
            while True:
                change = self._change
                state = self.live.state
                model = state.resolve(name)
                if model is None or not model.listed:
                    raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
                inst = model.instance
                if inst is not None and inst.status is InstanceStatus.READY:
                    self.busy[model.name] = self.busy.get(model.name, 0) + 1
                    return model.name, inst.endpoint
                if inst is None:
                    self._raise_if_failed(model, started)
                    if not autoload:
                        raise CommandRejected(
                            "model_not_loaded",
                            f"model {model.name!r} is not loaded and autoload is off",
                            model=model.name,
                        )
                    if not queued:
                        self._queue.append(ticket)
                        queued = True
                    started = await self._try_start(model, ticket) or started
                    if started and self._queue and self._queue[0] is ticket:
                        self._queue.popleft()
                        queued = False
                        self._poke()
                if time.monotonic() > deadline and (inst is None or inst.status is InstanceStatus.STOPPING):
                    raise CommandRejected(
                        "capacity",
                        f"no slot for model {model.name!r} within {self.settings.queue_timeout:.0f} s "
                        f"(models_max={self.settings.models_max})",
                    )
                await self._wait_change(change, min(1.0, deadline - time.monotonic()) if inst is None else 1.0)
        finally:
            if queued:
                with contextlib.suppress(ValueError):
                    self._queue.remove(ticket)
                self._poke()

    def _raise_if_failed(self, model: ModelState, started: str | None) -> None:
        error = model.last_error or {}
        # A failed load is not retried on every request (a corrupt file stays corrupt);
        # a crash is: the next request autoloads, as in llama.cpp.
        if model.failed and (error.get("kind") == "load" or started is not None):
            raise CommandRejected(
                "model_failed",
                f"model {model.name!r} failed to load: {error.get('reason')}: {error.get('message')}",
                model=model.name,
                reason=error.get("reason"),
            )
        commands.require_loadable(self.live.state, model.name)

    async def _try_start(self, model: ModelState, ticket: object) -> str | None:
        async with self._lock:
            current = self.live.state.models[model.name]
            if current.instance is not None or self._queue[0] is not ticket:
                return None
            if not self._has_slot(model.name):
                await self._evict_for(model.name)
                return None
            return await self._start(current, "autoload")

    async def _evict_for(self, model: str) -> bool:
        """LOADED -> UNLOADING for the LRU idle model, to free a slot for ``model``
        (called under the lock). False when every running model is busy or loading."""
        victim = commands.choose_victim(self.live.state, self.busy, exclude=model)
        if victim is None:
            return False
        await self._request_stop(victim, "evicted")
        self._spawn_task(self._stop_process(victim), f"evict-{victim.name}")
        return True

    def _has_slot(self, model: str) -> bool:
        limit = self.settings.models_max
        return limit == 0 or commands.running_count(self.live.state) + self._exiting() < limit

    def _exiting(self) -> int:
        # A worker records its own end (instance_stopped, instance_load_failed)
        # just before it exits: its process holds the slot until it is reaped.
        state = self.live.state
        live = {m.instance.instance_id for m in state.models.values() if m.instance is not None}
        return sum(1 for instance_id in self._children if instance_id not in live)

    async def _wait_slot_free_locked(self, model: str) -> None:
        deadline = time.monotonic() + self.settings.stop_timeout + 5
        while not self._has_slot(model) and time.monotonic() < deadline:
            change = self._change
            await self._wait_change(change, 0.5)

    # --- process lifecycle -------------------------------------------------------

    async def _start(self, model: ModelState, reason: str) -> str:
        """Record the request, then spawn the worker (called under the lock)."""
        instance_id = uuid.uuid4().hex[:12]
        port = free_port()
        params = dict(model.config.params)
        requested = ev.InstanceRequested(instance_id=instance_id, reason=reason, port=port, params=params)
        await self.live.record([NewEvent(requested, model=model.name)])
        assert model.path is not None
        argv = inference_argv(self.settings, model.name, model.path, instance_id, port, params)
        try:
            child = await ChildProcess.spawn(
                argv,
                name=f"inference:{model.name}:{instance_id}",
                env={**os.environ, "MODELROUTER_SYNCHRONOUS": self.settings.synchronous},
            )
        except OSError as exc:
            failed = ev.InstanceLoadFailed(instance_id=instance_id, reason="spawn_failed", message=str(exc))
            await self.live.record([NewEvent(failed, model=model.name)])
            return instance_id
        self._children[instance_id] = child
        self._watchers[instance_id] = self._spawn_task(
            self._watch(instance_id, model.name, child), f"watch-{instance_id}"
        )
        self._spawn_task(self._load_deadline(instance_id, model.name, child), f"deadline-{instance_id}")
        return instance_id

    async def _request_stop(self, model: ModelState, reason: str) -> None:
        inst = model.instance
        if inst is not None and inst.status is not InstanceStatus.STOPPING:
            stop = ev.InstanceStopRequested(instance_id=inst.instance_id, reason=reason)
            await self.live.record([NewEvent(stop, model=model.name)])

    async def _stop_process(self, model: ModelState) -> None:
        inst = model.instance
        if inst is None:
            return
        child = self._children.get(inst.instance_id)
        if child is None:
            # Nothing to signal (spawn failed or the process is already gone): record the end.
            await self.live.record(
                [
                    NewEvent(
                        ev.InstanceStopped(instance_id=inst.instance_id, reason=inst.stop_reason or "unload"),
                        model=model.name,
                    )
                ]
            )
            return
        # The stdin line carries the reason into the worker's own instance_stopped;
        # SIGTERM follows for a worker too busy to read it.
        child.send_line(f"stop {inst.stop_reason or 'unload'}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(child.wait(), min(0.2, self.settings.stop_timeout))
        child.signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(child.wait(), self.settings.stop_timeout)
        except TimeoutError:
            # STOPPING -> killed: a worker that ignores SIGTERM (or is SIGSTOPped).
            self._forced.add(inst.instance_id)
            child.signal_group(signal.SIGKILL)
        watcher = self._watchers.get(inst.instance_id)
        if watcher is not None:
            await asyncio.shield(watcher)

    async def _watch(self, instance_id: str, model_name: str, child: ChildProcess) -> None:
        status = await child.wait()
        self._children.pop(instance_id, None)
        self._poke()  # a reaped worker frees its slot
        try:
            state = await self.live.sync()
            model = state.models.get(model_name)
            if model is None or model.instance is None or model.instance.instance_id != instance_id:
                return  # the worker recorded its own end (stopped / load failed)
            inst = model.instance
            if inst.status is InstanceStatus.STOPPING or self._shutting_down:
                end: ev.Event = ev.InstanceStopped(
                    instance_id=instance_id,
                    reason=inst.stop_reason or "shutdown",
                    exit_code=status.exit_code if status.exit_code is not None else -(status.signal or 0),
                    forced=instance_id in self._forced,
                )
            else:
                # LOADING/READY -> crashed: an exit nobody asked for.
                end = ev.InstanceCrashed(
                    instance_id=instance_id,
                    exit_code=status.exit_code,
                    signal=status.signal,
                    stderr_tail=child.stderr_tail(),
                )
            await self.live.record([NewEvent(end, model=model_name)])
            if isinstance(end, ev.InstanceCrashed):
                _log.warning(
                    "instance_crashed",
                    model=model_name,
                    instance_id=instance_id,
                    signal=status.signal,
                    exit_code=status.exit_code,
                )
                self._maybe_restart(model_name)
        finally:
            self._forced.discard(instance_id)
            self._watchers.pop(instance_id, None)

    def _maybe_restart(self, model_name: str) -> None:
        model = self.live.state.models.get(model_name)
        if model is None or model.config.restart != "on-failure" or self._shutting_down:
            return
        delay = retry_delay(max(model.crash_count, 1), base=1.0, cap=60.0, jitter=random.random())
        self._spawn_task(self._restart_later(model_name, delay), f"restart-{model_name}")

    async def _restart_later(self, model_name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        model = self.live.state.models.get(model_name)
        if model is not None and model.instance is None and not self._shutting_down:
            with contextlib.suppress(CommandRejected):
                await self.load(model_name, reason="restart")

    async def _load_deadline(self, instance_id: str, model_name: str, child: ChildProcess) -> None:
        """LOADING -> failed(load_timeout): no ready within ``load_timeout``; progress resets it."""
        timeout = self.settings.load_timeout
        deadline = time.monotonic() + timeout
        last_progress = -1.0
        while True:
            change = self._change
            model = self.live.state.models.get(model_name)
            inst = model.instance if model else None
            if (
                inst is None
                or inst.instance_id != instance_id
                or inst.status not in (InstanceStatus.STARTING, InstanceStatus.LOADING)
            ):
                return
            if inst.progress != last_progress:
                last_progress, deadline = inst.progress, time.monotonic() + timeout
            if time.monotonic() >= deadline:
                failed = ev.InstanceLoadFailed(
                    instance_id=instance_id, reason="load_timeout", message=f"not ready within {timeout:.0f} s"
                )
                await self.live.record([NewEvent(failed, model=model_name)])
                child.signal_group(signal.SIGKILL)
                return
            await self._wait_change(change, min(1.0, deadline - time.monotonic()))

    # --- background duties -------------------------------------------------------

    async def run_idle_reaper(self, interval: float = 1.0) -> None:
        """Unload models idle longer than their ``ttl`` (reason ``idle``)."""
        while True:
            await asyncio.sleep(interval)
            for model in commands.idle_expired(self.live.state, self.busy, datetime.now(UTC)):
                with contextlib.suppress(CommandRejected):
                    await self.unload(model.name, reason="idle")

    async def load_on_startup(self) -> list[str]:
        """Load every model configured with ``load_on_startup``."""
        started = []
        for model in list(self.live.state.models.values()):
            if model.config.load_on_startup and model.available and model.instance is None:
                with contextlib.suppress(CommandRejected):
                    await self.load(model.name, reason="startup")
                    started.append(model.name)
        return started

    async def shutdown(self) -> None:
        """Stop every worker (reason ``shutdown``) and wait for them."""
        self._shutting_down = True
        models = [m for m in self.live.state.models.values() if m.instance is not None]
        for model in models:
            await self._request_stop(model, "shutdown")
        await asyncio.gather(
            *(self._stop_process(self.live.state.models[m.name]) for m in models), return_exceptions=True
        )
        for task in list(self._tasks):
            task.cancel()

    @property
    def queue_length(self) -> int:
        """Requests waiting for a model slot."""
        return len(self._queue)
