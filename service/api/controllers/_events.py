"""``GET /events`` (the audit query), ``GET /events/stream`` (SSE with replay) and
llama.cpp's ``GET /models/sse``, all served from the log.

Open streams are capped (``max_streams``): each holds a connection and wakes on
every append, so past the cap a new one gets 503 with ``Retry-After`` instead
of slowing every other stream down (``bench/sse_streams.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.response import ServerSentEvent, ServerSentEventMessage

from service.api.event_query import (
    LastEventId,
    Limit,
    ModelFilter,
    Moment,
    NodeFilter,
    Position,
    TypeFilter,
    check_single,
    event_filter,
)
from service.api.llama_sse import to_llama
from service.api.problems import Problem
from service.api.schemas import EventPage, EventView, problems
from service.api.streams import EventStreams, StreamHold
from service.core.events import Recorded
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import dumps, to_wire
from service.event_store.live_state import LiveState
from service.event_store.statements import EventFilter
from service.settings import Settings

_PAGE = 500
_RETRY_AFTER_SECONDS = 5
_SSE = {200: ResponseSpec(data_container=str, media_type="text/event-stream", description="Server-sent events")}


@dataclass(frozen=True, slots=True)
class _Feed:
    """What one stream reads from: the log, its fold, the streams' bookkeeping and limits."""

    store: AsyncEventStore
    live: LiveState
    streams: EventStreams
    settings: Settings


class EventsController(Controller):
    path = "/events"
    tags = ("events",)

    @get("/", operation_id="listEvents", summary="Query the event log", responses=problems(400))
    async def list_events(  # one argument per declared query parameter
        self,
        request: Request[Any, Any, Any],
        store: AsyncEventStore,
        model: ModelFilter = None,
        types: TypeFilter = None,
        since: Moment = None,
        until: Moment = None,
        after: Position = None,
        before: Position = None,
        limit: Limit = 100,
        node: NodeFilter = None,
    ) -> EventPage:
        """Filters: model, type (repeatable, trailing * = prefix), since/until
        (ISO-8601), after/before (positions), limit (1..1000, default 100), node (``source.node``)."""
        check_single(request)
        flt = event_filter(
            model=model, types=types, since=since, until=until, after=after, before=before, limit=limit, node=node
        )
        page = await store.read(flt)
        next_after = page[-1].position if len(page) == flt.limit else None
        return EventPage(events=[EventView(**to_wire(r)) for r in page], next_after=next_after)

    @get(
        "/stream",
        operation_id="streamEvents",
        summary="Server-sent events with replay",
        responses={**_SSE, **problems(400, 503)},
    )
    async def stream(  # the pieces of a feed, then one argument per declared query parameter
        self,
        request: Request[Any, Any, Any],
        store: AsyncEventStore,
        live: LiveState,
        streams: EventStreams,
        settings: Settings,
        last_event_id: LastEventId = None,
        model: ModelFilter = None,
        types: TypeFilter = None,
        since: Moment = None,
        until: Moment = None,
        after: Position = None,
        before: Position = None,
    ) -> ServerSentEvent:
        """Replays from ``Last-Event-ID`` (or ``?after=``), then goes live with no
        gap and no duplicate. Without either, starts at the current head."""
        check_single(request)
        feed = _Feed(store, live, streams, settings)
        start = last_event_id if last_event_id is not None else after
        if start is not None:
            await _check_not_beyond_head(feed, start, "Last-Event-ID" if last_event_id is not None else "after")
        flt = event_filter(model=model, types=types, since=since, until=until, after=start, before=before, limit=_PAGE)
        if start is None:
            flt = dataclasses.replace(flt, after=live.position)
        return ServerSentEvent(_admitted(feed, flt, _ours), retry_duration=1000)


@get("/models/sse", operation_id="modelsSse", tags=["models"], responses={**_SSE, **problems(400, 503)})
async def models_sse(
    store: AsyncEventStore,
    live: LiveState,
    streams: EventStreams,
    settings: Settings,
    last_event_id: LastEventId = None,
) -> ServerSentEvent:
    """llama.cpp router's event stream shape (``data: {model, event, data}``), from
    the same log; resumable with ``Last-Event-ID`` unlike the original."""
    feed = _Feed(store, live, streams, settings)
    if last_event_id is not None:
        await _check_not_beyond_head(feed, last_event_id, "Last-Event-ID")
    after = live.position if last_event_id is None else last_event_id
    return ServerSentEvent(_admitted(feed, EventFilter(after=after), _llama))


async def _check_not_beyond_head(feed: _Feed, position: int, name: str) -> None:
    # The fold may trail the store by a few events; only a position the log has
    # never reached is refused.
    if position > feed.live.position and position > (head := await feed.store.head()):
        raise Problem(
            400,
            "invalid_request",
            f"{name} {position} is beyond the head of the log ({head}): no such event",
            parameter=name,
        )


def _ours(recorded: Recorded) -> ServerSentEventMessage | None:
    return ServerSentEventMessage(data=dumps(to_wire(recorded)), event=recorded.type, id=recorded.position)


def _llama(recorded: Recorded) -> ServerSentEventMessage | None:
    payload = to_llama(recorded)
    return None if payload is None else ServerSentEventMessage(data=dumps(payload), id=recorded.position)


Render = Callable[[Recorded], ServerSentEventMessage | None]


def _admitted(feed: _Feed, flt: EventFilter, render: Render) -> AsyncIterator[ServerSentEventMessage]:
    """The stream, counted against ``max_streams`` from now until it ends, however
    it ends (also if the client leaves before the first message)."""
    cap = feed.settings.max_streams
    if cap and feed.streams.open >= cap:
        raise Problem(
            503,
            "too_many_streams",
            f"{feed.streams.open} event streams are open, the limit (MODELROUTER_MAX_STREAMS) is {cap}",
            headers={"Retry-After": str(_RETRY_AFTER_SECONDS)},
            limit=cap,
        )
    hold = feed.streams.hold()
    messages = _messages(feed, flt, render, hold)
    weakref.finalize(messages, hold.release)  # a generator never started runs no finally
    return messages


async def _messages(
    feed: _Feed, flt: EventFilter, render: Render, hold: StreamHold
) -> AsyncIterator[ServerSentEventMessage]:
    # No DB connection is held across a yield: each page opens and closes its
    # own, so a client that vanishes mid-stream leaks nothing.
    cursor = flt.after or 0
    try:
        while True:
            head = feed.live.position
            while cursor < head:
                page_flt = dataclasses.replace(flt, after=cursor, before=_before(flt, head), limit=_PAGE)
                page, last = await _read_shared(feed, page_flt, render)
                for message in page:
                    yield message
                cursor = last if last is not None else head
            if not await feed.live.wait_beyond(head, timeout=feed.settings.sse_keepalive, while_down=True):
                yield ServerSentEventMessage(comment="keep-alive")
    finally:
        hold.release()


async def _read_shared(
    feed: _Feed, flt: EventFilter, render: Render
) -> tuple[list[ServerSentEventMessage], int | None]:
    """The rendered page, and its last position when the page is full (more may
    follow) -- read and rendered once for every stream waiting at the same place
    with the same filter and shape: an append wakes all streams at once, and N
    identical queries made the fan-out grow by ~5 ms per stream (bench/sse_streams.py)."""
    key = (flt, render)
    reads = feed.streams.reads
    pending = reads.get(key)
    if pending is None:
        pending = asyncio.ensure_future(_read_rendered(feed.store, flt, render))
        reads[key] = pending
        pending.add_done_callback(lambda _done: reads.pop(key, None))
    result: tuple[list[ServerSentEventMessage], int | None] = await asyncio.shield(pending)
    return result


async def _read_rendered(
    store: AsyncEventStore, flt: EventFilter, render: Render
) -> tuple[list[ServerSentEventMessage], int | None]:
    page = await store.read(flt)
    messages = [m for m in (render(r) for r in page) if m is not None]
    return messages, page[-1].position if len(page) == flt.limit else None


def _before(flt: EventFilter, head: int) -> int:
    return head + 1 if flt.before is None else min(flt.before, head + 1)
