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
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated

from litestar import get
from litestar.params import Parameter, SkipValidation
from litestar.response import ServerSentEvent, ServerSentEventMessage

from service.api.controllers._history import model_instances
from service.api.controllers._logs import DEFAULT_TAIL, InstanceId, Tail, chosen_instance, kept_log
from service.api.problems import Problem
from service.api.schemas import problems
from service.api.streams import EventStreams
from service.core.errors import CommandRejected
from service.event_store.async_store import AsyncEventStore
from service.live_state import LiveState
from service.settings import Settings
from service.supervision.effects import Clock
from service.supervision.log_files import tail_offset
from service.supervision.worker_logs import WorkerLogs

_POLL_SECONDS = 0.25
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
    model: ModelName,
    instance: InstanceId = None,
    tail: Tail = DEFAULT_TAIL,
    last_event_id: Offset = None,
) -> ServerSentEvent:
    """The last ``tail`` lines of the instance's log (the latest instance by default), then each
    new line as it is written; ``event: log``, ``data`` the line, ``id`` its end's byte offset."""
    found = live.state.resolve(model)
    if found is None:
        raise CommandRejected("model_not_found", f"model {model!r} is not found", model=model)
    chosen = chosen_instance(found.name, await model_instances(store, found.name, clock.now()), instance)
    path = kept_log(worker_logs, "instance", chosen)
    start = last_event_id if last_event_id is not None else await asyncio.to_thread(tail_offset, path, tail)
    cap = settings.max_streams
    if cap and streams.open >= cap:
        raise Problem(503, "too_many_streams", f"{streams.open} streams are open, the limit is {cap}",
                      headers={"Retry-After": "5"}, limit=cap)  # fmt: skip
    hold = streams.hold()
    return ServerSentEvent(_follow(path, start, settings.sse_keepalive, hold.release), retry_duration=1000)


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
