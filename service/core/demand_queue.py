"""The demand queue: requests and loads waiting for a model, as one frozen value.

The fold knows which instances exist; only the instance supervisor knows who
waits for a model that is not ready (one entry per model, in arrival order),
which models are held while being removed, and which crashed models wait for
their restart backoff. That knowledge is this value. Decisions never mutate
it: they return edits (:class:`QueueEdit` effects) that the interpreter folds
into the *current* queue with :func:`edit`, so an edit decided before an await
never overwrites a waiter that joined during it.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from service.core.decision import Effect
from service.core.scheduling import Demand as SlotDemand


@dataclass(frozen=True, slots=True)
class Waiting:
    """Requests or a load waiting for one model. ``serial`` tells this entry from a later one for the
    same model; ``started``: the instance started for it (it then only waits for readiness)."""

    model: str
    reason: str
    created: float  # monotonic seconds
    serial: int
    waiters: int = 0
    explicit: bool = False  # a POST /models/load, start-up or restart: kept without waiters
    autoload: bool = False  # some waiter (or the explicit load) may start the model
    started: str | None = None


@dataclass(frozen=True, slots=True)
class Queue:
    """The supervisor's facts about waiting, as a value."""

    demands: tuple[Waiting, ...] = ()  # arrival order, one per model
    holds: frozenset[str] = frozenset()
    restart_due: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # model -> monotonic
    next_serial: int = 1

    def get(self, model: str) -> Waiting | None:
        """The entry waiting for ``model``, if any."""
        return next((d for d in self.demands if d.model == model), None)

    def entry(self, serial: int) -> Waiting | None:
        """The entry with ``serial``, if it is still queued."""
        return next((d for d in self.demands if d.serial == serial), None)

    @property
    def waiters(self) -> int:
        """Requests waiting for a model to be ready (loading or waiting for a slot)."""
        return sum(d.waiters for d in self.demands)

    def pending(self) -> list[SlotDemand]:
        """The entries :func:`service.core.scheduling.plan_slots` plans for: held models excluded."""
        return [
            SlotDemand(d.model, d.reason, d.started, start=d.autoload or d.explicit)
            for d in self.demands
            if d.model not in self.holds
        ]


class QueueEdit(Effect):
    """An effect on the demand queue (performed by folding it in with :func:`edit`)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Demanded(QueueEdit):
    """A load (``explicit``) or a request (``waiter``) wants ``model``: its entry is created or joined."""

    model: str
    reason: str
    created: float
    explicit: bool = False
    waiter: bool = False
    autoload: bool = False


@dataclass(frozen=True, slots=True)
class Left(QueueEdit):
    """A waiter of entry ``serial`` left (served, refused or gone); an entry nobody waits for is dropped
    unless it is explicit."""

    serial: int


@dataclass(frozen=True, slots=True)
class Started(QueueEdit):
    """The instance ``instance_id`` was started for ``model``'s entry."""

    model: str
    instance_id: str


@dataclass(frozen=True, slots=True)
class Dropped(QueueEdit):
    """``model``'s entry needs nothing more (or is abandoned)."""

    model: str


@dataclass(frozen=True, slots=True)
class Held(QueueEdit):
    """``model`` is being removed (``on``) or no longer (``on=False``): held models start nothing."""

    model: str
    on: bool = True


@dataclass(frozen=True, slots=True)
class RestartArmed(QueueEdit):
    """``model`` restarts at monotonic time ``due`` (None: the timer is cleared)."""

    model: str
    due: float | None


@dataclass(frozen=True, slots=True)
class Cleared(QueueEdit):
    """Every entry goes (shut-down); holds and timers too."""


def edit(queue: Queue, change: QueueEdit) -> Queue:
    """``queue`` with ``change`` applied (a change that no longer applies changes nothing)."""
    match change:
        case Demanded():
            return _demanded(queue, change)
        case Left(serial=serial):
            return _left(queue, serial)
        case Started(model=model, instance_id=iid):
            return _replace_entry(queue, model, lambda d: replace(d, started=iid))
        case Dropped(model=model):
            return replace(queue, demands=tuple(d for d in queue.demands if d.model != model))
        case Held(model=model, on=on):
            holds = queue.holds | {model} if on else queue.holds - {model}
            demands = tuple(d for d in queue.demands if d.model != model) if on else queue.demands
            return replace(queue, holds=holds, demands=demands)
        case RestartArmed(model=model, due=due):
            timers = {k: v for k, v in queue.restart_due.items() if k != model}
            if due is not None:
                timers[model] = due
            return replace(queue, restart_due=MappingProxyType(timers))
        case Cleared():
            return Queue(next_serial=queue.next_serial)
    msg = f"not a queue edit: {change!r}"
    raise TypeError(msg)


def _demanded(queue: Queue, change: Demanded) -> Queue:
    current = queue.get(change.model)
    if current is None:
        current = Waiting(change.model, change.reason, change.created, serial=queue.next_serial)
        queue = replace(queue, demands=(*queue.demands, current), next_serial=queue.next_serial + 1)

    def joined(d: Waiting) -> Waiting:
        if change.explicit:  # a new attempt, even if an earlier one for it failed
            d = replace(d, explicit=True, started=None)
        if change.waiter:
            d = replace(d, waiters=d.waiters + 1, autoload=d.autoload or change.autoload)
        return d

    return _replace_entry(queue, change.model, joined)


def _left(queue: Queue, serial: int) -> Queue:
    entry = queue.entry(serial)
    if entry is None:
        return queue
    if entry.waiters <= 1 and not entry.explicit:
        # A client that gave up leaves no demand behind: it costs nobody a slot.
        return replace(queue, demands=tuple(d for d in queue.demands if d.serial != serial))
    return _replace_entry(queue, entry.model, lambda d: replace(d, waiters=max(0, d.waiters - 1)))


def _replace_entry(queue: Queue, model: str, change: Callable[[Waiting], Waiting]) -> Queue:
    return replace(queue, demands=tuple(change(d) if d.model == model else d for d in queue.demands))
