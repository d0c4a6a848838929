"""``GET /models/{id}/history``: the timeline of one model, derived from the log
by :func:`service.core.history.model_history`.

Model ids contain ``/`` (``user/repo:QUANT``) and Litestar cannot route a
``path`` parameter followed by a fixed segment, so one handler takes the rest
of the path and insists that it ends in ``/history``.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath
from typing import Annotated

from litestar import get
from litestar.params import Parameter, SkipValidation

from service.api.problems import Problem
from service.api.schemas import DownloadHistory, LoadHistory, ModelHistoryView, problems
from service.api.views import time_or_none
from service.core.errors import CommandRejected
from service.core.events import Recorded
from service.core.history import HISTORY_TYPES, DownloadRecord, LoadRecord, ModelHistory, model_history
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import format_time
from service.event_store.statements import EventFilter
from service.live_state import LiveState
from service.supervision.effects import Clock

_PAGE = 1000
_SUFFIX = "/history"
ModelPath = Annotated[PurePosixPath, Parameter(description="`{model}/history`: a model id, alias or `user/repo`")]


@get(
    "/models/{model_path:path}",
    operation_id="modelHistory",
    summary="A model's downloads and loads",
    tags=["models"],
    responses=problems(400, 404, 409),
)
async def model_history_endpoint(
    model_path: ModelPath,
    live: LiveState,
    store: AsyncEventStore,
    clock: SkipValidation[Clock],  # a Protocol: isinstance cannot check it
) -> ModelHistoryView:
    """``GET /models/{id}/history``: every download (when, how long, bytes, outcome,
    reason) and every load (load time, uptime, requests served, how it ended),
    oldest first. The id resolves as elsewhere: name, alias or ``user/repo``."""
    text = str(model_path)
    if not text.endswith(_SUFFIX) or len(text) <= len(_SUFFIX) + 1:
        raise Problem(404, "not_found", f"no route for /models{text}: did you mean /models/<id>/history?")
    name = text[1 : -len(_SUFFIX)]
    model = live.state.resolve(name)
    if model is None:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    records = await _read_model(store, model.name)
    return history_view(model_history(model.name, records, clock.now()))


async def _read_model(store: AsyncEventStore, model: str) -> list[Recorded]:
    found: list[Recorded] = []
    after = 0
    while True:
        page = await store.read(EventFilter(after=after, model=model, types=HISTORY_TYPES, limit=_PAGE))
        found += page
        if len(page) < _PAGE:
            return found
        after = page[-1].position


def _download(job: DownloadRecord) -> DownloadHistory:
    fields = dataclasses.asdict(job)
    return DownloadHistory(
        **{**fields, "requested_at": format_time(job.requested_at), "ended_at": time_or_none(job.ended_at)}
    )


def _load(load: LoadRecord) -> LoadHistory:
    fields = dataclasses.asdict(load)
    times = {"requested_at": format_time(load.requested_at), "ready_at": time_or_none(load.ready_at)}
    times["ended_at"] = time_or_none(load.ended_at)
    return LoadHistory(**{**fields, **times})


def history_view(history: ModelHistory) -> ModelHistoryView:
    """The wire shape of :class:`ModelHistory` (times as ISO-8601 UTC)."""
    return ModelHistoryView(
        model=history.model,
        downloads=[_download(job) for job in history.downloads],
        loads=[_load(load) for load in history.loads],
        restarts=history.restarts,
        crashes=history.crashes,
        requests_served=history.requests_served,
    )
