"""``GET /health`` (and llama-server's ``GET /v1/health``): liveness, and whether
the live state is current.

Answers 503 while the tail that keeps the fold current is down, or behind by
more than ``tail_lag_limit`` seconds: everything the service decides comes
from that state, so a load balancer should not send it traffic meanwhile. Also
503 while the log's disk is full, with a warning saying so: each call first
tries to record the outage's end (``AsyncEventStore.retry_outage``), so the
answer turns 200 by itself once space is freed, with nothing else appending. In
single-model mode also while its model downloads or loads, with llama-server's
``{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}``.
"""

from __future__ import annotations

from litestar import Response, get
from litestar.openapi.datastructures import ResponseSpec
from msgspec import UNSET

from service import __version__
from service.api.schemas import ErrorObject, HealthView, TailView
from service.api.streams import EventStreams
from service.core.server_mode import ServerMode, not_serving
from service.event_store.live_state import LiveState
from service.settings import Settings
from service.supervision.instances import InstanceSupervisor
from service.supervision.startup_loads import StartupLoads

_DEGRADED = {
    200: ResponseSpec(data_container=HealthView, description="The live state is current", generate_examples=False),
    503: ResponseSpec(
        data_container=HealthView,
        description="Degraded: the tail is down or behind the log, or the log's disk is full",
        generate_examples=False,
    ),
}


@get("/health", operation_id="health", tags=["service"], responses=_DEGRADED)
async def health(
    settings: Settings,
    live: LiveState,
    instances: InstanceSupervisor,
    streams: EventStreams,
    warnings: tuple[str, ...],
    mode: ServerMode,
    startup_loads: StartupLoads,
) -> Response[HealthView]:
    """Answered by the service itself, never proxied."""
    return await _health(settings, live, instances, streams, warnings, mode, startup_loads)


@get("/v1/health", operation_id="healthV1", tags=["service"], responses=_DEGRADED)
async def health_v1(
    settings: Settings,
    live: LiveState,
    instances: InstanceSupervisor,
    streams: EventStreams,
    warnings: tuple[str, ...],
    mode: ServerMode,
    startup_loads: StartupLoads,
) -> Response[HealthView]:
    """llama-server's second health path, same answer."""
    return await _health(settings, live, instances, streams, warnings, mode, startup_loads)


async def _health(
    settings: Settings,
    live: LiveState,
    instances: InstanceSupervisor,
    streams: EventStreams,
    warnings: tuple[str, ...],
    mode: ServerMode,
    startup_loads: StartupLoads,
) -> Response[HealthView]:
    tail = await live.health()
    refusal = await live.store.retry_outage()
    if refusal is not None:
        warnings = (*warnings, f"the event log cannot be written until an append succeeds again: {refusal}")
    healthy = tail.up and tail.lag_ms <= settings.tail_lag_limit * 1000 and refusal is None
    state = live.state
    loading = not_serving(mode, state, startup_loads.waiting) if healthy else None
    body = HealthView(
        status="ok" if healthy and loading is None else "loading" if healthy else "degraded",
        version=__version__,
        position=tail.position,
        tail=TailView(
            up=tail.up,
            head=tail.head,
            lag_events=tail.lag_events,
            lag_ms=tail.lag_ms,
            restarts=tail.restarts,
            last_error=tail.last_error,
        ),
        open_streams=streams.open,
        queued_requests=instances.queue_length,
        requests_in_flight=sum(instances.busy.values()),
        in_flight_by_model={model: n for model, n in sorted(instances.busy.items()) if n},
        anomalies=state.anomalies,
        last_anomaly=state.last_anomaly,
        warnings=list(warnings),
        error=UNSET if loading is None else ErrorObject(code=503, message=loading, type="unavailable_error"),
    )
    return Response(body, status_code=200 if body.status == "ok" else 503)
