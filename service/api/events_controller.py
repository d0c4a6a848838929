"""``GET /events`` (the audit query), ``GET /events/stream`` (SSE with replay) and
llama.cpp's ``GET /models/sse``, all served from the log."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

from litestar import Controller, Request, get
from litestar.response import ServerSentEvent, ServerSentEventMessage

from service.api.event_query import parse_filter
from service.api.llama_sse import to_llama
from service.api.problems import Problem
from service.core.events import Recorded
from service.event_store.codec import dumps, to_wire
from service.event_store.statements import EventFilter
from service.runtime import Runtime

_PAGE = 500


def _params(request: Request[Any, Any, Any]) -> dict[str, list[str]]:
    return {key: request.query_params.getall(key) for key in request.query_params}


class EventsController(Controller):
    path = "/events"
    tags = ("events",)

    @get("/", operation_id="listEvents", summary="Query the event log")
    async def list_events(self, request: Request[Any, Any, Any], runtime: Runtime) -> dict[str, Any]:
        """Filters: model, type (repeatable, trailing * = prefix), since/until
        (ISO-8601), after/before (positions), limit (1..1000, default 100)."""
        flt = parse_filter(_params(request))
        page = await runtime.store.read(flt)
        next_after = page[-1].position if len(page) == flt.limit else None
        return {"events": [to_wire(r) for r in page], "next_after": next_after}

    @get("/stream", operation_id="streamEvents", summary="Server-sent events with replay")
    async def stream(self, request: Request[Any, Any, Any], runtime: Runtime) -> ServerSentEvent:
        """Replays from ``Last-Event-ID`` (or ``?after=``), then goes live with no
        gap and no duplicate. Without either, starts at the current head."""
        params = _params(request)
        last_id = request.headers.get("last-event-id")
        if last_id is not None:
            if not last_id.strip().isdigit():
                raise Problem(400, "invalid_request", f"Last-Event-ID {last_id!r} is not an event position")
            params["after"] = [last_id.strip()]
        flt = parse_filter(params, after_default=runtime.live.position)
        return ServerSentEvent(_messages(runtime, flt), retry_duration=1000)


def _ours(recorded: Recorded) -> ServerSentEventMessage | None:
    return ServerSentEventMessage(data=dumps(to_wire(recorded)), event=recorded.type, id=recorded.position)


def _llama(recorded: Recorded) -> ServerSentEventMessage | None:
    payload = to_llama(recorded)
    return None if payload is None else ServerSentEventMessage(data=dumps(payload), id=recorded.position)


@get("/models/sse", operation_id="modelsSse", tags=["models"])
async def models_sse(request: Request[Any, Any, Any], runtime: Runtime) -> ServerSentEvent:
    """llama.cpp router's event stream shape (``data: {model, event, data}``), from
    the same log; resumable with ``Last-Event-ID`` unlike the original."""
    last_id = request.headers.get("last-event-id", "")
    after = int(last_id) if last_id.strip().isdigit() else runtime.live.position
    return ServerSentEvent(_messages(runtime, EventFilter(after=after), render=_llama))


async def _messages(
    runtime: Runtime, flt: EventFilter, render: Callable[[Recorded], ServerSentEventMessage | None] = _ours
) -> AsyncIterator[ServerSentEventMessage]:
    # No DB connection is held across a yield: each page opens and closes its
    # own, so a client that vanishes mid-stream leaks nothing.
    cursor = flt.after or 0
    runtime.open_streams += 1
    try:
        while True:
            head = runtime.live.position
            while cursor < head:
                page = await runtime.store.read(dataclasses.replace(flt, after=cursor, before=head + 1, limit=_PAGE))
                for recorded in page:
                    message = render(recorded)
                    if message is not None:
                        yield message
                cursor = page[-1].position if len(page) == _PAGE else head
            if not await runtime.live.wait_beyond(head, timeout=runtime.settings.sse_keepalive, while_down=True):
                yield ServerSentEventMessage(comment="keep-alive")
    finally:
        runtime.open_streams -= 1
