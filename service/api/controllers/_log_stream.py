"""``GET /logs/stream?model=…``: one instance's worker log as server-sent events, followed as it grows.

Replay as ``/events/stream`` does it: each line's event ``id`` is the byte offset
just past it in the instance's file, so a client that reconnects with
``Last-Event-ID`` resumes after the last line it got, with no gap and no
duplicate; without one, the stream starts with the last ``tail`` lines. A
rotation (the file shrank or was replaced) restarts from the new file's
beginning. The stream counts against ``max_streams`` as the event streams do.

Why it polls: the file is written by the writer thread of
:mod:`service.supervision.worker_logs` (or, after a restart, by nobody), and a
follower reads it as ``tail -f`` does, every quarter second when it is idle.

In a cluster the file is on the disk of the node that ran the instance: any other
node opens that node's stream (the key and ``Last-Event-ID`` passed on) and relays
its bytes as they come, so ids and replay are that node's. A node that cannot be
reached answers 503 ``node_unreachable``; one that stops answering mid-stream (or
is recorded lost) ends the stream with an ``event: error`` saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
from litestar import Request, get
from litestar.params import Parameter, SkipValidation
from litestar.response import ServerSentEvent, ServerSentEventMessage, Stream

from service.api.controllers._history import chosen_load, model_loads
from service.api.controllers._logs import (
    DEFAULT_TAIL,
    InstanceId,
    NodeAnswer,
    Tail,
    ask_node,
    kept_log,
    ran_elsewhere,
)
from service.api.problems import Problem
from service.api.proxy import Forwarding
from service.api.schemas import problems
from service.api.streams import EventStreams
from service.core.errors import CommandRejected
from service.event_store.async_store import AsyncEventStore
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.log_files import tail_offset
from service.supervision.surroundings import Clock
from service.supervision.worker_logs import WorkerLogs

_POLL_SECONDS = 0.25
_EVENT_END = b"\r\n\r\n"  # how Litestar ends an event (every node is this service)
_CHUNK = 1 << 16
Offset = Annotated[
    int | None, Parameter(header="Last-Event-ID", ge=0, description="Resume after this byte offset (a line's id)")
]
ModelName = Annotated[str, Parameter(min_length=1, max_length=512, description="a model id, alias or user/repo")]


@get(
    "/logs/stream",
    operation_id="streamLogs",
    summary="A model's worker log as server-sent events, followed",
    tags=["models"],
    responses=problems(400, 404, 503),
)
async def stream_logs(  # the pieces, then one argument per declared query parameter
    live: LiveState,
    store: AsyncEventStore,
    clock: SkipValidation[Clock],  # a Protocol: isinstance cannot check it
    streams: EventStreams,
    settings: Settings,
    worker_logs: WorkerLogs | None,
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    model: ModelName,
    instance: InstanceId = None,
    tail: Tail = DEFAULT_TAIL,
    last_event_id: Offset = None,
) -> Stream:
    """The last ``tail`` lines of the instance's log (the latest instance by default), then each
    new line as it is written; ``event: log``, ``data`` the line, ``id`` its end's byte offset.
    In a cluster, the stream of the node that ran the instance, relayed."""
    found = live.state.resolve(model)
    if found is None:
        raise CommandRejected("model_not_found", f"model {model!r} is not found", model=model)
    chosen = chosen_load(found.name, await model_loads(store, found.name, clock.now()), instance)
    node = ran_elsewhere(chosen.node, settings)
    if node is not None:  # its file is on that node's disk: relay its stream
        _check_room(streams, settings.max_streams)
        params = {"model": found.name, "instance": chosen.instance_id, "tail": tail}
        answer = await ask_node(forwarding, request, node, "/logs/stream", params, kept=("last-event-id",))
        hold = streams.hold()
        relayed = _relay(answer, node, hold.release)
        weakref.finalize(relayed, hold.release)  # a generator never started (the client left) runs no finally
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return Stream(relayed, media_type="text/event-stream", headers=headers)
    path = kept_log(worker_logs, "instance", chosen.instance_id)
    start = last_event_id if last_event_id is not None else await asyncio.to_thread(tail_offset, path, tail)
    _check_room(streams, settings.max_streams)
    hold = streams.hold()
    followed = _follow(path, start, settings.sse_keepalive, hold.release)
    weakref.finalize(followed, hold.release)  # as the event streams: a generator never started runs no finally
    return ServerSentEvent(followed, retry_duration=1000)


def _check_room(streams: EventStreams, cap: int) -> None:
    """The 503 for one stream more than ``max_streams`` (0: no limit)."""
    if cap and streams.open >= cap:
        raise Problem(
            503,
            "too_many_streams",
            f"{streams.open} streams are open, the limit is {cap}",
            headers={"Retry-After": "5"},
            limit=cap,
        )


async def _relay(answer: NodeAnswer, node: str, release: Callable[[], None]) -> AsyncIterator[bytes]:
    """``node``'s stream, whole events as they come (a cut never leaves half an event to be read as
    a line); one cut short ends with an ``error`` event saying why."""
    pending = b""
    try:
        async for chunk in answer.aiter_raw():
            pending += chunk
            end = pending.rfind(_EVENT_END) + len(_EVENT_END)
            if end >= len(_EVENT_END):
                yield pending[:end]
                pending = pending[end:]
    except httpx.HTTPError as exc:
        why = {"node": node, "detail": f"node {node!r}, which holds the log, stopped answering: {exc}"}
        yield ServerSentEventMessage(data=json.dumps(why), event="error").encode()
    finally:
        release()  # first: a cancelled stream (the client left) may not get past the await below
        await answer.aclose()


async def _follow(
    path: Path, offset: int, keepalive: float, release: Callable[[], None]
) -> AsyncIterator[ServerSentEventMessage]:
    partial, inode, idle = b"", None, 0.0
    try:
        while True:
            chunk, inode, offset, restarted = await asyncio.to_thread(_read_from, path, offset, inode)
            if restarted:
                partial = b""
            if not chunk:
                idle += _POLL_SECONDS
                if idle >= keepalive:
                    idle = 0.0
                    yield ServerSentEventMessage(comment="keep-alive")
                await asyncio.sleep(_POLL_SECONDS)
                continue
            idle = 0.0
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            end = offset - len(partial)
            position = end - sum(len(line) + 1 for line in lines)
            for line in lines:
                position += len(line) + 1
                yield ServerSentEventMessage(data=line.decode("utf-8", "replace"), event="log", id=position)
    finally:
        release()


def _read_from(path: Path, offset: int, inode: int | None) -> tuple[bytes, int | None, int, bool]:
    """New bytes of ``path`` from ``offset``: ``(bytes, inode, new offset, restarted)``; a file
    replaced or shorter than ``offset`` (rotated) is read from its beginning."""
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            restarted = (inode is not None and info.st_ino != inode) or info.st_size < offset
            if restarted:
                offset = 0
            f.seek(offset)
            data = f.read(_CHUNK)
            return data, info.st_ino, offset + len(data), restarted
    except FileNotFoundError:
        return b"", inode, offset, False
