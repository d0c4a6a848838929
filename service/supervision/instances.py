"""Inference instances: facts in, a core decision, the interpreter carries it out.

The decisions (load, acquire, unload, timers, exits, hangs, who gets a slot) are
pure functions in :mod:`service.core.instance_decisions` (hangs:
:mod:`service.core.instance_hangs`) over the fold, the demand queue (a frozen
value, :mod:`service.core.demand_queue`) and what only this class observes:
requests in flight (``busy``), worker processes not reaped yet, the workers'
heartbeats, the clock. Each decision goes through the one interpreter
(:mod:`service.supervision.interpreter`): its events are appended, then its
effects performed by the performers registered here (edit the queue, fetch a
model's files first, cut a hung worker's requests) and by the worker processes'
(:mod:`service.supervision.instance_processes`: spawn, stop, sleep, kill, arm a restart).
The instance ids and ports a plan may start with are drawn before it is taken.

Locking: one ``asyncio.Lock`` serialises decide -> append. It is never held
while waiting for a slot, a process or a readiness: requests wait for state
changes outside it, and stops and spawns run as their own tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import structlog

from service.core import events as ev
from service.core import fair_queue, memory, scheduling
from service.core import instance_decisions as decide
from service.core.decision import Decision
from service.core.demand_queue import Cleared, Held, Left, Queue, QueueEdit, Waiting, edit
from service.core.errors import CommandRejected
from service.core.server_mode import ROUTER, ServerMode
from service.core.state import Instance, ModelState, RouterState
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.fair_gate import FairGate
from service.supervision.hang_watch import HangWatch
from service.supervision.instance_processes import InstanceProcesses
from service.supervision.interpreter import Interpreter
from service.supervision.leases import Lease
from service.supervision.measure import Measurer, memory_budget
from service.supervision.on_demand import OnDemandFiles
from service.supervision.prompt_cache import PromptCacheFiles
from service.supervision.sleep import SleepSnapshots
from service.supervision.surroundings import Surroundings

_log = structlog.get_logger(__name__)
_WAKE_TYPES = frozenset(
    {
        "instance_requested",
        "instance_loading",
        "loading_progress",
        "instance_ready",
        "instance_load_failed",
        "instance_stop_requested",
        "instance_stopped",
        "instance_crashed",
        "instance_lost",
        "request_completed",
        "model_removed",
        "model_discovered",
        "download_finished",
        "model_configured",
    }
)
_SLOT_CACHE = 256  # instances whose slot count is kept
_TICK_SECONDS = 1.0  # timers (load deadline, idle TTL, restarts) are checked at least this often


class InstanceSupervisor:
    """Owns the inference worker processes; its in-memory facts are ``busy`` and the demand queue."""

    def __init__(
        self,
        settings: Settings,
        live: LiveState,
        surroundings: Surroundings | None = None,
        *,
        interpreter: Interpreter | None = None,
        files: OnDemandFiles | None = None,
        snapshots: SleepSnapshots | None = None,
    ) -> None:
        self.settings = settings
        self.live = live
        self.fx = surroundings or Surroundings()
        self.fake_timing = settings.fake_timing  # start-up turns it off in single-model mode (server_mode)
        self.mode: ServerMode = ROUTER  # start-up sets it once -m / -hf resolved, before any load
        self.busy: dict[str, int] = {}
        self.queue = Queue()
        self.gate = FairGate(settings.max_queued_requests, settings.queue_timeout, lambda: self.queue.waiters)
        self._slots: dict[str, int] = {}  # instance id -> its worker's slots (the fair gate's capacity)
        self._lock = asyncio.Lock()
        self._change = asyncio.Event()
        self.shutting_down = False
        self._limits = decide.Limits(
            models_max=settings.models_max,
            queue_timeout=settings.queue_timeout,
            max_queued_requests=settings.max_queued_requests,
            load_timeout=settings.load_timeout,
        )
        self.files = files
        self.snapshots = snapshots  # what sleeping models' workers answered last (/props, /metrics)
        self.interpreter = interpreter or Interpreter(live)
        self._processes = InstanceProcesses(
            settings, live, self.interpreter, self.fx, self._lock, self, self._poke, snapshots
        )
        self._register(self.interpreter)
        auth = self.fx.worker_keys  # the heartbeats' own client sends each worker its secret too
        self.hangs = HangWatch(settings, live, self.interpreter, self._facts, self.fx.clock, self.fx.heartbeat, auth)
        live.add_listener(self.fx.worker_keys.on_event)  # where each of our workers listens
        self._measurer, self.memory = Measurer(live, self.interpreter, settings.node), memory_budget(settings)
        live.add_listener(self._on_event)

    @property
    def prompt_cache(self) -> PromptCacheFiles:
        """The saved prompt caches' files: the total budget, a removed model's (issue 35)."""
        return self._processes.prompt_cache

    def _register(self, it: Interpreter) -> None:
        it.register(QueueEdit, self._edit_queue)
        self._processes.register(it)
        it.register(decide.Warn, lambda e: _log.warning(e.event, **e.fields))
        it.register(decide.FetchFiles, self._fetch_files)

    # --- change notification ---------------------------------------------------

    def _on_event(self, recorded: ev.Recorded, _state: RouterState) -> None:
        if recorded.type in _WAKE_TYPES:
            self._poke()

    def _poke(self) -> None:
        change, self._change = self._change, asyncio.Event()
        change.set()

    async def _wait_change(self, change: asyncio.Event, timeout: float) -> None:
        with suppress(TimeoutError):  # not wait_for: on 3.11 it loses a cancel as the event is set
            async with asyncio.timeout(max(timeout, 0.0)):
                await change.wait()

    def _edit_queue(self, change: QueueEdit) -> None:
        self.queue = edit(self.queue, change)
        self._poke()

    # --- facts for the decisions -------------------------------------------------

    def _facts(self) -> decide.Facts:
        clock = self.fx.clock
        return decide.Facts(
            limits=self._limits,
            now=clock.now(),
            mono=clock.monotonic(),
            busy=dict(self.busy),
            processes=self._processes.active(),
            memory=self.memory,
            node=self.settings.node,
        )

    def _drawn(self, decision: Callable[[decide.Drawn], Decision[Any]]) -> decide.Drawn:
        """The ids and ports ``decision`` starts instances with, drawn before it is taken: as many as
        it takes over stand-ins on the current state (none when it refuses)."""
        try:
            ids, ports = decide.to_draw(decision(decide.Drawn.enough_for(self.queue)))
        except CommandRejected:
            return decide.Drawn()
        return decide.Drawn(
            tuple(self.fx.new_id() for _ in range(ids)), tuple(self.fx.free_port() for _ in range(ports))
        )

    def new_id(self) -> str:
        """An id for a new incarnation of this node (``node_joined``)."""
        return self.fx.new_id()

    def free_port(self) -> int:
        """A port for a worker another node placed here without one (it cannot draw this node's)."""
        return self.fx.free_port()

    @property
    def restarts_pending(self) -> dict[str, float]:
        """Crashed models waiting for their backoff: model -> monotonic due time."""
        return dict(self.queue.restart_due)

    @property
    def queue_length(self) -> int:
        """Requests waiting for a model to be ready (loading or waiting for a slot), or for their
        fair turn at its worker's slots (named keys: :mod:`service.supervision.fair_gate`)."""
        return self.queue.waiters + self.gate.waiting

    # --- commands -------------------------------------------------------------------

    async def load(self, name: str, *, reason: str = "load") -> ModelState:
        """Start loading ``name`` unless it runs; returns at once (readiness arrives as events).
        A model whose files come from the Hub on first use is downloaded first, then loaded."""
        await self._measurer.ensure_draft(name)  # before the files are judged: a deleted draft comes again
        if self._needs_files(name):
            await self._fetch_then(name, reason)
            return self.live.state.models[self._resolved(name)]
        await self._measurer.ensure(name)  # its memory need, before it is placed
        async with self._lock:
            drawn = self._drawn(
                lambda d: decide.decide_load(self.live.state, self.queue, name, reason, self._facts(), d)
            )
            applied = await self.interpreter.apply(
                lambda s: decide.decide_load(s, self.queue, name, reason, self._facts(), drawn)
            )
        return applied.state.models[applied.answer]

    async def unload(self, name: str, *, reason: str = "unload") -> None:
        """``-> stopping``, then wait until the worker is gone (stdin line, SIGTERM,
        SIGKILL after ``stop_timeout``)."""
        async with self._lock:
            applied = await self.interpreter.apply(
                lambda s: decide.decide_unload(s, self.queue, name, reason, self.settings.node)
            )
        await applied.settled()

    @asynccontextmanager
    async def holding(self, name: str) -> AsyncIterator[None]:
        """Keep ``name`` from starting while it is being removed: waiting requests
        fail with 409, new ones too, until the block exits."""
        async with self._lock:  # a pass that is deciding now finishes first; later ones see the hold
            self.interpreter.perform([Held(name)])
        try:
            yield
        finally:
            self.interpreter.perform([Held(name, on=False)])

    # --- requests -------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, name: str, *, autoload: bool) -> AsyncIterator[tuple[str, str]]:
        """Hold the model loaded while a request runs: yields ``(model, endpoint)``.
        Loads it first when ``autoload`` allows, waiting in arrival order for a slot."""
        held = await self.acquire(name, autoload=autoload)
        try:
            yield held.model, held.endpoint
        finally:
            held.release()

    async def acquire(self, name: str, *, autoload: bool, key: str | None = None) -> Lease:
        """Wait for ``name`` to be ready (autoloading it, and downloading its files first, when
        ``autoload`` allows) and hold it; the caller must :meth:`Lease.release` it. ``key``: the
        caller of a request that runs the model (:func:`service.core.fair_queue.gated`), which then
        also waits its fair turn at one of the worker's slots, released with the lease."""
        await self._measurer.ensure_draft(name)
        if autoload and self._needs_files(name):
            await self._fetch_then(name, None)
            assert self.files is not None
            await self.files.ready(self._resolved(name))
        await self._measurer.ensure(name)
        deadline = self.fx.clock.monotonic() + self.settings.queue_timeout
        model, endpoint, node = await self._wait_ready(name, autoload, deadline)
        held = Lease(model, endpoint, self._release, node=node)
        self.hangs.leases.add(held)
        try:
            if key is not None:
                await self._fair_turn(held, key, deadline)
            if self.fake_timing:
                await self.fx.clock.sleep(2.0)  # llama.cpp's LLAMA_SERVER_DEBUG_FAKE_TIMING: busy, not yet proxied
        except BaseException:
            held.release()  # a client that left meanwhile does not keep the model busy
            raise
        return held

    async def _fair_turn(self, held: Lease, key: str, deadline: float) -> None:
        """Wait for ``key``'s turn at one of the model's slots (its worker's ``n_parallel``)."""
        state = self.live.state
        found = state.models.get(held.model)
        inst = found.instance if found is not None else None  # the lease holds it: not stopped meanwhile
        capacity = self._slots_of(inst) if inst is not None else 1
        priority = fair_queue.priority_of(state.keys, key)
        remaining = deadline - self.fx.clock.monotonic()
        await self.gate.enter(held, held.model, key, priority, capacity, remaining)

    def _slots_of(self, inst: Instance) -> int:
        """An instance's slots, read from its launch once (parsing it costs ~30 us a request)."""
        found = self._slots.get(inst.instance_id)
        if found is None:
            if len(self._slots) >= _SLOT_CACHE:
                self._slots.clear()  # ids of gone instances: never asked again
            found = self._slots[inst.instance_id] = memory.slots(inst.params)
        return found

    async def _wait_ready(self, name: str, autoload: bool, deadline: float) -> tuple[str, str, str | None]:
        mine: Waiting | None = None
        try:
            while True:
                change = self._change
                if mine is not None:
                    mine = self.queue.entry(mine.serial) or mine
                facts = self._facts()
                made = decide.decide_acquire(
                    self.live.state, self.queue, name, autoload=autoload, mine=mine, facts=facts, deadline=deadline
                )
                answer = made.answer
                if isinstance(answer, decide.Acquired):
                    # Counted busy in the same step as the check: no eviction can come between.
                    self.busy[answer.model] = self.busy.get(answer.model, 0) + 1
                    return answer.model, answer.endpoint, answer.node
                self.interpreter.perform(made.effects)  # joins the model's entry: no append, no await
                if mine is None:
                    mine = self.queue.get(answer.model)
                remaining = deadline - self.fx.clock.monotonic()
                await self._wait_change(change, min(max(remaining, 0.0), _TICK_SECONDS))
        finally:
            if mine is not None:
                self.interpreter.perform([Left(mine.serial)])

    def _release(self, lease: Lease) -> None:
        self.hangs.leases.discard(lease)
        self.gate.release(lease)
        model = lease.model
        self.busy[model] -= 1
        if self.busy[model] <= 0:
            self.busy.pop(model, None)
            self._poke()

    # --- models whose files come on first use ------------------------------------------

    def _needs_files(self, name: str) -> bool:
        return self.files is not None and scheduling.needs_files(self.live.state.resolve(name), self.live.state)

    def _resolved(self, name: str) -> str:
        found = self.live.state.resolve(name)
        return found.name if found is not None else name

    async def _fetch_then(self, name: str, reason: str | None) -> None:
        """Start (or join) the download of a model's hf-repo; with a ``reason``, load it once it is there."""
        applied = await self.interpreter.apply(lambda s: decide.decide_fetch(s, name, reason))
        for task in applied.tasks:
            await task  # a refusal (offline, not on the Hub) reaches the caller

    def _fetch_files(self, effect: decide.FetchFiles) -> Any:
        assert self.files is not None
        return self.files.fetch(effect, self.load, lambda s: decide.slot_facts(s, self._facts()))

    # --- the planning pass ----------------------------------------------------------

    async def tick(self) -> None:
        """One pass over the timers (load deadlines, idle TTL, restarts, stale
        demands) and the demand queue. The run loop calls it on every change."""
        async with self._lock:
            await self.interpreter.apply(lambda s: decide.decide_timers(s, self.queue, self._facts()))
            drawn = self._drawn(lambda d: decide.decide_plan(self.live.state, self.queue, self._facts(), d))
            await self.interpreter.apply(lambda s: decide.decide_plan(s, self.queue, self._facts(), drawn))
            await self.hangs.check()

    async def run(self) -> None:
        """Call :meth:`tick` on every change, and every second while a timer may be running; with
        none (``decide.timers_running``), an idle service sleeps until something changes."""
        while not self.shutting_down:
            change = self._change
            try:
                await self.tick()
            except Exception:
                _log.exception("instance_tick_failed")
            if decide.timers_running(self.live.state, self.queue, self._facts()):
                await self._wait_change(change, _TICK_SECONDS)
            else:
                await change.wait()

    # --- start-up and shut-down ---------------------------------------------------------

    async def load_on_startup(self) -> list[str]:
        """Load every model configured with ``load_on_startup`` (those without files downloaded first),
        once the saved prompt caches fit the total budget (the last shutdown's saves, a budget lowered)."""
        await self.prompt_cache.apply_budget()
        started = []
        for model in list(self.live.state.models.values()):
            wanted = model.available or self._needs_files(model.name)
            if model.config.load_on_startup and wanted and model.instance is None:
                with suppress(CommandRejected):
                    await self.load(model.name, reason="startup")
                    started.append(model.name)
        return started

    async def shutdown(self) -> None:
        """Stop every worker (reason ``shutdown``) and wait for them."""
        self.shutting_down = True
        self._poke()
        await self.hangs.close()
        if self.files is not None:
            await self.files.close()
        async with self._lock:
            self.interpreter.perform([Cleared()])
            applied = await self.interpreter.apply(lambda s: decide.decide_shutdown(s, self.settings.node))
        await applied.settled()
