"""What the open event streams (``GET /events/stream``, ``GET /models/sse``) share:
how many are open, held against ``max_streams``, and the page reads in flight that
streams at the same place join (:mod:`service.api.controllers._events`).

One per running app: the lifespan makes it beside the ``ServiceParts``, so it lives and
ends with the service, as the counters did on the ``ServiceParts`` before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from service.event_store.statements import EventFilter


class StreamHold:
    """One open stream's place in the count. :meth:`release` gives it back once,
    however often it is called: from the stream's ``finally``, and from a finalizer
    for a stream whose generator never started (and so never runs its ``finally``)."""

    __slots__ = ("_streams",)

    def __init__(self, streams: EventStreams) -> None:
        self._streams: EventStreams | None = streams

    def release(self) -> None:
        """Count this stream as closed (the first call only)."""
        if self._streams is not None:
            self._streams.open -= 1
            self._streams = None


class EventStreams:
    """The open streams' count and shared reads."""

    def __init__(self) -> None:
        self.open = 0
        self.reads: dict[tuple[EventFilter, Any], asyncio.Future[Any]] = {}
        """Reads in flight, by (filter, renderer): streams at the same place share one."""

    def hold(self) -> StreamHold:
        """Count one more open stream until the returned hold is released."""
        self.open += 1
        return StreamHold(self)
