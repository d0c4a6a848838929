"""``GET /metrics``: the router's own Prometheus metrics (:mod:`service.metrics`),
or with ``?model=`` that model's worker's (llama-server's ``llamacpp:*`` names),
as llama.cpp's router routes it."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.openapi.datastructures import ResponseSpec

from service.api.controllers._proxy_routes import Autoload
from service.api.proxy import Forwarding, proxy_request
from service.api.schemas import ModelParam, problems
from service.live_state import LiveState
from service.metrics import CONTENT_TYPE, RouterMetrics


@get(
    "/metrics",
    operation_id="getMetrics",
    tags=["inference"],
    responses={
        200: ResponseSpec(
            data_container=str,
            media_type="text/plain",
            description="Prometheus text format: the router's own series; with `?model=`, that model's worker's",
            generate_examples=False,
        ),
        **problems(400, 404, 409, 413, 503),
    },
)
async def get_metrics(
    request: Request[Any, Any, Any],
    forwarding: Forwarding,
    live: LiveState,
    metrics: RouterMetrics,
    model: ModelParam | None = None,
    autoload: Autoload = None,
) -> Response[Any]:
    """Prometheus text: models, instances, loads, crashes, downloads, queue, proxied
    requests and the log's position (docs/operations.md lists every series)."""
    if model is not None:
        return await proxy_request(request, forwarding, model.strip(), autoload)
    tail = await live.health()
    return Response(content=metrics.render(tail), media_type=CONTENT_TYPE)
