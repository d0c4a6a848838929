"""The one interpreter: a decision's events are appended, then its effects performed, in that order.

As Supervisor's ``change_state`` is the one place a process's lifecycle
events are emitted, :meth:`Interpreter.apply` is the one place the service
writes what it decided (the workers append their own facts). It runs a core
decision over the fold through ``LiveState.decide`` (optimistic concurrency:
the decision runs again on a newer state when the log moved under it),
appends its events, and only then hands each effect to the performer
registered for its type: an effect never runs for a decision that did not
land. :meth:`Interpreter.record` is the same path for a plain fact with no
decision behind it (start-up's recovery records, removed files, a node joining);
:meth:`Interpreter.record_later` and :meth:`Interpreter.record_unread` append
facts nothing reads back without waiting for the tail (a finished request, a
stopping router). Nothing else in the service appends (tests/test_architecture.py
checks it): the workers and ``modelrouter gc`` append their own facts, as other
processes.

Performers are registered by the supervisors that own the outside world of
each effect (processes, timers, the demand queue); a performer that returns an
awaitable runs as a task, which :meth:`apply` hands back to callers that must
wait for it (an unload waits for the worker to be gone).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from service.core.decision import Append, Decision, Effect
from service.core.state import RouterState
from service.event_store.codec import from_append
from service.event_store.live_state import LiveState
from service.event_store.rows import FULL_RETRY_CAP_S, FULL_RETRY_FIRST_S, LogDiskFull

A = TypeVar("A")
E = TypeVar("E", bound=Effect)
Performer = Callable[[Any], Awaitable[Any] | None]
_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Applied(Generic[A]):
    """A decision that landed: its answer, the state after its events, the tasks its effects started."""

    answer: A
    state: RouterState
    tasks: tuple[asyncio.Task[Any], ...] = field(default=())

    async def settled(self) -> A:
        """The answer once every task the effects started has finished."""
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        return self.answer


class Interpreter:
    """Appends decisions' events through the live state, then performs their effects."""

    def __init__(self, live: LiveState) -> None:
        self.live = live
        self._performers: dict[type[Effect], Performer] = {}
        self.background: set[asyncio.Task[Any]] = set()

    def register(self, kind: type[E], performer: Callable[[E], Awaitable[Any] | None]) -> None:
        """Perform every effect of ``kind`` (or of a subclass without its own performer) with ``performer``."""
        self._performers[kind] = performer

    async def apply(self, decide: Callable[[RouterState], Decision[A]]) -> Applied[A]:
        """Decide over the current fold, append, then perform; raises what the decision raises."""
        decision, state = await self.live.decide(decide)
        return Applied(decision.answer, state, self.perform(decision.effects))

    async def apply_durably(
        self,
        decide: Callable[[RouterState], Decision[A]],
        lock: asyncio.Lock,
        give_up: Callable[[], bool],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> Applied[A]:
        """:meth:`apply` under ``lock`` for a decision whose events must not be lost (what became of a
        worker that exited): while the log's disk refuses appends, decide again over the newest fold and
        retry, 0.25 s apart, doubling up to 5 s, as the workers retry their own lifecycle events. The
        lock is let go between tries, so other decisions meet the full disk themselves (a 507) rather
        than wait behind this one. Raises ``LogDiskFull`` once ``give_up()`` (a shut-down: the next
        start's recovery records what is left)."""
        delay = FULL_RETRY_FIRST_S
        while True:
            try:
                async with lock:
                    return await self.apply(decide)
            except LogDiskFull as exc:
                if give_up():
                    raise
                _log.warning("decision_not_recorded_yet", retry_in_s=delay, error=str(exc))
                await sleep(delay)
                delay = min(delay * 2, FULL_RETRY_CAP_S)

    def perform(self, effects: Sequence[Effect]) -> tuple[asyncio.Task[Any], ...]:
        """Hand each effect to its performer, in order; returns the tasks started."""
        tasks = []
        for effect in effects:
            result = self._performer(type(effect))(effect)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                task.set_name(f"effect-{type(effect).__name__}")
                self.background.add(task)
                task.add_done_callback(self._done)
                tasks.append(task)
        return tuple(tasks)

    async def record(self, appends: Sequence[Append]) -> RouterState:
        """Append facts that no decision weighs (a finished request, removed files); the state after."""
        _, state = await self.live.record([from_append(a) for a in appends])
        return state

    def record_later(self, appends: Sequence[Append]) -> None:
        """:meth:`record_unread` off the caller's path (a response must not wait for this fsync)."""
        task = asyncio.ensure_future(self.record_unread(appends))
        self.background.add(task)
        task.add_done_callback(self._done)

    async def record_unread(self, appends: Sequence[Append]) -> None:
        """Append facts nothing reads back without waiting for the tail, even while it is down (the
        shutdown's last events must be recorded then too)."""
        await self.live.commit([from_append(a) for a in appends])

    def _performer(self, kind: type[Effect]) -> Performer:
        for klass in kind.__mro__:
            found = self._performers.get(klass)
            if found is not None:
                return found
        msg = f"no performer for {kind.__name__}"
        raise LookupError(msg)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("effect_failed", task=task.get_name(), error=repr(task.exception()))

    async def close(self) -> None:
        """Cancel what effects still run (shut-down)."""
        for task in list(self.background):
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
