"""Decisions as values: what the core decided, for the one interpreter to carry out.

A decision function in ``service/core`` takes the fold and the facts the fold
cannot know (time, requests in flight, the demand queue) and returns a
:class:`Decision`: the events to append, the effects to perform after they are
committed (spawn, stop, kill, start a download, change the demand queue, ...),
and the answer for its caller. Nothing is smuggled out through closures, and
nothing happens before the events that justify it are in the log:
``service/supervision/interpreter.py`` appends first, then performs.

Pure module: stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from service.core.events import Event

A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Append:
    """An event to append, about ``model`` (None: a router-level event). ``event_id``: a
    deterministic id for a fact several writers may state (the log keeps it once); None: a fresh one."""

    event: Event
    model: str | None = None
    event_id: str | None = None


class Effect:
    """Base of the effects a decision asks for; each kind is a frozen dataclass with its own performer."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Decision(Generic[A]):
    """Events to append, then effects to perform, and the caller's answer."""

    answer: A
    events: tuple[Append, ...] = ()
    effects: tuple[Effect, ...] = field(default=())

    def then(self, other: Decision[B]) -> Decision[B]:
        """This decision's events and effects followed by ``other``'s, with ``other``'s answer."""
        return Decision(other.answer, self.events + other.events, self.effects + other.effects)

    def answering(self, answer: B) -> Decision[B]:
        """The same events and effects with another answer."""
        return Decision(answer, self.events, self.effects)


def about(model: str | None, events: Iterable[Event]) -> tuple[Append, ...]:
    """``events`` as appends about ``model``."""
    return tuple(Append(e, model) for e in events)


def nothing(answer: A) -> Decision[A]:
    """A decision that changes nothing and answers ``answer``."""
    return Decision(answer)
