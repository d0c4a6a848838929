"""``GET /metrics``, as llama-server answers it: only with ``--metrics`` (else its 501).

Router mode: the router's own series (``modelrouter_*``, :mod:`service.api.metrics`),
or with ``?model=`` that model's worker's (llama-server's ``llamacpp:*``
names), as llama.cpp's router routes it. Single-model mode: the model's
``llamacpp:*`` series, then the router's. A sleeping model's series are what
its worker reported just before it slept, and a scrape never wakes nor loads a
model (llama-server's metrics task does not reset its idle timer either).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from litestar import Request, Response, get
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import SkipValidation

from service.api.controllers._proxy_routes import Autoload
from service.api.metrics import CONTENT_TYPE, RouterMetrics
from service.api.problems import Problem
from service.api.proxy import Forwarding, proxy_request
from service.api.schemas import ModelParam, problems
from service.core.server_mode import target_model
from service.core.state import InstanceStatus, ModelState, ModelStatus
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.child_process import process_start_time
from service.supervision.sleep import SleepSnapshots

DISABLED = "This server does not support metrics endpoint. Start it with `--metrics`"
"""llama-server's answer without ``--metrics`` (501 ``not_supported_error``), word for word."""
STARTED_HEADER = "Process-Start-Time-Unix"
"""llama-server's header on ``/metrics`` (it sends its metrics' start stamp, a monotonic clock's
microseconds; here what the name says: this process's start, in Unix seconds)."""
_STARTED = {STARTED_HEADER: str(int(process_start_time(os.getpid()) or 0))}  # psutil knows its own process
_SCRAPE_TIMEOUT = 5.0  # seconds for a worker's /metrics in single-model mode: a busy one still answers


@get(
    "/metrics",
    operation_id="getMetrics",
    tags=["inference"],
    responses={
        200: ResponseSpec(
            data_container=str,
            media_type="text/plain",
            description="Prometheus text format: the router's own series; with `?model=`, that model's worker's; "
            "in single-model mode the model's, then the router's",
            generate_examples=False,
        ),
        **problems(400, 404, 409, 413, 501, 503),
    },
)
async def get_metrics(
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    live: LiveState,
    metrics: RouterMetrics,
    settings: Settings,
    snapshots: SkipValidation[SleepSnapshots | None],
    model: ModelParam | None = None,
    autoload: Autoload = None,
) -> Response[Any]:
    """Prometheus text: models, instances, loads, crashes, downloads, queue, proxied
    requests, each model's requests, tokens and durations (by key while named keys exist)
    and the log's position (docs/operations.md lists every series)."""
    mode = forwarding.mode
    if model is not None and not mode.single:
        # llama.cpp's router forwards ?model= to that model, which answers 501 itself without --metrics.
        return await _model_metrics(request, forwarding, live, settings, snapshots, model, autoload)
    if not settings.metrics:
        raise Problem(501, "not_supported", DISABLED)
    if not mode.single:
        return Response(content=metrics.render(await live.health()), media_type=CONTENT_TYPE, headers=_STARTED)
    found = live.state.resolve(target_model(mode, model))
    if found is not None and found.status is ModelStatus.SLEEPING:
        own = (snapshots.scrape(found.name) if snapshots is not None else None) or b""
    else:
        own = await _scrape(forwarding, found)
    return Response(content=own + metrics.render(await live.health()), media_type=CONTENT_TYPE, headers=_STARTED)


async def _model_metrics(
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    live: LiveState,
    settings: Settings,
    snapshots: SleepSnapshots | None,
    model: str,
    autoload: bool | None,
) -> Response[Any]:
    """``?model=``: that model's own series, routed; a sleeping one's as it said them before it slept."""
    found = live.state.resolve(model.strip())
    if found is None or found.status is not ModelStatus.SLEEPING:
        return await proxy_request(request, forwarding, model, autoload)
    if not settings.metrics:
        raise Problem(501, "not_supported", DISABLED)
    kept = snapshots.scrape(found.name) if snapshots is not None else None
    return Response(content=kept or b"", media_type=CONTENT_TYPE)


async def _scrape(forwarding: Forwarding, model: ModelState | None) -> bytes:
    """The single model's worker's ``llamacpp:*`` series when it is ready (nothing while it loads:
    a scrape never waits for a load)."""
    inst = model.instance if model is not None else None
    if inst is None or inst.status is not InstanceStatus.READY or not inst.endpoint:
        return b""
    try:
        answer = await forwarding.http.get(f"{inst.endpoint}/metrics", timeout=_SCRAPE_TIMEOUT)
    except httpx.HTTPError:
        return b""  # stopping or gone: the router's own series still answer
    return answer.content if answer.status_code == 200 else b""
