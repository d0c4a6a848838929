"""``GET /health``: liveness plus the log position the fold has reached."""

from __future__ import annotations

from typing import Any

from litestar import get

from service import __version__
from service.api.runtime import Runtime


@get("/health", operation_id="health", tags=["service"])
async def health(runtime: Runtime) -> dict[str, Any]:
    """Answered by the service itself, never proxied."""
    return {
        "status": "ok",
        "version": __version__,
        "position": runtime.live.position,
        "open_streams": runtime.open_streams,
        "queued_requests": runtime.instances.queue_length,
        "requests_in_flight": sum(runtime.instances.busy.values()),
        "anomalies": runtime.live.state.anomalies,
        "last_anomaly": runtime.live.state.last_anomaly,
    }
