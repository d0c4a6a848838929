"""``GET /health`` (and llama-server's ``GET /v1/health``): liveness, and whether
the live state is current.

Answers 503 while the tail that keeps the fold current is down, or behind by
more than ``tail_lag_limit`` seconds: everything the service decides comes
from that state, so a load balancer should not send it traffic meanwhile.
"""

from __future__ import annotations

from litestar import Response, get
from litestar.openapi.datastructures import ResponseSpec

from service import __version__
from service.api.schemas import HealthView, TailView
from service.runtime import Runtime

_DEGRADED = {
    200: ResponseSpec(data_container=HealthView, description="The live state is current", generate_examples=False),
    503: ResponseSpec(
        data_container=HealthView,
        description="Degraded: the tail is down or behind the log",
        generate_examples=False,
    ),
}


@get("/health", operation_id="health", tags=["service"], responses=_DEGRADED)
async def health(runtime: Runtime) -> Response[HealthView]:
    """Answered by the service itself, never proxied."""
    return await _health(runtime)


@get("/v1/health", operation_id="healthV1", tags=["service"], responses=_DEGRADED)
async def health_v1(runtime: Runtime) -> Response[HealthView]:
    """llama-server's second health path, same answer."""
    return await _health(runtime)


async def _health(runtime: Runtime) -> Response[HealthView]:
    tail = await runtime.live.health()
    healthy = tail.up and tail.lag_ms <= runtime.settings.tail_lag_limit * 1000
    state = runtime.live.state
    body = HealthView(
        status="ok" if healthy else "degraded",
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
        open_streams=runtime.open_streams,
        queued_requests=runtime.instances.queue_length,
        requests_in_flight=sum(runtime.instances.busy.values()),
        in_flight_by_model={model: n for model, n in sorted(runtime.instances.busy.items()) if n},
        anomalies=state.anomalies,
        last_anomaly=state.last_anomaly,
        warnings=list(runtime.warnings),
    )
    return Response(body, status_code=200 if healthy else 503)
