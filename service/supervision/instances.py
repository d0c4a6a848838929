"""Inference instances: the thin driver around ``core.scheduling`` and
``core.instance_lifecycle``.

It keeps what the fold cannot: requests in flight per model (``busy``), the
FIFO of demands (requests or loads waiting for a model), models held for
removal, and restart timers. Every decision is a pure function of the fold
plus those facts; this class appends what the decision returns and performs
the effects (spawn, stop, kill) through injected :class:`Effects`.

Locking: one ``asyncio.Lock`` serialises decide -> append. It is never held
while waiting for a slot, a process or a readiness: requests wait for state
changes outside it, and stops and spawns run as their own tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog

from service.core import events as ev
from service.core import instance_lifecycle as lifecycle
from service.core import scheduling
from service.core.errors import CommandRejected
from service.core.processes import ProcessExit
from service.core.state import Instance, InstanceStatus, ModelState, RouterState
from service.event_store.codec import NewEvent
from service.live_state import LiveState
from service.settings import Settings
from service.supervision.effects import Effects
from service.supervision.worker_args import inference_argv, store_env
from service.supervision.worker_pool import WorkerPool

_log = structlog.get_logger(__name__)
_WAKE_TYPES = frozenset(
    {"instance_requested", "instance_loading", "loading_progress", "instance_ready", "instance_load_failed",
     "instance_stop_requested", "instance_stopped", "instance_crashed", "instance_lost", "request_completed",
     "model_removed", "model_discovered", "download_finished", "model_configured"}
)  # fmt: skip
_TICK_SECONDS = 1.0  # timers (load deadline, idle TTL, restarts) are checked at least this often


@dataclass
class _Demand:
    """Requests or a load waiting for one model (one entry per model)."""

    model: str
    reason: str
    created: float
    waiters: int = 0
    explicit: bool = False  # a POST /models/load, startup or restart: kept without waiters
    autoload: bool = False  # some waiter (or the explicit load) may start the model
    started: str | None = None  # the instance started for it


class InstanceSupervisor:
    """Owns the inference worker processes and the demand queue."""

    def __init__(self, settings: Settings, live: LiveState, effects: Effects | None = None) -> None:
        self.settings = settings
        self.live = live
        self.fx = effects or Effects()
        self.busy: dict[str, int] = {}
        self._demands: dict[str, _Demand] = {}  # insertion order is arrival order
        self._holds: set[str] = set()
        self._restart_due: dict[str, float] = {}
        self._models: dict[str, str] = {}  # instance id -> model, while its process lives
        self._pool = WorkerPool(self.fx.spawn, self._on_exit)
        self._lock = asyncio.Lock()
        self._change = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._shutting_down = False
        self._fake_timing = bool(os.environ.get("LLAMA_SERVER_DEBUG_FAKE_TIMING"))
        live.add_listener(self._on_event)

    # --- change notification ---------------------------------------------------

    def _on_event(self, recorded: ev.Recorded, _state: RouterState) -> None:
        if recorded.type in _WAKE_TYPES:
            self._poke()

    def _poke(self) -> None:
        change, self._change = self._change, asyncio.Event()
        change.set()

    async def _wait_change(self, change: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(change.wait(), max(timeout, 0.0))

    def _spawn_task(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- facts for the decisions -------------------------------------------------

    def _facts(self, state: RouterState | None = None) -> scheduling.SlotFacts:
        state = self.live.state if state is None else state
        live = {m.instance.instance_id for m in state.models.values() if m.instance is not None}
        exiting = sum(1 for instance_id in self._pool.active() if instance_id not in live)
        return scheduling.SlotFacts(models_max=self.settings.models_max, busy=dict(self.busy), exiting=exiting)

    def _pending(self) -> list[scheduling.Demand]:
        return [
            scheduling.Demand(d.model, d.reason, d.started, start=d.autoload or d.explicit)
            for d in self._demands.values()
            if d.model not in self._holds
        ]

    @property
    def restarts_pending(self) -> dict[str, float]:
        """Crashed models waiting for their backoff: model -> monotonic due time."""
        return dict(self._restart_due)

    @property
    def queue_length(self) -> int:
        """Requests waiting for a model to be ready (loading or waiting for a slot)."""
        return sum(d.waiters for d in self._demands.values())

    # --- commands -------------------------------------------------------------------

    async def load(self, name: str, *, reason: str = "load") -> ModelState:
        """Start loading ``name`` unless it runs; returns at once (readiness arrives as
        events). At capacity an idle model is evicted first; when no slot can be freed
        (every loaded model is busy or loading) the answer is 503 ``capacity``."""
        model = scheduling.require_loadable(self.live.state, name)
        async with self._lock:
            model = scheduling.require_loadable(self.live.state, model.name)
            self._refuse_held(model.name)
            if model.instance is not None:
                return model
            if model.name not in self._demands and not scheduling.can_ever_start(
                self.live.state, model.name, self._facts()
            ):
                raise CommandRejected(
                    "capacity",
                    f"model limit reached ({self.settings.models_max}) and every loaded model is busy "
                    "or loading; try again later",
                )
            demand = self._demand(model.name, reason)
            demand.explicit = True
            demand.started = None  # a new attempt, even if an earlier one for it failed
            await self._plan_locked()
        return self.live.state.models[model.name]

    async def unload(self, name: str, *, reason: str = "unload") -> None:
        """``-> stopping``, then wait until the worker is gone (stdin line, SIGTERM,
        SIGKILL after ``stop_timeout``)."""
        model = self.live.state.resolve(name)
        if model is None or not model.listed:
            raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
        if model.instance is None:
            raise CommandRejected("not_running", f"model {model.name!r} is not running", model=model.name)
        stopping: Instance | None = None

        def decide(state: RouterState) -> list[NewEvent]:
            nonlocal stopping
            stopping = state.models[model.name].instance
            return [] if stopping is None else [NewEvent(e, model=model.name) for e in lifecycle.stop(stopping, reason)]

        async with self._lock:
            demand = self._demands.get(model.name)
            if demand is not None and demand.waiters == 0:
                del self._demands[model.name]
            await self.live.decide(decide)
        if stopping is not None:
            await self._stop_process(stopping.instance_id)

    @asynccontextmanager
    async def holding(self, name: str) -> AsyncIterator[None]:
        """Keep ``name`` from starting while it is being removed: waiting requests
        fail with 409, new ones too, until the block exits."""
        async with self._lock:  # a pass that is deciding now finishes first; later ones see the hold
            self._holds.add(name)
            self._demands.pop(name, None)
        self._poke()
        try:
            yield
        finally:
            self._holds.discard(name)
            self._poke()

    def _refuse_held(self, model: str) -> None:
        if model in self._holds:
            raise CommandRejected("conflict", f"model {model!r} is being removed", model=model)

    def _demand(self, model: str, reason: str) -> _Demand:
        demand = self._demands.get(model)
        if demand is None:
            demand = self._demands[model] = _Demand(model, reason, created=self.fx.clock.monotonic())
        return demand

    # --- requests -------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, name: str, *, autoload: bool) -> AsyncIterator[tuple[str, str]]:
        """Hold the model loaded while a request runs: yields ``(model, endpoint)``.
        Loads it first when ``autoload`` allows, waiting in arrival order for a slot."""
        model_name, endpoint = await self._acquire(name, autoload=autoload)
        try:
            if self._fake_timing:
                await asyncio.sleep(2.0)  # llama.cpp's LLAMA_SERVER_DEBUG_FAKE_TIMING: busy, not yet proxied
            yield model_name, endpoint
        finally:
            self.busy[model_name] -= 1
            if self.busy[model_name] <= 0:
                self.busy.pop(model_name, None)
                self._poke()

    async def _acquire(self, name: str, *, autoload: bool) -> tuple[str, str]:
        deadline = self.fx.clock.monotonic() + self.settings.queue_timeout
        demand: _Demand | None = None
        try:
            while True:
                change = self._change
                model = self.live.state.resolve(name)
                if model is None or not model.listed:
                    raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
                self._refuse_held(model.name)
                inst = model.instance
                if inst is not None and inst.status is InstanceStatus.READY:
                    # Counted busy in the same step as the check: no eviction can come between.
                    self.busy[model.name] = self.busy.get(model.name, 0) + 1
                    return model.name, inst.endpoint
                if inst is None:
                    self._raise_if_failed(model, demand)
                    if not autoload:
                        raise CommandRejected(
                            "model_not_loaded",
                            f"model {model.name!r} is not loaded, and autoload is off: load it with "
                            "POST /models/load, or pass ?autoload=true",
                            model=model.name,
                        )
                    scheduling.require_loadable(self.live.state, model.name)
                if demand is None:
                    self._refuse_when_queue_full()
                    demand = self._demand(model.name, "autoload")
                    demand.waiters += 1
                    demand.autoload = demand.autoload or autoload
                    self._poke()
                remaining = deadline - self.fx.clock.monotonic()
                if remaining <= 0 and (inst is None or inst.status is InstanceStatus.STOPPING):
                    # Waiting for a slot is bounded here; a load in progress by its load deadline.
                    raise CommandRejected(
                        "capacity",
                        f"no slot for model {model.name!r} within {self.settings.queue_timeout:g} s "
                        f"(models_max={self.settings.models_max}, queue={self.queue_length})",
                    )
                await self._wait_change(change, min(max(remaining, 0.0), _TICK_SECONDS))
        finally:
            if demand is not None:
                demand.waiters -= 1
                if demand.waiters <= 0 and not demand.explicit and self._demands.get(demand.model) is demand:
                    # A client that gave up leaves no demand behind: it costs nobody a slot.
                    del self._demands[demand.model]
                self._poke()

    def _refuse_when_queue_full(self) -> None:
        limit = self.settings.max_queued_requests
        if limit and self.queue_length >= limit:
            raise CommandRejected(
                "capacity", f"{self.queue_length} requests already wait for a model (max_queued_requests={limit})"
            )

    def _raise_if_failed(self, model: ModelState, demand: _Demand | None) -> None:
        """A failed load is not retried on every request (a corrupt file stays corrupt);
        a crash is, once: the next request autoloads, as in llama.cpp."""
        error = model.last_error or {}
        ours = demand is not None and demand.started is not None
        refusal = lifecycle.crash_loop(model) if not ours else None
        if refusal is not None:
            raise refusal
        crashed = lifecycle.crash_rejection(model) if ours else None
        if crashed is not None:
            raise crashed
        if model.failed and (error.get("kind") == "load" or ours):
            raise CommandRejected(
                "model_failed",
                f"model {model.name!r} failed to load: {error.get('reason')}: {error.get('message')}",
                model=model.name,
                reason=error.get("reason"),
            )
        if ours:
            raise CommandRejected(
                "model_failed", f"model {model.name!r} was unloaded before it was ready", model=model.name
            )

    # --- the planning pass ----------------------------------------------------------

    async def tick(self) -> None:
        """One pass over the timers (load deadlines, idle TTL, restarts, stale
        demands) and the demand queue. The run loop calls it on every change."""
        async with self._lock:
            await self._timers_locked()
            await self._plan_locked()

    async def run(self) -> None:
        """Call :meth:`tick` on every change, and every second while a timer may be running (an
        instance's load deadline or idle TTL, a demand's queue timeout, a restart); with none, an idle
        service sleeps until something changes."""
        while not self._shutting_down:
            change = self._change
            try:
                await self.tick()
            except Exception:
                _log.exception("instance_tick_failed")
            if self._timers_running():
                await self._wait_change(change, _TICK_SECONDS)
            else:
                await change.wait()

    def _timers_running(self) -> bool:
        live = any(m.instance is not None for m in self.live.state.models.values())
        return live or bool(self._demands) or bool(self._restart_due) or bool(self._pool.active())

    async def _plan_locked(self) -> None:
        evict: list[Instance] = []
        starts: list[tuple[str, ev.InstanceRequested]] = []

        def decide(state: RouterState) -> list[NewEvent]:
            self._forget_settled(state)
            plan = scheduling.plan_slots(state, self._pending(), self._facts(state))
            evict[:], starts[:] = [], []
            batch: list[NewEvent] = []
            for victim in plan.evict:
                inst = state.models[victim].instance
                assert inst is not None  # choose_victim returns ready instances only
                evict.append(inst)
                batch += [NewEvent(e, model=victim) for e in lifecycle.stop(inst, "evicted")]
            for wanted in plan.start:
                request = lifecycle.request(
                    self.fx.new_id(), self.fx.free_port(), state.models[wanted.model], wanted.reason
                )
                starts.append((wanted.model, request))
                batch.append(NewEvent(request, model=wanted.model))
            return batch

        await self.live.decide(decide)
        for inst in evict:
            self._spawn_task(self._stop_process(inst.instance_id), f"evict-{inst.instance_id}")
        for model_name, request in starts:
            demand = self._demands.get(model_name)
            if demand is not None:  # its waiters may all have left meanwhile: the load goes on
                demand.started = request.instance_id
            self._spawn_task(self._start_process(model_name, request), f"start-{request.instance_id}")

    def _forget_settled(self, state: RouterState) -> None:
        """Drop demands that need nothing more: started and now ready or ended with
        nobody waiting, or explicit ones that waited longer than ``queue_timeout``."""
        now = self.fx.clock.monotonic()
        for name, demand in list(self._demands.items()):
            model = state.models.get(name)
            inst = model.instance if model is not None else None
            done = demand.started is not None and (
                inst is None or inst.instance_id != demand.started or inst.status is InstanceStatus.READY
            )
            stale = demand.started is None and now - demand.created > self.settings.queue_timeout
            if (done or stale or model is None) and demand.waiters == 0:
                if stale:
                    _log.warning("load_abandoned", model=name, waited_s=round(now - demand.created, 1))
                del self._demands[name]

    async def _timers_locked(self) -> None:
        now = self.fx.clock.now()
        timed_out: list[str] = []
        idle: list[str] = []

        def decide(state: RouterState) -> list[NewEvent]:
            timed_out[:], idle[:] = [], []
            batch: list[NewEvent] = []
            for model in state.models.values():
                inst = model.instance
                if inst is None:
                    continue
                failed = lifecycle.on_load_deadline(
                    state, model.name, inst.instance_id, now, self.settings.load_timeout
                )
                if failed:
                    timed_out.append(inst.instance_id)
                    batch += [NewEvent(e, model=model.name) for e in failed]
            for model in scheduling.idle_expired(state, self.busy, now):
                assert model.instance is not None
                idle.append(model.instance.instance_id)
                batch += [NewEvent(e, model=model.name) for e in lifecycle.stop(model.instance, "idle")]
            return batch

        await self.live.decide(decide)
        for instance_id in timed_out:
            self._pool.kill(instance_id)  # LOADING -> failed(load_timeout): nothing to save
        for instance_id in idle:
            self._spawn_task(self._stop_process(instance_id), f"idle-{instance_id}")
        mono = self.fx.clock.monotonic()
        for name, due in list(self._restart_due.items()):
            if mono >= due:
                del self._restart_due[name]
                found = self.live.state.models.get(name)
                if found is not None and scheduling.loadable(found) and found.instance is None:
                    demand = self._demand(name, "restart")
                    demand.explicit, demand.started = True, None

    # --- processes ---------------------------------------------------------------------

    async def _start_process(self, model_name: str, request: ev.InstanceRequested) -> None:
        if self._fake_timing:
            await asyncio.sleep(2.0)  # llama.cpp's LLAMA_SERVER_DEBUG_FAKE_TIMING: a slow load
        model = self.live.state.models[model_name]
        inst = lifecycle.current_instance(self.live.state, model_name, request.instance_id)
        if inst is None or inst.status is InstanceStatus.STOPPING:
            return  # stopped before it was spawned: _stop_process records the end
        assert model.path is not None  # loadable() was checked when the slot was given
        argv = inference_argv(self.settings, model_name, model.path, request.instance_id, request.port, request.params)
        self._models[request.instance_id] = model_name
        try:
            await self._pool.spawn(
                request.instance_id,
                argv,
                name=f"inference:{model_name}:{request.instance_id}",
                env={**os.environ, "MODELROUTER_SYNCHRONOUS": self.settings.synchronous, **store_env(self.settings)},
            )
        except OSError as exc:
            self._models.pop(request.instance_id, None)
            failed = ev.InstanceLoadFailed(instance_id=request.instance_id, reason="spawn_failed", message=str(exc))

            def decide(state: RouterState) -> list[NewEvent]:
                live = lifecycle.current_instance(state, model_name, request.instance_id) is not None
                return [NewEvent(failed, model=model_name)] if live else []

            async with self._lock:
                await self.live.decide(decide)
            return
        if lifecycle.current_instance(self.live.state, model_name, request.instance_id) is None:
            self._pool.kill(request.instance_id)  # its load deadline passed while it was spawning

    async def _stop_process(self, instance_id: str) -> None:
        found = self._find(instance_id)
        reason = found[1].stop_reason if found is not None and found[1].stop_reason else "unload"
        # The model's own stop-timeout (a preset key, as in llama.cpp), else the global one.
        model = self.live.state.models.get(found[0]) if found is not None else None
        own = model.config.stop_timeout if model is not None else None
        timeout = self.settings.stop_timeout if own is None else own
        # The stdin line carries the reason into the worker's own instance_stopped.
        grace = min(0.2, timeout)
        stopped = await self._pool.stop(instance_id, f"stop {reason}", grace=grace, timeout=timeout)
        if not stopped and instance_id not in self._models:
            await self._close_without_process(instance_id)

    def _find(self, instance_id: str, state: RouterState | None = None) -> tuple[str, Instance] | None:
        for model in (self.live.state if state is None else state).models.values():
            if model.instance is not None and model.instance.instance_id == instance_id:
                return model.name, model.instance
        return None

    async def _close_without_process(self, instance_id: str) -> None:
        """A stop for an instance whose worker never started (it was stopped before
        its spawn, or the spawn failed): record its end, unless that is done."""

        def decide(_state: RouterState) -> list[NewEvent]:
            found = self._find(instance_id, _state)
            if found is None:
                return []
            stopped = ev.InstanceStopped(instance_id=instance_id, reason=found[1].stop_reason or "unload")
            return [NewEvent(stopped, model=found[0])]

        await self.live.sync()
        async with self._lock:
            await self.live.decide(decide)

    async def _on_exit(self, instance_id: str, exit_: ProcessExit) -> None:
        model = self._models.pop(instance_id, None)
        self._poke()  # a reaped worker frees its slot
        if model is None:
            return
        await self.live.sync()  # fold what the worker recorded before it exited
        events: list[ev.Event] = []

        def decide(state: RouterState) -> list[NewEvent]:
            events[:] = lifecycle.on_process_exit(state, model, instance_id, exit_, self.busy.get(model, 0))
            return [NewEvent(e, model=model) for e in events]

        async with self._lock:
            await self.live.decide(decide)
        if any(isinstance(e, ev.InstanceCrashed) for e in events):
            error = self.live.state.models[model].last_error or {}
            _log.warning("instance_crashed", model=model, instance_id=instance_id, reason=error.get("message"))
            self._schedule_restart(model)

    def _schedule_restart(self, model_name: str) -> None:
        model = self.live.state.models.get(model_name)
        if model is None or self._shutting_down:
            return
        delay = lifecycle.restart_delay(model, self.fx.jitter())
        if delay is not None:
            self._restart_due[model_name] = self.fx.clock.monotonic() + delay
        elif model.config.restart == "on-failure":
            _log.error("restart_gave_up", model=model_name, crashes=model.crash_count)

    # --- start-up and shut-down ---------------------------------------------------------

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
        self._poke()
        live: list[tuple[str, Instance]] = []

        def decide(state: RouterState) -> list[NewEvent]:
            live[:] = [(m.name, m.instance) for m in state.models.values() if m.instance is not None]
            return [NewEvent(e, model=name) for name, inst in live for e in lifecycle.stop(inst, "shutdown")]

        async with self._lock:
            self._demands.clear()
            await self.live.decide(decide)
        await asyncio.gather(*(self._stop_process(inst.instance_id) for _, inst in live), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
