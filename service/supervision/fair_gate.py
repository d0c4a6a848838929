"""The fair queues' waiting (issue 34): requests that hold a ready model wait here for their turn
at one of its worker's slots, as :mod:`service.core.fair_queue` decides.

Each waiter awaits a future; a decision (a request arrives, one inside ends, one leaves) answers
the tickets let in, and their futures are set in the same step, so no slot is ever free while
someone waits. A waiter that is cancelled (its client hung up) or runs out of time
(``MODELROUTER_QUEUE_TIMEOUT``: the 503 ``capacity`` answer) leaves the queue; if it was let in
in the same step, its slot goes straight to the next. ``MODELROUTER_MAX_QUEUED_REQUESTS`` counts
these waiters with those waiting for a model to load.

Only requests with named keys come here (anonymous and full-key traffic never does); one that finds a
free slot and nobody waiting costs about 8 us to enter and release on the project's 2-core VM (20k
in a row), no future made.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Hashable

from service.core import fair_queue as fq
from service.core.errors import CommandRejected


class FairGate:
    """The gates of the models requests are served from, by model; one holder (a lease) per request."""

    def __init__(self, max_queued: int, queue_timeout: float, waiting_elsewhere: Callable[[], int]) -> None:
        self._max_queued = max_queued  # 0: no limit
        self._queue_timeout = queue_timeout  # for the refusal's words only: the caller gives the time left
        self._waiting_elsewhere = waiting_elsewhere  # requests waiting for a model to be ready
        self._gates: dict[str, fq.Gate] = {}
        self._tickets = itertools.count(1)
        self._turns: dict[int, asyncio.Future[None]] = {}
        self._inside: dict[Hashable, str] = {}  # holder -> its model, while it holds a slot

    @property
    def waiting(self) -> int:
        """Requests waiting for their turn at a slot, on every model."""
        return sum(len(gate.queue) for gate in self._gates.values())

    def running(self, model: str) -> int:
        """Requests let in to ``model``'s worker now (by this gate)."""
        gate = self._gates.get(model)
        return gate.running if gate is not None else 0

    async def enter(self, holder: Hashable, model: str, key: str, priority: int, capacity: int, timeout: float) -> None:
        """Wait until ``holder``'s request may go into ``model``'s worker (``capacity`` slots), at
        most ``timeout`` seconds; :meth:`release` it when the request ends. Raises
        :class:`CommandRejected` (``capacity``) when the queue is full or the time runs out."""
        ticket = next(self._tickets)
        gate, admitted = fq.arrive(self._gates.get(model, fq.Gate()), fq.Waiter(ticket, key, priority), capacity)
        if ticket in admitted:  # a free slot and nobody before it: no future, no wait
            self._settle(model, gate, tuple(t for t in admitted if t != ticket))
            self._inside[holder] = model
            return
        limit = self._max_queued
        if limit and self.waiting + self._waiting_elsewhere() >= limit:
            self._settle(model, fq.depart(gate, ticket), admitted)
            waiting = self.waiting + self._waiting_elsewhere()
            raise CommandRejected(
                "capacity", f"{waiting} requests already wait for a model (max_queued_requests={limit})"
            )
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._turns[ticket] = turn
        self._settle(model, gate, admitted)
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await asyncio.shield(turn)
        except BaseException as exc:
            self._turns.pop(ticket, None)
            if turn.done():  # let in in the same step it gave up: pass the slot on
                self._settle(model, *fq.finish(self._gates[model]))
            else:
                self._settle(model, fq.depart(self._gates[model], ticket), ())
            if isinstance(exc, TimeoutError):
                raise self._timed_out(model, capacity) from None
            raise
        self._inside[holder] = model

    def release(self, holder: Hashable) -> None:
        """``holder``'s request ended: its slot goes to the next waiter (a holder never let in: nothing)."""
        model = self._inside.pop(holder, None)
        if model is not None:
            self._settle(model, *fq.finish(self._gates[model]))

    def _settle(self, model: str, gate: fq.Gate, admitted: tuple[int, ...]) -> None:
        """Keep ``gate`` (dropped once idle: a model nobody uses costs nothing, and its turns restart)
        and wake the tickets it let in."""
        if gate.idle:
            self._gates.pop(model, None)
        else:
            self._gates[model] = gate
        for ticket in admitted:
            turn = self._turns.pop(ticket, None)
            if turn is not None and not turn.done():
                turn.set_result(None)

    def _timed_out(self, model: str, capacity: int) -> CommandRejected:
        waiting = len(self._gates[model].queue) if model in self._gates else 0
        return CommandRejected(
            "capacity",
            f"no slot for model {model!r} within {self._queue_timeout:g} s "
            f"(its {capacity} slot(s) busy, {waiting} more requests wait their turn)",
        )
