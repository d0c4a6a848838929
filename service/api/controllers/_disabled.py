"""llama-server's routes for features modelrouter does not offer, answered as llama-server answers
them while they are off: 403 ``{"error": {"message": "this feature is disabled", "type":
"feature_disabled"}}`` (``server.cpp``'s ``res_403``).

``/cors-proxy`` is llama-server's experimental MCP CORS proxy for its web UI (on only with
``--ui-mcp-proxy``); ``/tools`` its built-in agent tools (``--tools``). modelrouter serves no
such web UI, and an open proxy would let any page that reaches the service fetch any URL the
service reaches, so both stay off whatever the flags say (docs/llama-cpp-compat.md).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, route
from litestar.enums import HttpMethod

from service.api.problems import Problem, problem_response
from service.api.schemas import problems

DISABLED = "this feature is disabled"
"""llama-server's message, word for word."""


def _disabled(path: str, method: HttpMethod, operation: str) -> Any:
    # One handler per method: an OpenAPI operation id names one method's operation.
    @route(
        path,
        http_method=method,
        operation_id=method.value.lower() + operation,
        tags=["service"],
        responses=problems(403),
        description=f"llama-server's `{path}`: off in modelrouter (403, llama-server's `feature_disabled`).",
    )
    async def handler(request: Request[Any, Any, Any]) -> Response[Any]:
        problem = Problem(403, "feature_disabled", DISABLED, error={"message": DISABLED, "type": "feature_disabled"})
        return problem_response(request, problem)

    return handler


disabled_routes = [
    _disabled(path, method, operation)
    for path, operation in (("/cors-proxy", "CorsProxy"), ("/tools", "Tools"))
    for method in (HttpMethod.GET, HttpMethod.POST)
]
"""The refused routes, for the route collection."""
