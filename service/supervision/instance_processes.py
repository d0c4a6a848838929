"""The inference workers of the instances decided: spawned, stopped, put to sleep, killed, reaped.

The performers of :mod:`service.core.instance_effects`' effects. What to do at
each step (spawn still, kill at once, how to tell a worker to stop) is decided
there over the fold of the moment; what became of a worker that exits, a spawn
that failed or a stop that found no process is decided in the core
(:mod:`service.core.instance_exits`) and appended through the interpreter, under
the instance supervisor's lock (one decide -> append at a time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import structlog

from service.core import cluster, prompt_cache
from service.core import events as ev
from service.core import instance_effects as effects
from service.core import instance_exits as exits
from service.core.model_spec import projector_path
from service.core.processes import ProcessExit
from service.core.server_mode import ServerMode, served_name
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.interpreter import Interpreter
from service.supervision.prompt_cache import PromptCacheFiles
from service.supervision.sleep import SleepSnapshots
from service.supervision.surroundings import Surroundings
from service.supervision.worker_args import inference_argv, store_env
from service.supervision.worker_pool import WorkerPool

_log = structlog.get_logger(__name__)


class Overseer(Protocol):
    """What the workers read of their supervisor as they act (start-up and shut-down change it)."""

    fake_timing: bool  # llama.cpp's LLAMA_SERVER_DEBUG_FAKE_TIMING: a slow load
    mode: ServerMode  # single-model mode: the one model answers under its --alias (served_name)
    shutting_down: bool  # no restart is armed, and an exit's record gives up on a full disk
    busy: dict[str, int]  # requests in flight per model: a crash counts them


class InstanceProcesses:
    """The worker process of each instance, by instance id, until it is reaped."""

    def __init__(
        self,
        settings: Settings,
        live: LiveState,
        interpreter: Interpreter,
        fx: Surroundings,
        lock: asyncio.Lock,
        overseer: Overseer,
        on_reaped: Callable[[], None],
        snapshots: SleepSnapshots | None = None,
    ) -> None:
        self.settings = settings
        self.live = live
        self.interpreter = interpreter
        self.fx = fx
        self._lock = lock  # the supervisor's: one decide -> append at a time
        self._overseer = overseer
        self._on_reaped = on_reaped  # a reaped worker frees its slot
        self.snapshots = snapshots
        self._models: dict[str, str] = {}  # instance id -> model, while its process lives
        self._pool = WorkerPool(fx.spawn, self._on_exit)
        self.prompt_cache = PromptCacheFiles(settings, live, interpreter)  # the total budget, a removed model's

    def register(self, it: Interpreter) -> None:
        it.register(effects.Spawn, lambda e: self._start(e.model, e.request))
        it.register(effects.Stop, lambda e: self._stop(e.instance_id))
        it.register(effects.Sleep, self._sleep)
        it.register(effects.Kill, lambda e: self._pool.kill(e.instance_id))
        it.register(cluster.AbandonEnded, lambda _: self._pool.abandon(cluster.ended(self.live.state, self._models)))
        it.register(exits.ArmRestart, self._arm_restart)

    def active(self) -> frozenset[str]:
        """Instance ids whose worker is spawning or not reaped yet."""
        return frozenset(self._pool.active())

    async def _start(self, model_name: str, request: ev.InstanceRequested) -> None:
        if self._overseer.fake_timing:
            await self.fx.clock.sleep(2.0)  # llama.cpp's LLAMA_SERVER_DEBUG_FAKE_TIMING: a slow load
        model = self.live.state.models[model_name]
        if not effects.spawn_wanted(self.live.state, model_name, request.instance_id):
            return  # stopped before it was spawned: _stop records the end
        assert model.path is not None  # loadable() was checked when the slot was given
        argv = inference_argv(
            self.settings,
            model_name,
            model.path,
            request.instance_id,
            request.port,
            request.launch,  # with -hfd, the draft's file on this node as -md (core.draft_source.draft_params)
            mmproj=projector_path(model.files),
            alias=served_name(self._overseer.mode, model_name),
            model_sha256=prompt_cache.model_sha256(model),
        )
        self._models[request.instance_id] = model_name
        key = self.fx.worker_keys.issue(request.instance_id)  # in its environment: never on its command line
        try:
            await self._pool.spawn(
                request.instance_id,
                argv,
                name=f"inference:{model_name}:{request.instance_id}",
                env=self.settings.worker_environment(**store_env(self.settings), **key),
            )
        except OSError as exc:
            self._models.pop(request.instance_id, None)
            self.fx.worker_keys.forget(request.instance_id)
            message = str(exc)
            async with self._lock:
                await self.interpreter.apply(
                    lambda s: exits.decide_spawn_failed(s, model_name, request.instance_id, message)
                )
            return
        if effects.kill_spawned(self.live.state, model_name, request.instance_id):
            self._pool.kill(request.instance_id)  # its load deadline passed while it was spawning

    async def _stop(self, instance_id: str) -> None:
        order = effects.stop_order(
            self.live.state, instance_id, self.settings.stop_timeout, self.settings.cache_disk_max
        )
        stopped = await self._pool.stop(instance_id, order.line, grace=order.grace, timeout=order.timeout)
        if not stopped and instance_id not in self._models:
            await self.live.sync()
            async with self._lock:
                await self.interpreter.apply(lambda s: exits.decide_closed(s, instance_id))

    async def _sleep(self, effect: effects.Sleep) -> None:
        if self.snapshots is not None:
            await self.snapshots.take(effect.model, effect.endpoint)  # before it stops: served while it sleeps
        await self._stop(effect.instance_id)

    async def _on_exit(self, instance_id: str, exit_: ProcessExit) -> None:
        model = self._models.pop(instance_id, None)
        self.fx.worker_keys.forget(instance_id)
        self._on_reaped()
        if model is None:
            return
        await self.live.sync()  # fold what the worker recorded before it exited
        applied = await self.interpreter.apply_durably(
            lambda s: exits.decide_exit(s, model, instance_id, exit_, self._overseer.busy.get(model, 0)),
            self._lock,
            give_up=lambda: self._overseer.shutting_down,
        )
        if applied.answer:
            error = applied.state.models[model].last_error
            _log.warning("instance_crashed", model=model, instance_id=instance_id, reason=error and error.message)
        if not self._overseer.shutting_down:  # a shutdown's saves are budgeted at the next start
            await self.prompt_cache.apply_budget()  # its saves are folded (above): the total budget applies now

    def _arm_restart(self, effect: exits.ArmRestart) -> None:
        if self._overseer.shutting_down:
            return
        self.interpreter.perform(
            exits.restart_timer(self.live.state, effect.model, self.fx.jitter(), self.fx.clock.monotonic())
        )
