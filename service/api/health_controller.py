"""``GET /health``: liveness, and whether the live state is current.

Answers 503 while the tail that keeps the fold current is down, or behind by
more than ``tail_lag_limit`` seconds: everything the service decides comes
from that state, so a load balancer should not send it traffic meanwhile.
"""

from __future__ import annotations

from typing import Any

from litestar import Response, get

from service import __version__
from service.runtime import Runtime


@get("/health", operation_id="health", tags=["service"])
async def health(runtime: Runtime) -> Response[dict[str, Any]]:
    """Answered by the service itself, never proxied."""
    tail = await runtime.live.health()
    healthy = tail.up and tail.lag_ms <= runtime.settings.tail_lag_limit * 1000
    state = runtime.live.state
    body = {
        "status": "ok" if healthy else "degraded",
        "version": __version__,
        "position": tail.position,
        "tail": {
            "up": tail.up,
            "head": tail.head,
            "lag_events": tail.lag_events,
            "lag_ms": tail.lag_ms,
            "restarts": tail.restarts,
            "last_error": tail.last_error,
        },
        "open_streams": runtime.open_streams,
        "queued_requests": runtime.instances.queue_length,
        "requests_in_flight": sum(runtime.instances.busy.values()),
        "anomalies": state.anomalies,
        "last_anomaly": state.last_anomaly,
        "warnings": list(runtime.warnings),
    }
    return Response(body, status_code=200 if healthy else 503)
