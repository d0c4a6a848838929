"""Fair queues (issue 34): who goes next into a model's worker when named keys share it.

Without named keys the router lets every request through to the worker once its model is ready,
and the worker queues what its slots cannot take, in arrival order (llama-server's and llama.cpp's
router's rules). With named keys, one key's batch would then delay everyone else's requests by its
whole length. So the router admits at most the model's slot count at once (:class:`Gate`), and the
rest wait in a :class:`FairQueue`:

- a higher ``priority`` (the key's scope) goes first;
- among equal priorities, round-robin across keys: the key served least recently goes next (a key
  never served yet first; ties by its oldest waiter), so a key's 500 requests and another's one
  take turns;
- first in, first out within a key.

:data:`~service.core.keys.FULL` and :data:`~service.core.keys.ANONYMOUS` count as keys of their own.
Values are frozen; each function returns a new one. Pure: stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from service.core.keys import INFERENCE, NamedKey, endpoint_class

_NO_SLOT_PATHS = frozenset({"/tokenize", "/detokenize", "/apply-template", "/v1/messages/count_tokens"})
"""Inference routes the worker answers without a slot (they read the vocabulary or the template)."""


def gated(keys: Mapping[str, NamedKey], method: str, path: str) -> bool:
    """Whether a request waits its fair turn for a slot: only once named keys exist (anonymous and
    full-key traffic keeps the worker's arrival order exactly), and only a ``POST`` that runs the
    model (chat, completions, embeddings, rerank, Anthropic, Responses, Ollama's chat and generate)."""
    return bool(keys) and method == "POST" and endpoint_class(method, path) == INFERENCE and path not in _NO_SLOT_PATHS


def priority_of(keys: Mapping[str, NamedKey], name: str) -> int:
    """The priority of the caller ``name`` now: its scope's; 0 for a full key, anonymous, or a key gone."""
    key = keys.get(name)
    return key.scope.priority if key is not None else 0


@dataclass(frozen=True, slots=True)
class Waiter:
    """One request waiting: ``ticket`` names it (increasing in arrival order), ``key`` its caller."""

    ticket: int
    key: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class FairQueue:
    """The requests waiting for one model's slots, in arrival order, and the turn each key was last
    served at (kept while the model is busy, so a key that sends one request at a time still takes
    turns with a key that queued many)."""

    waiting: tuple[Waiter, ...] = ()
    served_at: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    turn: int = 0

    def __len__(self) -> int:
        return len(self.waiting)


def join(queue: FairQueue, waiter: Waiter) -> FairQueue:
    """``waiter`` at the back of its key's line."""
    return replace(queue, waiting=(*queue.waiting, waiter))


def leave(queue: FairQueue, ticket: int) -> FairQueue:
    """The queue without ``ticket`` (a client that left, or timed out); unchanged if it is not there."""
    return replace(queue, waiting=tuple(w for w in queue.waiting if w.ticket != ticket))


def next_waiter(queue: FairQueue) -> Waiter | None:
    """Who goes next (module docstring): the highest priority, then the key served least recently
    (never served: first; ties: the key whose first waiter came first), then that key's first waiter."""
    if not queue.waiting:
        return None
    top = max(w.priority for w in queue.waiting)
    firsts: dict[str, Waiter] = {}
    for w in queue.waiting:  # arrival order: each key's first waiter at this priority
        if w.priority == top and w.key not in firsts:
            firsts[w.key] = w
    return min(firsts.values(), key=lambda w: (queue.served_at.get(w.key, -1), w.ticket))


def serve(queue: FairQueue) -> tuple[FairQueue, Waiter | None]:
    """Take :func:`next_waiter` out of the queue, recording its key's turn."""
    chosen = next_waiter(queue)
    if chosen is None:
        return queue, None
    served = MappingProxyType({**queue.served_at, chosen.key: queue.turn})
    rest = tuple(w for w in queue.waiting if w.ticket != chosen.ticket)
    return FairQueue(rest, served, queue.turn + 1), chosen


@dataclass(frozen=True, slots=True)
class Gate:
    """One model's door to its worker: ``capacity`` requests inside at once (its slots), ``running``
    inside now, the others in ``queue``."""

    capacity: int = 1
    running: int = 0
    queue: FairQueue = field(default_factory=FairQueue)

    @property
    def idle(self) -> bool:
        """Nobody inside and nobody waiting: the gate holds nothing worth keeping (not even turns)."""
        return self.running == 0 and not self.queue.waiting


def admit(gate: Gate) -> tuple[Gate, tuple[int, ...]]:
    """Let waiters in while slots are free; answers the gate and the tickets let in, in order."""
    queue, running, admitted = gate.queue, gate.running, []
    while running < gate.capacity:
        queue, chosen = serve(queue)
        if chosen is None:
            break
        admitted.append(chosen.ticket)
        running += 1
    return Gate(gate.capacity, running, queue), tuple(admitted)


def arrive(gate: Gate, waiter: Waiter, capacity: int) -> tuple[Gate, tuple[int, ...]]:
    """A request at the gate (``capacity``: the model's slots now, at least 1): it joins the queue,
    and whoever may go in goes (the newcomer itself when a slot is free and nobody waits before it)."""
    capacity = max(capacity, 1)
    queue = gate.queue
    if not queue.waiting and gate.running < capacity:  # straight in: what admit() decides, a third of its cost
        served = MappingProxyType({**queue.served_at, waiter.key: queue.turn})
        return Gate(capacity, gate.running + 1, FairQueue((), served, queue.turn + 1)), (waiter.ticket,)
    return admit(replace(gate, capacity=capacity, queue=join(queue, waiter)))


def depart(gate: Gate, ticket: int) -> Gate:
    """A waiter gone before its turn (it never went in)."""
    return replace(gate, queue=leave(gate.queue, ticket))


def finish(gate: Gate) -> tuple[Gate, tuple[int, ...]]:
    """A request inside ended (its answer or stream done): its slot goes to the next waiter."""
    return admit(replace(gate, running=max(gate.running - 1, 0)))
