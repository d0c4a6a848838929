"""``GET /models/{id}/history``: the timeline of one model, derived from the log
by :func:`service.core.history.model_history`.

Model ids contain ``/`` (``user/repo:QUANT``) and Litestar cannot route a
``path`` parameter followed by a fixed segment, so one handler takes the rest
of the path and insists that it ends in ``/history`` or ``/logs`` (the latter
answered by :mod:`._logs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from pathlib import PurePosixPath
from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, get
from litestar.params import Parameter, SkipValidation

from service.api.controllers._logs import (
    DEFAULT_TAIL,
    InstanceId,
    Tail,
    chosen_instance,
    instance_log,
    ran_elsewhere,
    remote_log,
)
from service.api.problems import Problem
from service.api.proxy import Forwarding
from service.api.schemas import (
    DownloadHistory,
    LoadHistory,
    ModelHistoryView,
    PromptCacheHistory,
    WorkerLogView,
    problems,
)
from service.api.scopes import require_model
from service.api.views import time_or_none
from service.core.errors import CommandRejected
from service.core.events import Recorded
from service.core.history import HISTORY_TYPES, DownloadRecord, LoadRecord, ModelHistory, model_history
from service.core.keys import Principal
from service.event_store.async_store import AsyncEventStore
from service.event_store.codec import format_time
from service.event_store.live_state import LiveState
from service.event_store.statements import EventFilter
from service.settings import Settings
from service.supervision.surroundings import Clock
from service.supervision.worker_logs import WorkerLogs

_PAGE = 1000
_SUFFIX, _LOGS = "/history", "/logs"
ModelPath = Annotated[
    PurePosixPath, Parameter(description="`{model}/history` or `{model}/logs`: a model id, alias or `user/repo`")
]


@get(
    "/models/{model_path:path}",
    operation_id="modelHistory",
    summary="A model's downloads and loads (/history), or the end of one of its worker's logs (/logs)",
    tags=["models"],
    responses=problems(400, 403, 404, 409),
)
async def model_history_endpoint(
    model_path: ModelPath,
    live: LiveState,
    store: AsyncEventStore,
    clock: SkipValidation[Clock],  # a Protocol: isinstance cannot check it
    worker_logs: WorkerLogs | None,
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    settings: Settings,
    caller: Principal,
    instance: InstanceId = None,
    tail: Tail = DEFAULT_TAIL,
) -> ModelHistoryView | WorkerLogView:
    """``GET /models/{id}/history``: every download (when, how long, bytes, outcome,
    reason), every load (load time, uptime, requests served, how it ended, its log) and every
    save, restore and discard of its prompt cache on disk, oldest first.
    ``GET /models/{id}/logs?instance=…&tail=N``: the last lines of one instance's worker log (the
    latest instance by default). The id resolves as elsewhere: name, alias or ``user/repo``."""
    text = str(model_path)
    suffix = next((s for s in (_SUFFIX, _LOGS) if text.endswith(s) and len(text) > len(s) + 1), None)
    if suffix is None:
        raise Problem(404, "not_found", f"no route for /models{text}: did you mean /models/<id>/history?")
    name = text[1 : -len(suffix)]
    require_model(caller, live.state, name, request.url.path)
    model = live.state.resolve(name)
    if model is None:
        raise CommandRejected("model_not_found", f"model {name!r} is not found", model=name)
    records = await _read_model(store, model.name)
    history = model_history(model.name, records, clock.now())
    if suffix == _LOGS:
        chosen = chosen_load(model.name, history.loads, instance)
        ran_on = ran_elsewhere(chosen.node, settings)
        if ran_on is not None:  # its file is on that node's disk: ask it
            path, params = (
                f"/models/{quote(model.name, safe='/:@')}/logs",
                {"instance": chosen.instance_id, "tail": tail},
            )
            return await remote_log(forwarding, request, ran_on, path, params)
        return await instance_log(model.name, [chosen.instance_id], chosen.instance_id, tail, worker_logs)
    return history_view(history)


async def model_loads(store: AsyncEventStore, model: str, now: datetime) -> Sequence[LoadRecord]:
    """The model's loads (instances), oldest first, as its history lists them."""
    return model_history(model, await _read_model(store, model), now).loads


def chosen_load(model: str, loads: Sequence[LoadRecord], instance: str | None) -> LoadRecord:
    """The load of ``instance`` (default: the latest), with the node that ran it; else the problem."""
    chosen = chosen_instance(model, [load.instance_id for load in loads], instance)
    return next(load for load in loads if load.instance_id == chosen)


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
    times = {"requested_at": format_time(job.requested_at), "ended_at": time_or_none(job.ended_at)}
    return DownloadHistory(**{**fields, **times}, log=f"/downloads/{job.job_id}/logs")


def _load(model: str, load: LoadRecord) -> LoadHistory:
    fields = dataclasses.asdict(load)
    times = {"requested_at": format_time(load.requested_at), "ready_at": time_or_none(load.ready_at)}
    times["ended_at"] = time_or_none(load.ended_at)
    log = f"/models/{quote(model, safe='/:@')}/logs?instance={quote(load.instance_id)}"
    return LoadHistory(**{**fields, **times}, log=log)


def history_view(history: ModelHistory) -> ModelHistoryView:
    """The wire shape of :class:`ModelHistory` (times as ISO-8601 UTC)."""
    return ModelHistoryView(
        model=history.model,
        downloads=[_download(job) for job in history.downloads],
        loads=[_load(history.model, load) for load in history.loads],
        restarts=history.restarts,
        crashes=history.crashes,
        requests_served=history.requests_served,
        prompt_cache=[
            PromptCacheHistory(**{**dataclasses.asdict(r), "at": format_time(r.at)}) for r in history.prompt_cache
        ],
    )
